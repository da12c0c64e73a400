"""Products that share their input, one library call or several: what concatenating their
weights would gain on a decoder block's projections (bf16, cuBLAS through torch.mm).

    python benchmarks/horizontal_gemm_gpu.py

For each token count M and each group of weights (LLaMA-7B's q/k/v with grouped-query k and v,
its gate and up projections, GPT-2's q/k/v), the products one by one against one product with
the weights concatenated along their output features (the concatenation made once, outside
the timing, as a cached weight would be). triton.testing.do_bench medians, launched from
Python and replayed as CUDA graphs (no host gaps between launches). Markdown table last.
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.testing

GROUPS = {
    "llama q/k/v (4096 -> 4096, 1024, 1024)": (4096, (4096, 1024, 1024)),
    "llama gate/up (4096 -> 11008, 11008)": (4096, (11008, 11008)),
    "gpt2 q/k/v (768 -> 768 x3)": (768, (768, 768, 768)),
}


def graphed(fn) -> float:
    """fn's median as a replayed CUDA graph of 10 calls, per call: the launches' host gaps gone,
    as in a candidate whose forward replays a graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            fn()
    return triton.testing.do_bench(graph.replay, rep=200) / 10


def main() -> int:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    rows = []
    for m in (1024, 8192):
        for what, (k, ns) in GROUPS.items():
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for n in ns]
            cat = torch.cat(ws, 0)

            def apart(a=a, ws=ws):
                return [torch.mm(a, w.t()) for w in ws]

            def together(a=a, cat=cat, ns=ns):
                y = torch.mm(a, cat.t())
                return y.split(list(ns), 1)

            for p, q in zip(apart(), together(), strict=True):
                torch.testing.assert_close(p, q, rtol=2e-2, atol=2e-2)
            t_apart = triton.testing.do_bench(apart, rep=200)
            t_together = triton.testing.do_bench(together, rep=200)
            g_apart, g_together = graphed(apart), graphed(together)
            flops = 2 * m * k * sum(ns)
            rows.append((m, what, t_apart, t_together, g_apart, g_together, flops))
            print(f"M={m} {what}: apart {t_apart:.4f} ms, together {t_together:.4f} ms; "
                  f"replayed as graphs {g_apart:.4f} / {g_together:.4f} ms")
    print("\n| M | weights | apart ms | together ms | gain | graphs: apart ms | together ms | gain |\n"
          "|---:|---|---:|---:|---:|---:|---:|---:|")
    for m, what, t_apart, t_together, g_apart, g_together, _flops in rows:
        print(f"| {m} | {what} | {t_apart:.4f} | {t_together:.4f} | {t_apart / t_together:.3f}x | "
              f"{g_apart:.4f} | {g_together:.4f} | {g_apart / g_together:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
