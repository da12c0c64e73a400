"""Full `kopt run`s of some cases, twice each (the second starts from the tuning memory the
first wrote), with where the seconds went. Run on a GPU machine from a scratch workspace:

    KOPT_HOME=/tmp/kopt-search python benchmarks/search_runs.py softmax layernorm_gelu
    python benchmarks/search_runs.py --standby 2 rmsnorm   # KOPT_WORKER_STANDBY=2, own workspace

Prints one row per run: wall seconds, the outcome, the optimizer's hypotheses, the
accelerator's trials and whether it started from the tuning memory, the integrator's
side-by-side rows (median, p20, p80; eager's and compile's kept or not), and seconds per phase and
per worker job kind, and per step inside each kind's jobs (from `kopt run --json`'s
`timing_breakdown`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(case: str, home: Path, standby: str | None = None) -> dict:
    env = {**os.environ, "KOPT_HOME": str(home), **({"KOPT_WORKER_STANDBY": standby} if standby else {}),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kopt", "run", case, "--yes", "--json"],
                          cwd=home, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"case": case, "wall_s": wall, "error": proc.stderr.strip()[-300:]}
    run_dir = home / "manifests" / result["run_id"]
    opt = json.loads((run_dir / "optimizer.json").read_text())["details"] \
        if (run_dir / "optimizer.json").is_file() else {}
    acc = json.loads((run_dir / "accelerator.json").read_text())["details"] \
        if (run_dir / "accelerator.json").is_file() else {}
    timings = []
    for f in sorted((run_dir / "artifacts").glob("*/metrics.json")):
        try:
            m = json.loads(f.read_text())
        except ValueError:
            continue
        t = m.get("timing") or {}
        timings.append(f"{f.parent.name} {t.get('median_ms', 0):.4f} ms x{t.get('samples')} "
                       f"({t.get('stop_reason')}, warm-up {t.get('warmup')}) "
                       f"timing {(m.get('steps') or {}).get('timing', 0):.1f}s")
    # the integrator's side-by-side rows: eager and compile kept from an earlier bench
    # (`timed_s_ago`) or timed now, and the final kernel, each with its spread
    final = []
    side = run_dir / "integrator" / "timing.json"
    for label, row in (json.loads(side.read_text()).items() if side.is_file() else []):
        lat = (row or {}).get("latency_ms") or {}
        if lat.get("median"):
            ago = row.get("timed_s_ago")
            final.append(f"{label} {lat['median']:.4f} ms (p20 {lat.get('p20') or 0:.4f}, p80 "
                         f"{lat.get('p80') or 0:.4f})" + (f" kept {ago:.0f} s" if ago is not None else ""))
    return {"case": case, "wall_s": wall, "outcome": (result.get("outcome") or {}).get("summary"),
            "timings": timings, "final": final,
            "rounds": len(opt.get("iterations", [])),
            "hypotheses": [h["name"] for h in opt.get("hypotheses", [])],
            "trials": (acc.get("budget") or {}).get("trials_run"),
            "memory": sorted(acc.get("memory") or {}),
            "breakdown": result.get("timing_breakdown") or {}}


def main(cases: list[str]) -> int:
    standby = None
    if cases[:1] == ["--standby"]:
        standby, cases = cases[1], cases[2:]
    cases = cases or ["softmax", "layernorm_gelu", "rmsnorm"]
    home = Path(os.environ.get("KOPT_HOME") or "/tmp/kopt-search")
    if standby:  # a fresh workspace of its own: the first run starts with no memory
        home = home / f"standby-{standby}"
        print(f"KOPT_WORKER_STANDBY={standby}")
    home.mkdir(parents=True, exist_ok=True)
    print(f"{'case':<22} {'run':>3} {'wall s':>7} {'rounds':>6} {'trials':>6} memory  outcome")
    for case in cases:
        for n in (1, 2):
            r = run_once(case, home, standby)
            if "error" in r:
                print(f"{case:<22} {n:>3} {r['wall_s']:7.1f}  failed: {r['error']}")
                continue
            print(f"{case:<22} {n:>3} {r['wall_s']:7.1f} {r['rounds']:>6} {r['trials'] or 0:>6} "
                  f"{'yes' if r['memory'] else 'no ':<7} {r['outcome']}")
            b = r["breakdown"]
            print(f"{'':<26}phases: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                  (b.get("phases") or {}).items())
                  + f"; engineers {b.get('engineer_s', 0):.1f}, jobs {b.get('jobs_s', 0):.1f}")
            print(f"{'':<26}jobs: " + ", ".join(
                f"{k} {v['count']}x {v['seconds']:.1f}s ({v.get('standby', 0)} standby, import "
                f"{v.get('import_s', 0):.1f}s)" for k, v in (b.get("jobs") or {}).items()))
            if b.get("parent"):
                print(f"{'':<26}in kopt's own process: " + ", ".join(
                    f"{k} {v:.1f}" for k, v in b["parent"].items()))
            if b.get("unclocked"):
                print(f"{'':<26}no clock running, per phase: " + ", ".join(
                    f"{k} {v:.1f}" for k, v in b["unclocked"].items()))
            for kind, v in (b.get("jobs") or {}).items():
                if v.get("steps"):
                    print(f"{'':<26}{kind} steps: " + ", ".join(
                        f"{k} {t:.1f}" for k, t in sorted(v["steps"].items(), key=lambda kv: -kv[1])))
            if r.get("timings"):
                print(f"{'':<26}timed: " + "; ".join(r["timings"]))
            if r.get("final"):
                print(f"{'':<26}integrator: " + "; ".join(r["final"]))
            if r["hypotheses"]:
                print(f"{'':<26}hypotheses: " + "; ".join(r["hypotheses"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
