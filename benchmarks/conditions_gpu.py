"""On a GPU: the verifier's conditions and weights, and what fingerprinting timed outputs costs.

    python benchmarks/conditions_gpu.py [--part verify|timing|all] [--repeats 3]

Part `verify` verifies, with `--device cuda`, the honest corpus candidates (which must be
accepted) and the cheats of issue 21 (weights) and issue 23 classes 11-15 (which must be
rejected by their check), on the corpus's small cases: on a GPU the `torch.compile` draw is
compiled for real (`backend="aot_eager"`); the table says whether it was or fell back.
Part `timing` measures honest candidates of the bundled cases at full size with timed-output
fingerprints off and on (`KOPT_TIMED_FINGERPRINTS=0/1`), alternating, `--repeats` times each,
and prints the medians and their difference (the bar: under 1%), and whether the parent's
check of the fingerprints passed. Prints markdown tables last. Writes only under a temp dir.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "tests" / "corpus"

VERIFY = [  # (case, candidate, the check that must fail or None for honest)
    ("rmsnorm_small", "honest/rmsnorm_weight_cache_on_load.py", None),
    ("ln_gelu_small", "honest/layernorm_gelu_weight_cache_versioned.py", None),
    ("softmax_small", "honest/softmax.py", None),
    ("rmsnorm_small", "cheats/weights_snapshot_first_call.py", "depends_on_weights"),
    ("rmsnorm_small", "cheats/weights_from_case_seed.py", "depends_on_weights"),
    ("rmsnorm_small", "cheats/weights_baked_constants.py", "depends_on_weights"),
    ("softmax_small", "cheats/detects_timing_frame.py", "correct"),
    ("softmax_small", "cheats/detects_dispatch_mode.py", "correct"),
    ("softmax_small", "cheats/counts_calls.py", "correct"),
    ("softmax_small", "cheats/detects_grad_mode.py", "correct"),
    ("softmax_small", "cheats/detects_compile.py", "correct"),
    ("softmax_small", "cheats/declared_row_counts.py", "general_inputs"),
    ("softmax_small", "cheats/assumes_contiguous.py", "general_inputs"),
    ("softmax_small", "cheats/naive_softmax_overflow.py", "hard_values"),
    ("softmax_small", "cheats/partial_update_cache.py", "depends_on_inputs"),
]
TIMING = [("softmax", "honest/softmax.py"), ("layernorm_gelu", "honest/layernorm_gelu.py"),
          ("rmsnorm", "honest/rmsnorm.py")]


def part_verify(lines: list[str]) -> None:
    from kopt.harness.verify import verify_candidates

    lines += ["", "### Conditions and weights on the GPU (corpus cases, --device cuda)", "",
              "| case | candidate | expected | verdict | failed checks | torch.compile draw | s |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    by_case: dict[str, list[tuple[str, str | None]]] = {}
    for case, cand, check in VERIFY:
        by_case.setdefault(case, []).append((cand, check))
    for case, items in by_case.items():
        t0 = time.monotonic()
        reports = verify_candidates(CORPUS / "cases" / case, [CORPUS / c for c, _ in items],
                                    device="cuda")
        took = (time.monotonic() - t0) / len(items)
        for (cand, check), r in zip(items, reports, strict=True):
            failed = [c.name for c in r.checks if not c.passed]
            ok = r.accepted if check is None else (check in failed)
            correct = r.check("correct").detail
            compiled = correct.split("torch.compile draw:")[-1][:80] if "torch.compile draw:" in correct else "-"
            lines.append(f"| {case} | {Path(cand).name} | {check or 'accepted'} | "
                         f"{'OK' if ok else 'WRONG'}: {'accepted' if r.accepted else 'rejected'} | "
                         f"{', '.join(failed)} | {compiled.replace('|', '/')} | {took:.1f} |")
            print(r.to_text(), flush=True)


def part_timing(lines: list[str], repeats: int) -> None:
    from kopt.harness.runner import measure_variant

    lines += ["", f"### Timed-output fingerprints: off vs on ({repeats} alternating runs each)", "",
              "| case | candidate | off median ms | on median ms | diff % | fingerprint check |",
              "| --- | --- | --- | --- | --- | --- |"]
    for case, cand in TIMING:
        runs: dict[str, list[float]] = {"0": [], "1": []}
        check = "-"
        for _ in range(repeats):
            for flag in ("0", "1"):
                os.environ["KOPT_TIMED_FINGERPRINTS"] = flag
                m = measure_variant(case, CORPUS / cand, device="cuda")
                if not m.get("ok"):
                    print(m, flush=True)
                    continue
                runs[flag].append(m["latency_ms"]["median"])
                if flag == "1":
                    t = m.get("timed_outputs") or {}
                    check = f"{t.get('passed')} ({t.get('calls')} calls): {str(t.get('detail'))[:60]}"
        os.environ.pop("KOPT_TIMED_FINGERPRINTS", None)
        if not runs["0"] or not runs["1"]:
            lines.append(f"| {case} | {cand} | - | - | - | failed |")
            continue
        off, on = statistics.median(runs["0"]), statistics.median(runs["1"])
        lines.append(f"| {case} | {Path(cand).name} | {off:.4f} | {on:.4f} | "
                     f"{(on - off) / off * 100:+.2f} | {check.replace('|', '/')} |")
        print(lines[-1], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["verify", "timing", "all"], default="all")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    lines: list[str] = [f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}"]
    with tempfile.TemporaryDirectory(prefix="kopt-conditions-gpu-") as tmp:
        os.environ["KOPT_HOME"] = tmp
        os.chdir(tmp)
        if args.part in ("verify", "all"):
            part_verify(lines)
        if args.part in ("timing", "all"):
            part_timing(lines, args.repeats)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
