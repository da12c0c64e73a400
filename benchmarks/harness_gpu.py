"""GPU run of the measuring harness: ceilings, `kopt baseline` of every bundled case at full
size, and the timer's noise (the same variant timed five times, spread of the medians).

    python benchmarks/harness_gpu.py [--cases a,b] [--repeats 5] [--budget-s 540] [--skip-compile]
        [--variants eager,compile] [--no-noise] [--device cuda|cpu]

All 11 cases with torch.compile take more than one 10-minute slot; split it, e.g.
    python benchmarks/harness_gpu.py --variants eager            # ~3-4 min: eager + noise
    python benchmarks/harness_gpu.py --variants compile --no-noise   # compile medians

Each case's eager and torch.compile variants run through `measure_variant` (one worker each,
as `kopt baseline` does); the noise check times eager `--repeats` times in this process with
the same timer. One case failing does not stop the others; cases left when `--budget-s`
runs out are listed so a second run can pass them with `--cases`. Writes the full JSON to
`$OUT/harness_gpu.json` when `$OUT` is set; prints a markdown table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# BENCHMARKS.md's bar for the timer: five medians of one variant within 1% of each other.
MAX_SPREAD_PCT = 1.0


def _noise(case: Any, repeats: int, device: str) -> dict[str, Any]:
    import torch

    from kopt.harness.runner import make_case_forward
    from kopt.harness.timing import time_callable

    fwd = make_case_forward(case, device=device)
    fwd.attach_buffer_sets()
    timings = [time_callable(fwd, device=device, rotate=fwd.rotate) for _ in range(repeats)]
    medians = [t.median_ms for t in timings]
    mid = sorted(medians)[len(medians) // 2]
    spread = (max(medians) - min(medians)) / mid * 100 if mid > 0 else None
    result = {"medians_ms": medians, "spread_pct": spread,
              "samples": [t.samples for t in timings], "rel_err": [t.rel_err for t in timings],
              "stop_reasons": [t.stop_reason for t in timings],
              "deferred_work_suspected": [t.deferred_work_suspected() for t in timings]}
    del fwd
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


class _Skipped(Exception):
    """--no-noise: this case's repeated-median check is not run."""


def _timer_selfcheck() -> dict[str, Any]:
    """The timer on known workloads: an L2-resident copy is slower with the flush than
    without (the flush works); matmuls on a side stream are flagged, on the current stream not."""
    import torch

    from kopt.harness.timing import time_callable

    src = torch.randn(2 * 2**20, device="cuda")  # 8 MiB: fits in L2 when not flushed
    dst = torch.empty_like(src)
    hot = time_callable(lambda: dst.copy_(src), device="cuda", flush_l2=False).median_ms
    cold = time_callable(lambda: dst.copy_(src), device="cuda", flush_l2=True).median_ms
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def on_side_stream() -> None:
        with torch.cuda.stream(side):
            for _ in range(10):
                a @ a

    honest = time_callable(lambda: a @ a, device="cuda")
    cheat = time_callable(on_side_stream, device="cuda")
    return {"copy_8mib_hot_ms": hot, "copy_8mib_flushed_ms": cold,
            "honest_flagged": honest.deferred_work_suspected(),
            "side_stream_event_ms": cheat.median_ms, "side_stream_wall_ms": cheat.sync_wall_ms,
            "side_stream_flagged": cheat.deferred_work_suspected()}


