"""GPU check of the bundled cases and the KernelBench imports at full size (the lead runs it).

    python benchmarks/cases_gpu.py [--cases a,b] [--skip-kernelbench] [--budget-s 540]

For every bundled case and every input set that runs on the GPU (`main` and each `shapes`
entry) it builds the baseline, runs one eager forward and one `torch.compile` forward, and
reports: peak memory of the eager forward (does the case fit, does it fill the GPU?), and
whether torch.compile's output is within the case's tolerance of eager (SPEC.md's defaults
or the case's own). A tolerance that rejects torch.compile is too tight to be honest; the
`max_err/atol` column shows how much headroom a fused kernel has. For `precision: tf32` cases
it also reports the error of TF32 against strict float32.

Then every tests/kernelbench/*.py problem is imported (`import_kernelbench`) into a temporary
workspace and its main input set runs one eager forward on the GPU.

One failure does not stop the others; prints a markdown table last.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _set_precision(precision: str) -> None:
    import torch

    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def _errors(out: Any, ref: Any) -> tuple[float, float]:
    import torch

    d = (out.double() - ref.double())
    rel = float(d.norm() / ref.double().norm().clamp_min(1e-30))
    return float(d.abs().max()), rel if torch.isfinite(torch.tensor(rel)) else float("inf")


def _within(out: Any, ref: Any, tol: Any) -> bool:
    import torch

    if tol.exact:
        return bool(torch.equal(out, ref))
    o, r = out.double(), ref.double()
    elementwise = bool(((o - r).abs() <= tol.atol + tol.rtol * r.abs()).all())
    max_abs, rel = _errors(out, ref)
    return elementwise and rel < tol.rel


def check_case(case: Any, input_set: str) -> dict[str, Any]:
    import torch

    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.tolerance import tolerance_for

    _set_precision(case.manifest.precision)
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    model = build_model(case, input_set, device="cuda")
    inputs = agent_provide_inputs(case, input_set, cache=False, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        start = time.perf_counter()
        ref = model(*inputs.args, **inputs.kwargs)
        torch.cuda.synchronize()
        eager_s = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated()
    row: dict[str, Any] = {"case": case.name, "set": input_set, "dtype": str(ref.dtype)[6:],
                           "out": list(ref.shape), "inputs_gb": base / 1e9,
                           "peak_gb": peak / 1e9, "eager_first_ms": eager_s * 1e3,
                           "finite": bool(torch.isfinite(ref.float()).all())}
    tol = tolerance_for(case, ref.dtype)
    compiled = torch.compile(model)
    with torch.no_grad():
        out = compiled(*inputs.args, **inputs.kwargs)
    max_abs, rel = _errors(out, ref)
    row.update(tol=tol.describe(), compile_max_abs=max_abs, compile_rel=rel,
               compile_within_tol=_within(out, ref, tol),
               headroom=max_abs / tol.atol if tol.atol else float("nan"))
    if case.manifest.precision == "tf32":
        _set_precision("strict")
        with torch.no_grad():
            strict = model(*inputs.args, **inputs.kwargs)
        row["tf32_vs_strict_max_abs"], row["tf32_vs_strict_rel"] = _errors(ref, strict)
        row["tf32_within_tol"] = _within(ref, strict, tol)
    del model, inputs, ref, out, compiled
    return row


def check_kernelbench(file: Path, workspace: Path) -> dict[str, Any]:
    import torch

    from kopt.harness.case import load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench

    case = load_case_dir(import_kernelbench(file, out=workspace / "cases" / file.stem))
    model = build_model(case, "main", device="cuda")
    inputs = agent_provide_inputs(case, "main", cache=False, device="cuda")
    with torch.no_grad():
        out = model(*inputs.args, **inputs.kwargs)
    torch.cuda.synchronize()
    return {"case": f"kb:{file.stem}", "set": "main", "dtype": str(out.dtype)[6:],
            "out": list(out.shape), "finite": bool(torch.isfinite(out.float()).all())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated bundled case names (default: all)")
    parser.add_argument("--skip-kernelbench", action="store_true")
    parser.add_argument("--budget-s", type=float, default=540.0)
    args = parser.parse_args()
    workspace = Path(tempfile.mkdtemp(prefix="kopt-cases-gpu-"))
    os.environ["KOPT_HOME"] = str(workspace)

    import torch

    from kopt.harness.case import list_cases

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    wanted = set(args.cases.split(",")) if args.cases else None
    cases = [c for c in list_cases() if hasattr(c, "manifest")
             and (wanted is None or c.name in wanted)]
    deadline = time.monotonic() + args.budget_s
    rows: list[dict[str, Any]] = []
    left: list[str] = []
    for case in cases:
        for input_set in ["main"] + [f"shape{i}" for i in range(len(case.manifest.shapes))]:
            if time.monotonic() > deadline:
                left.append(f"{case.name}:{input_set}")
                continue
            try:
                rows.append(check_case(case, input_set))
            except Exception as err:  # report and go on
                traceback.print_exc()
                rows.append({"case": case.name, "set": input_set,
                             "error": f"{type(err).__name__}: {err}"[:200]})
            print(rows[-1], flush=True)
    if not args.skip_kernelbench:
        root = Path(__file__).resolve().parent.parent / "tests" / "kernelbench"
        for file in sorted(root.glob("*.py")):
            if time.monotonic() > deadline:
                left.append(f"kb:{file.stem}")
                continue
            try:
                rows.append(check_kernelbench(file, workspace))
            except Exception as err:
                rows.append({"case": f"kb:{file.stem}", "set": "main",
                             "error": f"{type(err).__name__}: {err}"[:200]})
            print(rows[-1], flush=True)

    print(f"\n## cases at full size on {torch.cuda.get_device_name()} "
          f"(torch {torch.__version__})\n")
    print("| case | set | dtype | out | peak GB | tolerance | compile max abs | compile rel "
          "| compile ok | max/atol | tf32 vs strict rel | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | {r['set']} | | | | | | | | | | ERROR {r['error']} |")
            continue
        print(f"| {r['case']} | {r['set']} | {r['dtype']} | {r['out']} "
              f"| {r.get('peak_gb', float('nan')):.2f} | {r.get('tol', '')} "
              f"| {r.get('compile_max_abs', float('nan')):.2e} "
              f"| {r.get('compile_rel', float('nan')):.2e} | {r.get('compile_within_tol', '')} "
              f"| {r.get('headroom', float('nan')):.2f} "
              f"| {r.get('tf32_vs_strict_rel', float('nan')):.2e} "
              f"| {'' if r['finite'] else 'NON-FINITE'} |")
    if left:
        print(f"\nnot run (budget): --cases {','.join(sorted({x.split(':')[0] for x in left}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
