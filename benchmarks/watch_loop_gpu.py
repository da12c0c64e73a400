"""A saved edit in watch mode, timed as the workbench runs it: save -> new verification and timing.

    python benchmarks/watch_loop_gpu.py CASE CANDIDATE [--edits 3] [--idle 4]

Issue 19's bar: a saved edit in watch mode shows new verification and timing within 5 s. This
drives the workbench's own parts without a terminal: a `KernelWatcher` on a scratch worktree
(`kernels/NAME.py`), and for each save the `Backend.check_edit` the run screen's worker calls
(snapshot, verify, bench with the verdict). Each edit appends a comment to the candidate and
saves it the way editors do (a temporary file renamed over the kernel), after `--idle` seconds
(the user typing: the standby workers the last check used are replaced meanwhile); the edit is a
dead assignment in the first Triton kernel, which Triton compiles again as after a real edit. The first
check is the session's first (eager and torch.compile timed beside the edit); the later ones
reuse those baselines (`BaselineMemo`); then the same edits once more with the memo cleared
before each (every bench times all three, as before 2026-11-28). One line per edit: the
watcher's notice, the verification, the timing, the total, the verdict and the edit's median.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def edited(source: str, n: int) -> str:
    """The source with a dead assignment `kopt_edit = n` as the first statement of its first
    Triton kernel, so that the edit changes that kernel's own text (Triton compiles it again,
    as after a real edit); a trailing comment when no kernel is found."""
    lines = source.splitlines()
    at = next((i for i, line in enumerate(lines) if line.strip().startswith("@triton.jit")), None)
    if at is not None:
        for j in range(at + 1, len(lines)):
            if lines[j].rstrip().endswith(":") and not lines[j].lstrip().startswith("#"):
                body = next((ln for ln in lines[j + 1:] if ln.strip()), "    ")
                indent = body[:len(body) - len(body.lstrip())]
                return "\n".join(lines[:j + 1] + [f"{indent}kopt_edit = {n}"] + lines[j + 1:]) + "\n"
    return source + f"\n# edit {n}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("candidate")
    parser.add_argument("--edits", type=int, default=3)
    parser.add_argument("--idle", type=float, default=4.0)
    args = parser.parse_args()

    os.environ.setdefault("KOPT_WORKER_STANDBY", "2")  # as `kopt-tui` keeps them
    from kopt.workbench.backend import Backend
    from kopt.workbench.watch import KernelWatcher

    source = Path(args.candidate).read_text()
    root = Path(tempfile.mkdtemp(prefix="kopt-watch-loop-"))
    kernel = root / "kernels" / Path(args.candidate).name
    kernel.parent.mkdir(parents=True)
    kernel.write_text(source)
    saved: queue.Queue[set[Path]] = queue.Queue()
    watcher = KernelWatcher(root=root, on_change=saved.put)
    watcher.start()
    backend = Backend()
    totals: dict[str, list[float]] = {"kept": [], "fresh": []}
    n = 0
    for mode in ("kept", "fresh"):
        for i in range(args.edits + (1 if mode == "kept" else 0)):
            n += 1
            time.sleep(args.idle)
            if mode == "fresh" and backend._baselines is not None:
                backend._baselines.clear()
            tmp = kernel.with_name(f".{kernel.name}.tmp")
            tmp.write_text(edited(source, n))
            t0 = time.monotonic()
            os.replace(tmp, kernel)
            paths = saved.get(timeout=30)
            seen = time.monotonic()
            marks: dict[str, float] = {}

            def verified(report: dict, marks: dict[str, float] = marks) -> bool:
                marks["verified"] = time.monotonic()
                return True

            report, rows = backend.check_edit(args.case, next(iter(paths)), on_verified=verified)
            done = time.monotonic()
            total = done - t0
            cand = next((r for r in rows or [] if r["variant"] not in ("eager", "compile")), {})
            eager = next((r for r in rows or [] if r["variant"] == "eager"), {})
            which = "first" if mode == "kept" and i == 0 else mode
            if which != "first":
                totals[mode].append(total)
            print(f"edit {n} ({which}): total {total:.2f} s = notice {seen - t0:.2f} + verify "
                  f"{marks.get('verified', done) - seen:.2f} + bench {done - marks.get('verified', done):.2f}; "
                  f"accepted {report.get('accepted')}; edit {cand.get('median_ms')} ms, eager "
                  f"{eager.get('median_ms')} ms"
                  + (f" (kept, {eager['timed_s_ago']:.0f} s old)" if eager.get("timed_s_ago")
                     is not None else "") + (f"; note {cand.get('note')}" if cand.get("note") else ""),
                  flush=True)
            steps = cand.get("job_steps") or {}
            if steps:
                print("  timing job: " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()
                                                   if v >= 0.01), flush=True)
    watcher.stop()
    for mode, vals in totals.items():
        if vals:
            print(f"{mode} baselines: median {statistics.median(vals):.2f} s over {len(vals)} edit(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
