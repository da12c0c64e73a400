"""Is torch.compile's lead on KernelBench convolution problems its channels-last layout?

    python benchmarks/conv_layout_gpu.py FILE.py ...

For each problem: eager, torch.compile (default), torch.compile with the inductor's layout
optimisation off, and the model's first convolution alone in the model's layout and in
channels_last(_3d) (input and weight converted beforehand), with CUDA events (median of 50
after 10 warm-ups). One table row per problem.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys

import torch


def ms(fn, iters: int = 50, warm: int = 10) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def load(path: str):
    spec = importlib.util.spec_from_file_location("problem", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    import torch._inductor.config as inductor_config

    rows = []
    for path in sys.argv[1:]:
        mod = load(path)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).cuda().eval()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
        with torch.no_grad():
            eager = ms(lambda: model(*inputs))
            torch._dynamo.reset()
            comp = torch.compile(model)
            compiled = ms(lambda: comp(*inputs))
            torch._dynamo.reset()
            inductor_config.layout_optimization = False
            comp2 = torch.compile(model)
            no_layout = ms(lambda: comp2(*inputs))
            inductor_config.layout_optimization = True
            torch._dynamo.reset()
            conv = next(m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
            x = inputs[0]
            fmt = torch.channels_last_3d if x.dim() == 5 else torch.channels_last
            conv_ms = ms(lambda: conv(x))
            xc = x.contiguous(memory_format=fmt)
            convc = type(conv).__new__(type(conv))
            convc.__dict__ = dict(conv.__dict__)
            convc._parameters = {k: torch.nn.Parameter(v.detach().contiguous(memory_format=fmt))
                                 if v is not None and v.dim() == x.dim() else v
                                 for k, v in conv._parameters.items()}
            conv_cl = ms(lambda: convc(xc))
            to_cl = ms(lambda: x.contiguous(memory_format=fmt))
        name = path.rsplit("/", 1)[-1][:40]
        rows.append((name, eager, compiled, no_layout, conv_ms, conv_cl, to_cl))
        print(rows[-1], flush=True)
    print("| problem | eager ms | compile ms | compile, no layout opt ms | conv ms | conv channels-last ms | input to channels-last ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | " + " | ".join(f"{v:.3f}" for v in r[1:]) + " |")


if __name__ == "__main__":
    main()
