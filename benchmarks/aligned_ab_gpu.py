"""Pointwise kernels with and without the ALIGNED path, side by side: each generated kernel's
device time per forward when its launcher may pass ALIGNED=True (no block wraps a coordinate:
scalars and contiguous lanes the compiler vectorises) and when it always passes False (the
per-lane `tl.where` of a possible wrap).

    python benchmarks/aligned_ab_gpu.py CASE|FILE.py ...

CASE: a bundled case or case directory; FILE.py: a KernelBench problem (imported as
`kopt import-kernelbench` does). The candidate's forward is launched op by op (no CUDA
graph) and profiled over 20 forwards (torch.profiler); the whole forward's median from
triton.testing.do_bench beside it. Markdown table last.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernel_times(fn) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / 20 / 1000 for e in prof.key_averages()
            if e.device_time_total > 0 and e.key.startswith("_g")}


def main() -> int:
    from kopt.harness.case import load_case, load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.verification.guards import set_precision
    from kopt.phases.engineers.offline import generate_candidate

    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    work = Path(tempfile.mkdtemp())
    rows = []
    for arg in sys.argv[1:]:
        p = Path(arg)
        if p.suffix == ".py":
            case = load_case_dir(import_kernelbench(p, name=f"p{p.stem.split('_')[0]}", out=work / p.stem))
        else:
            case = load_case(arg)
        source = generate_candidate(case).source
        file = work / f"{case.name}_candidate.py"
        file.write_text(source)
        spec = importlib.util.spec_from_file_location(f"cand_{case.name}", file)
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        mod.KOPT_GRAPH = False
        set_precision(case.manifest.precision)
        ref = build_model(case, "main", device="cuda")
        model = build_model(case, "main", cls=mod.ModelNew, device="cuda")
        model.load_state_dict(ref.state_dict())
        args = agent_provide_inputs(case, "main", 0, device="cuda").args
        aligned = getattr(mod, "_aligned", None)
        figures = {}
        for label in ("where per lane", "aligned"):
            if aligned is not None:
                mod._aligned = aligned if label == "aligned" else (lambda *_: False)
            with torch.no_grad():
                model(*args)
                ms = triton.testing.do_bench(lambda model=model, args=args: model(*args), rep=200)
                figures[label] = (ms, kernel_times(lambda model=model, args=args: model(*args)))
        for name in sorted(set(figures["aligned"][1]) | set(figures["where per lane"][1])):
            a = figures["where per lane"][1].get(name, float("nan"))
            b = figures["aligned"][1].get(name, float("nan"))
            rows.append((case.name, name, a, b))
        rows.append((case.name, "whole forward (do_bench)", figures["where per lane"][0], figures["aligned"][0]))
        print(f"--- {case.name}: {figures['where per lane'][0]:.4f} -> {figures['aligned'][0]:.4f} ms")
    print("\n| case | kernel | where per lane ms | aligned ms |\n|---|---|---:|---:|")
    for case, name, a, b in rows:
        print(f"| {case} | {name[:60]} | {a:.4f} | {b:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
