"""Wall time of `kopt verify` as a user runs it (the CLI, a fresh process each time), repeated.

    python benchmarks/verify_time_gpu.py CASE CANDIDATE [--repeats 3] [--device cuda|cpu] [--serve]

Issue 19's bar: a warm `kopt verify --device cuda` of a small candidate in at most 5 s. The
first run is cold (no standby worker, empty caches); later runs are warm. Prints one line per
run (seconds, verdict), then the median of the warm runs. `--serve`: the same runs again with
a `kopt serve` started first (its warm-up not counted): each run is then served.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("candidate")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--serve", action="store_true", help="also time the runs with `kopt serve`")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    _runs(args, {**env, "KOPT_SERVE": "0"}, "own process")
    _steps(args, env)
    if args.serve:
        _served(args, env)
    return 0


def _served(args: argparse.Namespace, env: dict[str, str]) -> None:
    """The runs again, each served by a `kopt serve` started (and warmed up) first."""
    t0 = time.monotonic()
    server = subprocess.Popen([sys.executable, "-m", "kopt", "serve", "--device", args.device],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert server.stdout is not None
    for line in server.stdout:
        print(f"  server: {line.rstrip()}", flush=True)
        if "serving `kopt" in line:
            break
    print(f"server ready in {time.monotonic() - t0:.1f} s", flush=True)
    try:
        _runs(args, env, "served")
    finally:
        subprocess.run([sys.executable, "-m", "kopt", "serve", "--stop"], env=env,
                       capture_output=True, text=True)
        rest, _ = server.communicate(timeout=60)
        print("\n".join(f"  server: {ln}" for ln in rest.strip().splitlines()[-8:]), flush=True)


def _runs(args: argparse.Namespace, env: dict[str, str], how: str) -> None:
    took: list[float] = []
    for i in range(args.repeats):
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "kopt", "verify", args.case, args.candidate,
                               "--device", args.device, "--json", "--timing"], capture_output=True, text=True,
                              env=env)
        took.append(time.monotonic() - t0)
        lines = done.stdout.strip().splitlines() or ["(no output)"]
        print(f"{how} run {i} ({'first' if i == 0 else 'warm'}): {took[-1]:.1f} s, exit {done.returncode}: "
              f"{(lines[-2] if len(lines) > 1 else lines[-1])[:120]}", flush=True)
        try:  # the CLI's own verification, by step (`timing` of its --json line)
            timing = json.loads(lines[-1]).get("timing") or {}
        except ValueError:
            timing = {}
        if timing:
            print(f"  verification {timing['elapsed_s']:.2f} s: " + ", ".join(
                f"{k} {v:.2f}" for k, v in timing["steps"].items()))
            for kind, d in timing["jobs"].items():
                print(f"  {kind} job {d['seconds']:.2f} s ({'standby' if d.get('standby') else 'cold'}): "
                      + ", ".join(f"{k} {v:.2f}" for k, v in (d.get("steps") or {}).items()
                                  if v >= 0.01))
        if done.returncode not in (0, 1):
            print(done.stderr[-2000:], flush=True)
    if len(took) > 1:
        print(f"{how}: warm median {statistics.median(took[1:]):.1f} s over {len(took) - 1} run(s)",
              flush=True)


def _steps(args: argparse.Namespace, env: dict[str, str]) -> None:
    # where a warm verification's seconds go: the same verification in one process, its steps
    t0 = time.monotonic()
    probe = subprocess.run([sys.executable, "-c", _STEPS, args.case, args.candidate, args.device],
                           capture_output=True, text=True, env=env)
    print(f"in one process ({time.monotonic() - t0:.1f} s):\n{probe.stdout.strip()[-2000:]}"
          f"{probe.stderr.strip()[-600:] if probe.returncode else ''}")


_STEPS = """
import sys, time
t0 = time.monotonic()
from kopt.harness.verify import verify_candidate
from kopt.harness.targets.resolve import resolve_target
from kopt.phases.breakdown import ClockedTarget, TimingBreakdown
imported = time.monotonic() - t0
for n in (1, 2):  # the second as watch mode and the TUI verify: standbys ready, nothing imported
    b = TimingBreakdown()
    t0 = time.monotonic()
    r = verify_candidate(sys.argv[1], sys.argv[2], device=sys.argv[3],
                         target=ClockedTarget(resolve_target(None), b))
    print(f"verification {n}: {time.monotonic() - t0:.2f} s (" + (f"import {imported:.2f} s, " if n == 1 else "")
          + ", ".join(f"{k} {v:.2f} s" for k, v in r.steps.items()) + f"), accepted {r.accepted}")
    for kind, d in b.to_dict()["jobs"].items():
        print(f"  {kind} job {d['seconds']:.2f} s ({'standby' if d.get('standby') else 'cold'}): "
              + ", ".join(f"{k} {v:.2f}" for k, v in (d.get("steps") or {}).items()))
"""


if __name__ == "__main__":
    raise SystemExit(main())
