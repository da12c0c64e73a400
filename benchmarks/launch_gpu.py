"""Where a launch-bound network's time goes on the GPU: host microseconds per launch (a Triton
kernel through `kernel[grid]`, through its compiled launcher, an aten op), and for each
KernelBench file given, one forward of eager, the offline engineer's ModelNew, and the same
ModelNew replayed as a CUDA graph (inputs copied in, outputs cloned out). For deciding what to
build, not for figures: no verifier, no sandbox.

Usage: python benchmarks/launch_gpu.py [FILE.py ...]
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


def _per_call_us(fn, reps: int = 2000) -> float:  # type: ignore[no-untyped-def]
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e6


def launches() -> list[tuple[str, float]]:
    x = torch.randn(1024, device="cuda")
    y = torch.randn_like(x)
    out = torch.empty_like(x)
    rows = [("aten add (out=)", _per_call_us(lambda: torch.add(x, y, out=out))),
            ("triton kernel[grid]", _per_call_us(lambda: _add_kernel[(1,)](x, y, out, 1024,
                                                                          BLOCK=1024)))]
    compiled = _add_kernel[(1,)](x, y, out, 1024, BLOCK=1024)
    try:
        runner = compiled[(1, 1, 1)]
        runner(x, y, out, 1024)
        torch.cuda.synchronize()
        assert torch.allclose(out, x + y)
        rows.append(("triton compiled[grid]", _per_call_us(lambda: runner(x, y, out, 1024))))
    except Exception as err:  # the compiled launcher's calling convention differs by version
        print(f"compiled launcher: {type(err).__name__}: {err}")
    return rows


def _graphed(model, args):  # type: ignore[no-untyped-def]
    static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(*static)

    def run(*xs):  # type: ignore[no-untyped-def]
        for s, a in zip(static, xs, strict=True):
            if isinstance(s, torch.Tensor):
                s.copy_(a)
        graph.replay()
        return out.clone() if isinstance(out, torch.Tensor) else [o.clone() for o in out]
    return run


def network(file: Path, root: Path) -> dict[str, float | str]:
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.sizing import DEFAULT_MAX_ELEMENTS, fit_case_dir
    from kopt.phases.engineers.offline import generate_candidate

    directory = import_kernelbench(file, name=file.stem, out=root / file.stem, report={},
                                   warm=True)
    fit_case_dir(load_case_dir(directory), DEFAULT_MAX_ELEMENTS)
    case = load_case_dir(directory)
    result = generate_candidate(case)
    cand = root / f"{file.stem}_cand.py"
    cand.write_text(result.source)
    spec = importlib.util.spec_from_file_location(f"cand_{file.stem}", cand)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = agent_provide_inputs(case, "main", device="cuda")
    model = build_model(case, "main", device="cuda")
    new = build_model(case, "main", device="cuda", cls=module.ModelNew)
    args = inputs.args
    row: dict[str, float | str] = {"problem": file.stem}
    with torch.no_grad():
        ref = model(*args)
        row["eager"] = _per_call_us(lambda: model(*args), 30) / 1e3
        got = new(*args)
        row["kopt"] = _per_call_us(lambda: new(*args), 30) / 1e3
        try:
            graphed = _graphed(new, args)
            g = graphed(*args)
            row["kopt_graph"] = _per_call_us(lambda: graphed(*args), 30) / 1e3
            row["graph_err"] = float((g - ref).abs().max()) if isinstance(g, torch.Tensor) else -1
        except Exception as err:
            row["kopt_graph"] = f"{type(err).__name__}: {str(err)[:120]}"
        try:
            eg = _graphed(model, args)
            eg(*args)
            row["eager_graph"] = _per_call_us(lambda: eg(*args), 30) / 1e3
        except Exception as err:
            row["eager_graph"] = f"{type(err).__name__}: {str(err)[:120]}"
        row["kopt_err"] = float((got - ref).abs().max()) if isinstance(got, torch.Tensor) else -1
        compiled = torch.compile(model)
        compiled(*args)
        row["compile"] = _per_call_us(lambda: compiled(*args), 30) / 1e3
    return row


def main() -> int:
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
    for name, us in launches():
        print(f"{name:<24} {us:7.2f} us per call")
    root = Path(tempfile.mkdtemp(prefix="kopt-launch-"))
    rows = []
    for f in sys.argv[1:]:
        try:
            rows.append(network(Path(f), root))
        except Exception as err:
            print(f"{f}: {type(err).__name__}: {str(err)[:300]}")
        print(rows[-1] if rows else "", flush=True)
    keys = ["eager", "eager_graph", "compile", "kopt", "kopt_graph"]
    print("| problem | " + " | ".join(f"{k} ms" for k in keys) + " |")
    for r in rows:
        cells = [f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k)) for k in keys]
        print(f"| {r['problem']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
