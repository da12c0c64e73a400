"""On a GPU: the bundled whole models end to end, eager vs torch.compile vs kopt (issue 20).

    python benchmarks/models_gpu.py [--cases gpt2_block,llama_block,resnet_block]
                                    [--regions] [--skip-verify] [--smoke]

For each model at full size (main inputs): the offline engineer's candidate is generated,
verified (the real verifier: fresh draws, every `shapes` entry, poisoned outputs, isolated
reference) and timed side by side with eager and torch.compile by `harness.bench.bench_case`
(CUDA events, L2 flushed, rotated buffers), and the same candidate with its forward launched
op by op instead of replayed as a CUDA graph (`kopt op by op ms`). `--regions` also prints the
architect's region table (per-op eager times, floors from this GPU's ceilings). Prints each
model's figures as it ends and a markdown table last (for BENCHMARKS.md). On an H200 three
models take over 220 s (verification and torch.compile warm-ups included), two without
verification over 130 s: give it a call of its own. `--smoke` runs the same path on the CPU on
the smoke inputs (Triton interpreter; eager only, no torch.compile): a check that the script
works, not figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ["gpt2_block", "llama_block", "resnet_block"]


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def run_model(name: str, *, smoke: bool, verify: bool, regions: bool, out: Path,
              without_rewrites: bool = False) -> dict:
    from kopt.harness.bench import bench_case
    from kopt.harness.case import load_case
    from kopt.harness.verify import verify_candidate
    from kopt.phases.engineers.offline import generate_candidate

    case = load_case(name)
    device = "cpu" if smoke else "cuda"
    input_set = "smoke" if smoke else "main"
    t0 = time.perf_counter()
    result = generate_candidate(case, input_set=input_set)
    file = out / f"{name}.py"
    file.write_text(result.source)
    row = {"case": name, "kernels": len(result.kernels),
           "left": sorted({u["op"].split(".")[1] if "." in u["op"] else u["op"]
                           for u in result.unfused}),
           "codegen_s": time.perf_counter() - t0, "verified": None, "why": ""}
    print(f"{name}: {row['kernels']} kernel(s), left to PyTorch: {', '.join(row['left']) or '-'} "
          f"({row['codegen_s']:.1f} s)", flush=True)
    if verify:
        report = verify_candidate(case, file, device=device)
        row["verified"] = bool(report.accepted)
        if not report.accepted:
            row["why"] = ", ".join(report.failed())
            print(report.to_text(), flush=True)
    if regions:
        from kopt.phases.regions import profile_regions, profile_text

        print(profile_text(profile_regions(case, input_set, device)), flush=True)
    # the same kernels launched op by op (KOPT_GRAPH = False): what the suite's region choice
    # times against the graph's replay, which pays input and output copies
    from kopt.phases.source_edit import replace_value

    plain = out / f"{name}_op_by_op.py"
    plain.write_text(replace_value(result.source, "KOPT_GRAPH", False))
    files = [file, plain]
    if without_rewrites:  # the same model generated with the algebraic rewrites off, timed alongside
        bare = out / f"{name}_no_rewrites.py"
        bare.write_text(generate_candidate(case, input_set=input_set, rewrites=False).source)
        files.append(bare)
    rows = bench_case(case, files, device=device, unverified=True, input_set=input_set,
                      baselines=("eager",) if smoke else ("eager", "compile"))
    by = {r["variant"]: r for r in rows}
    eager, compiled = by.get("eager", {}), by.get("compile", {})
    mine, op_by_op = rows[-len(files)], rows[-len(files) + 1]
    row["op_by_op_ms"] = op_by_op.get("median_ms")
    if without_rewrites:
        row["no_rewrites_ms"] = rows[-1].get("median_ms")
    row.update({"eager_ms": eager.get("median_ms"), "compile_ms": compiled.get("median_ms"),
                "kopt_ms": mine.get("median_ms"), "vs_eager": mine.get("speedup_vs_eager"),
                "vs_compile": mine.get("speedup_vs_compile"),
                "pct_of_floor": mine.get("pct_of_floor"), "label": mine.get("timing_label"),
                "note": mine.get("note") or ""})
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(MODELS))
    ap.add_argument("--smoke", action="store_true", help="CPU, smoke inputs (a script check)")
    ap.add_argument("--skip-verify", action="store_true", help="time without verifying")
    ap.add_argument("--regions", action="store_true", help="print each model's region table")
    ap.add_argument("--without-rewrites", action="store_true",
                    help="also time each model generated with the algebraic rewrites off")
    args = ap.parse_args()
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    else:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --smoke for a CPU check", file=sys.stderr)
            return 2
    home = Path(tempfile.mkdtemp(prefix="kopt-models-"))
    os.environ.setdefault("KOPT_HOME", str(home))
    rows = []
    for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
        try:
            rows.append(run_model(name, smoke=args.smoke, verify=not args.skip_verify,
                                  regions=args.regions, out=home,
                                  without_rewrites=args.without_rewrites))
            r = rows[-1]  # as each model ends: a call cut at its time limit keeps what finished
            print(f"{name}: eager {_ms(r.get('eager_ms'))} ms, compile {_ms(r.get('compile_ms'))} ms, "
                  f"kopt {_ms(r.get('kopt_ms'))} ms ({_x(r.get('vs_eager'))} eager, "
                  f"{_x(r.get('vs_compile'))} compile, {_ms(r.get('op_by_op_ms'))} ms op by op"
                  f"{', ' + _ms(r.get('no_rewrites_ms')) + ' ms without rewrites' if args.without_rewrites else ''}), "
                  f"verified: {r.get('verified')}", flush=True)
        except Exception as err:  # noqa: BLE001 - one model's failure is its row
            rows.append({"case": name, "why": f"{type(err).__name__}: {err}"[:200]})
    label = next((r.get("label") for r in rows if r.get("label")), "-")
    print(f"\nwhole models end to end, median ms ({label}):\n")
    print("| model | eager ms | compile ms | kopt ms | vs eager | vs compile | % floor | "
          "kopt op by op ms | kernels | left to PyTorch | verified |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        pct = r.get("pct_of_floor")
        ver = {True: "yes", False: f"NO ({r.get('why')})", None: "not checked"}[r.get("verified")] \
            if "kernels" in r else f"failed: {r.get('why')}"
        print(f"| {r['case']} | {_ms(r.get('eager_ms'))} | {_ms(r.get('compile_ms'))} | "
              f"{_ms(r.get('kopt_ms'))} | {_x(r.get('vs_eager'))} | {_x(r.get('vs_compile'))} | "
              f"{'-' if pct is None else f'{pct:.0f}%'} | {_ms(r.get('op_by_op_ms'))} | "
              f"{r.get('kernels', '-')} | "
              f"{', '.join(r.get('left', [])) or '-'} | {ver} |")
    return 0 if all(r.get("verified") in (True, None) and "kernels" in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
