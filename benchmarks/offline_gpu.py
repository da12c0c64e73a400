"""Offline engineer on an H100: every bundled case at full size.

For each case: generate the candidate (codegen time), compile its kernels (first call),
check its outputs against eager, and time eager, torch.compile (default mode) and the
candidate with triton.testing.do_bench (median). The case's precision (TF32 or strict) is
applied before any timing, so eager and torch.compile use TF32 exactly where the harness
would. Matmul cases are timed with each BACKEND of their matmul kernels (`triton`: one
fused template kernel; `cublas`: torch's product + the fused Triton epilogue) besides the
default. The floor uses harness.roofline's measured ceilings of this GPU when it has them.
Prints a markdown table last.

    python benchmarks/offline_gpu.py [--rounds N] [CASE ...]

With `--rounds N` (default 1) eager, torch.compile and the candidate are timed N times each,
interleaved (eager, compile, kopt, eager, ...), after 2 s of the kopt forward to bring the
clocks to their loaded state, and each column is the median of its N medians: a power-capped
H100's SM clock drifts over seconds under GEMM load, and timing the three one after another
lets that drift decide a 2% comparison (the rounds' spread is printed per variant).
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kopt.harness.case import load_case  # noqa: E402
from kopt.harness.compare import compare_outputs  # noqa: E402
from kopt.harness.data import agent_provide_inputs, build_model  # noqa: E402
from kopt.harness.runner import apply_precision  # noqa: E402
from kopt.harness.tolerance import tolerance_for  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402

COPY_GBPS = 3000.0  # H100 SXM device copy, unless harness.roofline measured it
BF16_TFLOPS = 790.0
FP32_TFLOPS = 60.0


def _bytes_flops(case, model, inputs) -> tuple[float, float]:
    tensors = [t for t in list(inputs.args) + list(inputs.kwargs.values()) if isinstance(t, torch.Tensor)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    nbytes += sum(p.numel() * p.element_size() for p in model.state_dict().values())
    with torch.no_grad():
        out = model(*inputs.args, **inputs.kwargs)
    outs = out if isinstance(out, (tuple, list)) else [out]
    nbytes += sum(o.numel() * o.element_size() for o in outs)
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as fc, torch.no_grad():
            model(*inputs.args, **inputs.kwargs)
        flops = float(fc.get_total_flops())
    except Exception:  # noqa: BLE001
        flops = 0.0
    return nbytes, flops


def _floor_ms(nbytes: float, flops: float, dtype: torch.dtype) -> float:
    rate = BF16_TFLOPS if dtype in (torch.bfloat16, torch.float16) else FP32_TFLOPS
    return max(nbytes / (COPY_GBPS * 1e9), flops / (rate * 1e12)) * 1e3


def _measured_floor_ms(case) -> float | None:
    """The floor at this GPU's measured ceilings (harness.roofline), or None."""
    try:
        from kopt.harness import roofline

        ceil = roofline.ceilings("cuda")
        cost = roofline.case_cost(case, "main")
        return roofline.floor_ms(cost, ceil, roofline.case_dtype(case, "main"), case.manifest.precision)
    except Exception as err:  # noqa: BLE001 - fall back to the nominal H100 figures
        print(f"measured ceilings unavailable ({type(err).__name__}: {err}); nominal H100 floor", flush=True)
        return None