def _strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "environment"}


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=540.0,
                        help="start no new case after this many seconds")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--variants", default="eager,compile",
                        help="which variants to measure (split long runs: eager then compile)")
    parser.add_argument("--no-noise", action="store_true", help="skip the repeated-median check")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-variant worker timeout")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a dry run of this script on smoke inputs (no GPU figures)")
    args = parser.parse_args()

    os.environ.setdefault("KOPT_HOME", tempfile.mkdtemp(prefix="kopt-bench-"))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("harness_gpu.py needs a CUDA GPU (torch sees none)", file=sys.stderr)
        return 2
    from kopt.harness.case import Case, list_cases
    from kopt.harness.environment import describe_environment
    from kopt.harness.roofline import ceilings
    from kopt.harness.runner import measure_variant

    started = time.monotonic()
    env = describe_environment()
    ceil = ceilings(args.device, refresh=True)
    print(f"ceilings on {ceil.device_name}: copy {ceil.copy_gbps} GB/s, bf16 {ceil.bf16_tflops}, "
          f"fp16 {ceil.fp16_tflops}, tf32 {ceil.tf32_tflops}, fp32 {ceil.fp32_tflops} TFLOP/s",
          flush=True)
    try:
        selfcheck: dict[str, Any] | None = _timer_selfcheck() if args.device == "cuda" else None
        print(f"timer self-check: {selfcheck}", flush=True)
    except Exception as err:
        selfcheck = {"error": f"{type(err).__name__}: {err}"}
        traceback.print_exc()
    wanted = [c for c in args.cases.split(",") if c]
    found = list_cases()
    cases = [c for c in found if isinstance(c, Case) and (not wanted or c.name in wanted)]
    broken = [c.one_line() for c in found if not isinstance(c, Case)]
    missing = [w for w in wanted if w not in {c.name for c in cases}]

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for case in cases:
        if time.monotonic() - started > args.budget_s:
            skipped.append(case.name)
            continue
        row: dict[str, Any] = {"case": case.name, "errors": []}
        print(f"--- {case.name}", flush=True)
        variants = [v for v in args.variants.split(",")
                    if v and not (args.skip_compile and v == "compile")]
        for variant in variants:
            try:
                m = measure_variant(case, variant, device=args.device, timeout=args.timeout)
            except Exception as err:  # one case failing must not stop the others
                m = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            row[variant] = _strip(m)
            if not m.get("ok"):
                row["errors"].append(f"{variant}: {m.get('error')}")
            else:
                print(f"  {variant}: {m['latency_ms']['median']:.4f} ms, "
                      f"{_fmt(m['roofline']['pct_of_floor'], '.1f')}% of floor", flush=True)
        try:
            if args.no_noise:
                raise _Skipped
            row["noise"] = _noise(case, args.repeats, args.device)
            print(f"  noise: medians {[round(x, 4) for x in row['noise']['medians_ms']]}, "
                  f"spread {_fmt(row['noise']['spread_pct'], '.2f')}%", flush=True)
        except _Skipped:
            row["noise"] = None
        except Exception as err:
            row["noise"] = None
            row["errors"].append(f"noise: {type(err).__name__}: {err}")
            traceback.print_exc()
        rows.append(row)

    result = {"environment": env, "ceilings": ceil.to_dict(), "timer_selfcheck": selfcheck,
              "rows": rows, "skipped": skipped,
              "broken_cases": broken, "missing_cases": missing,
              "elapsed_s": round(time.monotonic() - started, 1)}
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "harness_gpu.json").write_text(json.dumps(result, indent=1, default=str))

    gpu = (env.get("gpu") or {}).get("name") or "none (cpu-interpreter dry run)"
    print()
    print(f"GPU {gpu}; torch {env['torch']}, triton {env.get('triton')}, CUDA {env.get('torch_cuda')}; "
          f"copy {ceil.copy_gbps} GB/s, bf16 {ceil.bf16_tflops} / tf32 {ceil.tf32_tflops} / "
          f"fp32 {ceil.fp32_tflops} TFLOP/s")
    if selfcheck and "error" not in selfcheck:
        print(f"timer: 8 MiB copy {selfcheck['copy_8mib_hot_ms']:.4f} ms L2-hot vs "
              f"{selfcheck['copy_8mib_flushed_ms']:.4f} ms flushed; side-stream matmuls "
              f"{'caught' if selfcheck['side_stream_flagged'] else 'NOT caught'} "
              f"(events {selfcheck['side_stream_event_ms']:.4f} ms, synchronized wall "
              f"{selfcheck['side_stream_wall_ms']:.4f} ms); honest matmul "
              f"{'wrongly flagged' if selfcheck['honest_flagged'] else 'not flagged'}")
    print()
    print("| case | dtype | bound | floor ms | eager ms | eager % floor | compile ms | "
          f"compile % floor | {args.repeats}x eager medians spread | status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        e, c = row.get("eager") or {}, row.get("compile") or {}
        roof = e.get("roofline") or c.get("roofline") or {}
        noise = row.get("noise") or {}
        spread = noise.get("spread_pct")
        status = "; ".join(row["errors"])[:160] or (
            "ok" if spread is None or spread <= MAX_SPREAD_PCT else f"spread > {MAX_SPREAD_PCT}%")
        print(f"| {row['case']} | {roof.get('dtype') or '-'} | {roof.get('bound') or '-'} | "
              f"{_fmt(roof.get('floor_ms'), '.4f')} | "
              f"{_fmt((e.get('latency_ms') or {}).get('median'), '.4f')} | "
              f"{_fmt(roof.get('pct_of_floor') if e.get('ok') else None, '.1f')} | "
              f"{_fmt((c.get('latency_ms') or {}).get('median'), '.4f')} | "
              f"{_fmt((c.get('roofline') or {}).get('pct_of_floor'), '.1f')} | "
              f"{_fmt(spread, '.2f')}{'%' if spread is not None else ''} | {status} |")
    if skipped:
        print(f"\nnot run (budget): --cases {','.join(skipped)}")
    if broken or missing:
        print(f"\nunusable cases: {broken + missing}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
