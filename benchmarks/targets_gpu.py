"""GPU check of the execution targets (issue 8). Run on a GPU machine from the repo root:

    python benchmarks/targets_gpu.py

1. `kopt targets` for the local machine: versions, GPU, and ceilings measured by the
   `ceilings` worker job (copy GB/s, matmul TFLOP/s).
2. `evaluate_many` over the local target: one slot per GPU, each pinned with
   CUDA_VISIBLE_DEVICES; every job's worker must report the GPU it was given.
3. If ray is installed: a local Ray runtime whose tasks ask for one GPU each (not CPUs),
   and whose workers see a GPU.

Prints a short table last. Exit 1 if a check failed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("KOPT_HOME", tempfile.mkdtemp(prefix="kopt-targets-bench-"))


def echo(slot: Any) -> dict[str, Any]:
    from kopt.harness.job import stage_job

    t0 = time.perf_counter()
    outcome = slot.run(stage_job("echo", {"message": "gpu?"}), timeout=300)
    env = (outcome.response or {}).get("environment") or {}
    return {"ok": outcome.ok, "seconds": time.perf_counter() - t0,
            "worker_gpu": (env.get("gpu") or {}).get("name"),
            "error": None if outcome.ok else outcome.failure_reason()}


def main() -> int:
    import torch

    from kopt.harness.parallel import evaluate_many, slots_of
    from kopt.harness.targets.local import LocalTarget
    from kopt.workbench.commands.targets import check_target

    rows: list[tuple[str, str, str]] = []
    failed = False

    t0 = time.perf_counter()
    local = check_target("local", "local")
    ceil = local.get("ceilings") or {}
    ok = bool(local.get("gpu")) and ceil.get("source") == "measured"
    failed |= not ok
    rows.append(("kopt targets: local", "ok" if ok else "FAIL",
                 f"{(local.get('gpu') or {}).get('name')}; copy {ceil.get('copy_gbps')} GB/s, "
                 f"bf16 {ceil.get('bf16_tflops')}, tf32 {ceil.get('tf32_tflops')}, fp32 "
                 f"{ceil.get('fp32_tflops')} TFLOP/s ({time.perf_counter() - t0:.1f} s)"))

    target = LocalTarget()
    slots = slots_of(target)
    n = 2 * len(slots)
    t0 = time.perf_counter()
    results = evaluate_many([echo] * n, [target])
    wall = time.perf_counter() - t0
    ok = all(r["ok"] and r["worker_gpu"] for r in results) and len(slots) == torch.cuda.device_count()
    failed |= not ok
    rows.append(("evaluate_many local", "ok" if ok else "FAIL",
                 f"{len(slots)} GPU slot(s), {n} echo jobs in {wall:.1f} s; gpus "
                 f"{sorted({str(r['gpu']) for r in results})}"))

    try:
        import ray  # noqa: F401

        from kopt.harness.targets.ray import RayTarget
    except ImportError:
        rows.append(("ray://local", "skipped", "ray is not installed (pip install 'kopt[ray]')"))
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray_target = RayTarget("ray://local")
        info = ray_target.describe()
        t0 = time.perf_counter()
        results = evaluate_many([echo] * 2, [ray_target])
        ok = info.get("task_resources") == {"num_gpus": 1} and all(
            r["ok"] and r["worker_gpu"] for r in results)
        failed |= not ok
        rows.append(("ray://local", "ok" if ok else "FAIL",
                     f"task asks {info.get('task_resources')}; 2 echo jobs in "
                     f"{time.perf_counter() - t0:.1f} s; worker GPU {results[0]['worker_gpu']}"
                     + ("" if ok else f"; {[r['error'] for r in results]}")))

    width = max(len(r[0]) for r in rows)
    print(f"\n{'check':<{width}}  result   detail")
    for name, result, detail in rows:
        print(f"{name:<{width}}  {result:<7}  {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