def bench(name: str, rounds: int = 1) -> dict:
    case = load_case(name)
    t0 = time.perf_counter()
    result = generate_candidate(case)
    codegen_s = time.perf_counter() - t0
    tmp = Path(tempfile.mkdtemp()) / f"{name}.py"
    tmp.write_text(result.source)
    spec = importlib.util.spec_from_file_location(f"cand_{name}", tmp)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    apply_precision(case.manifest.precision)  # TF32 for eager and compile too, as the harness does
    ref = build_model(case, "main", device="cuda")
    new = build_model(case, "main", device="cuda", cls=mod.ModelNew)
    sets = [agent_provide_inputs(case, "main", s, device="cuda") for s in range(3)]
    inp = sets[0]
    with torch.no_grad():
        t0 = time.perf_counter()
        got = new(*inp.args, **inp.kwargs)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        want = ref(*inp.args, **inp.kwargs)
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    cmp = compare_outputs(list(got), list(want), {w.dtype: tolerance_for(case, w.dtype) for w in want})
    compiled = torch.compile(ref)
    i = [0]

    def runner(m):
        def run():
            x = sets[i[0] % len(sets)]  # rotate input buffers
            i[0] += 1
            with torch.no_grad():
                m(*x.args, **x.kwargs)
        return run

    def timed(m) -> float:
        return triton.testing.do_bench(runner(m), warmup=25, rep=200, return_mode="median")

    variants = (("eager", ref), ("compile", compiled), ("kopt", new))
    if rounds > 1:
        for m in (ref, compiled):  # compile (and autotune) outside the rounds
            runner(m)()
        warm, t_end = runner(new), time.perf_counter() + 2.0
        while time.perf_counter() < t_end:
            warm()
        torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k, _m in variants}
    for _ in range(rounds):
        for k, m in variants:
            samples[k].append(timed(m))
    times = {k: statistics.median(v) for k, v in samples.items()}
    spread = {k: 100 * (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
    backends = {}
    matmuls = [k for k, cfg in mod.KOPT_CONFIG.items() if "BACKEND" in cfg]
    default_backend = ",".join(sorted({mod.KOPT_CONFIG[k]["BACKEND"] for k in matmuls}))
    for backend in ("triton", "cublas"):
        if not matmuls:
            break
        saved = {k: mod.KOPT_CONFIG[k]["BACKEND"] for k in matmuls}
        for k in matmuls:
            if backend in mod.KOPT_TUNABLES[k]["BACKEND"]:
                mod.KOPT_CONFIG[k]["BACKEND"] = backend
        with torch.no_grad():
            g = new(*inp.args, **inp.kwargs)
        g = g if isinstance(g, (tuple, list)) else [g]
        ok = compare_outputs(list(g), list(want), {w.dtype: tolerance_for(case, w.dtype) for w in want}).ok
        backends[backend] = timed(new) if ok else float("nan")
        mod.KOPT_CONFIG.update({k: {**mod.KOPT_CONFIG[k], "BACKEND": v} for k, v in saved.items()})
    nbytes, flops = _bytes_flops(case, ref, inp)
    floor = _measured_floor_ms(case) or _floor_ms(nbytes, flops, want[0].dtype)
    best = min([times["kopt"], *[t for t in backends.values() if t == t]])
    return {"case": name, "kernels": len(result.kernels), "codegen_s": codegen_s,
            "compile_s": compile_s, "correct": cmp.ok, **times, "floor_ms": floor,
            "backend": default_backend, "triton_ms": backends.get("triton"), "cublas_ms": backends.get("cublas"),
            "best": best, "pct_floor": 100 * floor / times["kopt"], "vs_eager": times["eager"] / times["kopt"],
            "vs_compile": times["compile"] / times["kopt"], "rounds": rounds,
            "spread_pct": {k: round(v, 2) for k, v in spread.items()},
            "note": "" if cmp.ok else cmp.to_text()[:80]}


def main(argv: list[str]) -> None:
    t0 = time.perf_counter()
    import torch._dynamo  # noqa: F401 - export's machinery, imported on its first use: once
    import torch.export._trace  # noqa: F401 - per process, not any one case's codegen time

    print(f"import torch.export's tracer: {time.perf_counter() - t0:.2f} s (once per process)", flush=True)
    rounds = 1
    if argv[:1] == ["--rounds"]:
        rounds, argv = int(argv[1]), argv[2:]
    names = argv or sorted(p.name for p in (ROOT / "cases").iterdir() if (p / "manifest.yaml").is_file())
    rows = []
    for n in names:
        try:
            rows.append(bench(n, rounds))
        except Exception as err:  # noqa: BLE001 - report and go on
            rows.append({"case": n, "note": f"{type(err).__name__}: {str(err)[:100]}"})
        print(rows[-1], flush=True)
    print()
    print("| case | kernels | codegen s | compile s | correct | eager ms | compile ms | kopt ms | "
          "backend | triton ms | cublas ms | % floor | vs eager | vs compile | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def ms(v) -> str:
        return "" if v is None else f"{v:.3f}"

    for r in rows:
        if "kopt" not in r:
            print(f"| {r['case']} | | | | | | | | | | | | | | {r['note']} |")
            continue
        print(f"| {r['case']} | {r['kernels']} | {r['codegen_s']:.2f} | {r['compile_s']:.2f} | {r['correct']} | "
              f"{r['eager']:.3f} | {r['compile']:.3f} | {r['kopt']:.3f} | {r['backend']} | {ms(r['triton_ms'])} | "
              f"{ms(r['cublas_ms'])} | {r['pct_floor']:.0f}% | "
              f"{r['vs_eager']:.2f}x | {r['vs_compile']:.2f}x | {r['note']} |")
    ok = [r for r in rows if "kopt" in r]
    if ok:
        ge = math.exp(sum(math.log(r["vs_eager"]) for r in ok) / len(ok))
        gc = math.exp(sum(math.log(r["vs_compile"]) for r in ok) / len(ok))
        print(f"| geomean | | | | | | | | | {ge:.2f}x | {gc:.2f}x | |")


if __name__ == "__main__":
    main(sys.argv[1:])
