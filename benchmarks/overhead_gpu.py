"""Where a verification's seconds go on a GPU machine: process start, imports, CUDA
initialisation, staging, each worker job (profiled inside the worker), the parent's judge.

    python benchmarks/overhead_gpu.py [CASE] [--no-profile]      (default: softmax)

Prints the cold-start costs of a worker's imports, then one `verify_candidate` of the offline
engineer's candidate with its parts timed, then the top functions by cumulative time inside a
re-run reference, candidate and measure job (cProfile; a measure job took 22 s on the H100).
"""

from __future__ import annotations

import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _child(code: str) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=False, cwd=str(ROOT),
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return time.monotonic() - t0


def _print_stats(stats: pstats.Stats, top: int) -> None:
    """Harness and library functions by cumulative time, then the heaviest by own time."""
    for sort, pattern in (("cumulative", "harness/|safetensors|triton/runtime|compiler|cuda/__init__|built-in method|method "),
                          ("tottime", "")):
        buf = io.StringIO()
        stats.stream = buf
        stats.sort_stats(sort).print_stats(pattern, top) if pattern else stats.sort_stats(sort).print_stats(top)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip() and ("(" in ln and "/" in ln or "{" in ln)]
        print(f"  -- by {sort}" + (f" ({pattern})" if pattern else ""))
        print("\n".join(lines[:top]), flush=True)


def _profile_job_inprocess(job_dir: Path, top: int = 22) -> None:
    """Run the job function in a fresh child under cProfile, dumping before os._exit."""
    code = (
        "import cProfile, json, pstats, sys, os, time\n"
        "from pathlib import Path\n"
        f"job = Path({str(job_dir)!r})\n"
        "t0 = time.monotonic()\n"
        "pr = cProfile.Profile(); pr.enable()\n"
        "import torch, triton\n"
        "t_imp = time.monotonic() - t0\n"
        "from kopt.harness import worker\n"
        "req = json.loads((job / 'request.json').read_text())\n"
        "import importlib\n"
        "mod, fn = worker.JOBS[req['job']].split(':')\n"
        "resp = getattr(importlib.import_module(mod), fn)(job, req)\n"
        "pr.disable()\n"
        "print(f'  import torch+triton {t_imp:.2f} s; job total {time.monotonic() - t0:.2f} s; ok={resp.get(\"ok\")}', flush=True)\n"
        "pr.dump_stats(str(job / 'job.prof'))\n"
        "os._exit(0)\n"
    )
    import json

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if json.loads((job_dir / "request.json").read_text()).get("interpret"):
        env["TRITON_INTERPRET"] = "1"
    subprocess.run([sys.executable, "-c", code], cwd=str(job_dir), check=False, env=env)
    prof = job_dir / "job.prof"
    if prof.is_file():
        _print_stats(pstats.Stats(str(prof)), top)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    profile = "--no-profile" not in sys.argv
    name = args[0] if args else "softmax"
    home = Path(os.environ.get("KOPT_HOME") or tempfile.mkdtemp(prefix="kopt-overhead-"))
    os.environ["KOPT_HOME"] = str(home)
    os.environ.pop("TRITON_INTERPRET", None)

    print("== cold starts (fresh python each)", flush=True)
    for label, code in [("python -c pass", "pass"),
                        ("import torch", "import torch"),
                        ("import torch, triton", "import torch, triton, triton.language"),
                        ("+ torch.cuda.init()", "import torch, triton; torch.cuda.init()"),
                        ("+ warm_up_triton", "import torch, triton; torch.cuda.init(); "
                                             "from kopt.harness.verification import guards; "
                                             "guards.warm_up_triton('cuda')"),
                        ("import kopt.harness.jobs.candidate", "import kopt.harness.jobs.candidate")]:
        print(f"  {label:32s} {_child(code):6.2f} s", flush=True)

    import torch

    from kopt.harness import verify
    from kopt.harness.case import load_case
    from kopt.harness.job import stage_job
    from kopt.harness.targets.local import LocalTarget
    from kopt.phases.engineers.offline import generate_candidate

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    target = LocalTarget()
    t0 = time.monotonic()
    echo = stage_job("echo", {"device": dev})
    out = target.run(echo, timeout=60)
    print(f"  echo job round trip              {time.monotonic() - t0:6.2f} s (ok={out.ok})", flush=True)

    case = load_case(name)
    cand = home / f"{name}_cand.py"
    cand.write_text(generate_candidate(case).source)

    parts: dict[str, list[float]] = {}

    def wrap(owner, attr, key=None):  # noqa: ANN001, ANN202
        fn = getattr(owner, attr)

        def timed(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            t = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                parts.setdefault(key or attr, []).append(time.monotonic() - t)
        setattr(owner, attr, timed)

    wrap(verify, "plan_draws")
    wrap(verify, "stage_job")
    wrap(verify, "load_outputs")
    wrap(verify._Judge, "checks", "judge")
    run = LocalTarget.run

    def timed_run(self, job_dir, **kw):  # noqa: ANN001, ANN003, ANN202
        t = time.monotonic()
        try:
            return run(self, job_dir, **kw)
        finally:
            parts.setdefault(f"job:{Path(job_dir).name.split('-')[0]}", []).append(time.monotonic() - t)
    LocalTarget.run = timed_run

    for rep in range(1 if profile else 2):  # a second run is warm (standby worker, caches)
        parts.clear()
        t0 = time.monotonic()
        report = verify.verify_candidate(case, cand, device=dev, keep_jobs=True)
        total = time.monotonic() - t0
        print(f"== verify_candidate {name} run {rep}: {total:.2f} s, accepted={report.accepted}")
        for k, v in sorted(parts.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {k:24s} {sum(v):6.2f} s / {len(v)}", flush=True)
    from kopt.harness.runner import measure_variant

    t0 = time.monotonic()
    m = measure_variant(case, cand, device=dev, keep_job=True)
    print(f"== measure_variant {name}: {time.monotonic() - t0:.2f} s, ok={m.get('ok', True)}")
    LocalTarget.run = run

    jobs = sorted((home / ".kopt" / "jobs").glob("*")) if (home / ".kopt" / "jobs").is_dir() else []
    if not jobs:
        from kopt.harness.paths import kopt_dir
        jobs = sorted((kopt_dir() / "jobs").glob("*"))
    sizes = {j.name: sum(f.stat().st_size for f in j.rglob("*") if f.is_file()) for j in jobs}
    for j in jobs:
        print(f"  kept job {j.name}: {sizes[j.name] / 1e6:.0f} MB on disk", flush=True)
    # A candidate job cannot be re-run by hand: its staged inputs leave the job folder
    # before the candidate is imported (harness.jobs.supervised.take_staged_inputs).
    for kind in ("measure", "reference") if profile else ():
        job = next((j for j in jobs if j.name.startswith(kind)), None)
        if job is None:
            continue
        print(f"== {kind} job, profiled in a fresh process", flush=True)
        _profile_job_inprocess(job)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
