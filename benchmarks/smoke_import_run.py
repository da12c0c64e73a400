"""Import and smoke-run every KernelBench problem of a folder, as a user would, timed.

    python benchmarks/smoke_import_run.py DIR [--jobs N] [--limit N] [--out FILE.json]

For each problem file: a fresh workspace, `kopt import-kernelbench FILE`, then
`kopt run NAME --phases architect,optimizer --yes --json` (on a machine without a GPU: the
smoke inputs on Triton's CPU interpreter). Prints one line per problem as it finishes, then a
table of all of them, slowest first: seconds for the import and the run, whether the case's
model built (construction), and the optimizer's verdict. The issue-22 bar: each under a minute
on the CPU, none failing at construction.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _kopt(args: list[str], home: Path, timeout: float) -> tuple[int, str, str, float]:
    env = {**os.environ, "KOPT_HOME": str(home),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "kopt", *args], cwd=home, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:.0f} s", time.monotonic() - t0
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def _last_json(out: str) -> dict:
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return {}
    return {}


def one(problem: Path, scratch: Path, timeout: float) -> dict:
    home = scratch / problem.stem
    home.mkdir(parents=True)
    name = "p_" + "".join(c if c.isalnum() else "_" for c in problem.stem).lower()
    row: dict = {"problem": problem.name, "import_s": None, "run_s": None, "built": False,
                 "verdict": "", "error": ""}
    rc, out, err, secs = _kopt(["import-kernelbench", str(problem), "--name", name, "--json"],
                               home, timeout)
    row["import_s"] = round(secs, 1)
    if rc != 0:
        row["error"] = (err.strip().splitlines() or ["import failed"])[-1][:200]
        return row
    rc, out, err, secs = _kopt(["run", name, "--phases", "architect,optimizer", "--yes",
                                "--json"], home, timeout)
    row["run_s"] = round(secs, 1)
    result = _last_json(out)
    row["built"] = any("architect" in m for m in result.get("manifests") or [])
    if result:  # the run ended with its summary: verified or not, the outcome says which
        outcome = result.get("outcome") or {}
        row["verdict"] = outcome.get("verdict") or ("verified" if result.get("verified")
                                                    else "not verified")
        row["verdict"] += _optimizer_failures(home)
    else:
        row["error"] = next((line for line in reversed(err.strip().splitlines())
                             if "error" in line.lower()), f"exit {rc}")[:200]
    return row


def _optimizer_failures(home: Path) -> str:
    """` (rejected: check, ...)` from the optimizer's manifest when no iteration passed."""
    for path in home.glob("manifests/*/optimizer.json"):
        m = json.loads(path.read_text())
        if m.get("status") == "verified":
            return ""
        failed = sorted({c for it in m.get("details", {}).get("iterations", [])
                         for c in it.get("checks", {}).get("failed", [])})
        return f" (rejected: {', '.join(failed)})" if failed else ""
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per command")
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    args = parser.parse_args()
    args.dir = args.dir.resolve()  # each import runs in its own workspace: a relative path would not be found there
    problems = sorted(args.dir.glob("*.py"))
    if args.limit:
        problems = problems[:args.limit]
    if not problems:
        print(f"no problem files in {args.dir}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="kopt-smoke-"))
    rows = []
    t0 = time.monotonic()

    def task(p: Path) -> dict:
        r = one(p, scratch, args.timeout)
        print(f"[{time.monotonic() - t0:6.0f} s] {r['problem']}: import {r['import_s']} s, "
              f"run {r['run_s']} s, {r['verdict'] or r['error']}", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(task, problems))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    rows.sort(key=lambda r: -((r["import_s"] or 0) + (r["run_s"] or 0)))
    print()
    print("| problem | import s | run s | outcome |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['problem']} | {r['import_s']} | {r['run_s']} | "
              f"{r['verdict'] or r['error']} |")
    over = [r for r in rows if (r["import_s"] or 0) + (r["run_s"] or 0) > 60]
    failed = [r for r in rows if r["error"]]
    print(f"\n{len(rows)} problems; {len(over)} over 60 s; {len(failed)} with an error; "
          f"wall {time.monotonic() - t0:.0f} s (--jobs {args.jobs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
