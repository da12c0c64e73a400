"""`echo`: a no-op job that reports the worker's environment (targets' health check)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    from kopt.harness.environment import describe_environment
    from kopt.harness.verification.guards import child_processes

    # `repeat`/`interval_s`: a job that streams output over time (targets' streaming tests).
    # `await_file`: after the first line, wait (at most `await_s`) until the driver creates that
    # file; `acknowledged` says whether it did, which proves the first line was delivered while
    # the job still ran, on any machine load.
    acknowledged = None
    for i in range(int(request.get("repeat", 1))):
        if i:
            time.sleep(float(request.get("interval_s", 0.0)))
        print("echo:", request.get("message", ""), flush=True)
        if i == 0 and request.get("await_file"):
            acknowledged = _await(Path(request["await_file"]), float(request.get("await_s", 60.0)))
    return {"ok": True, "message": request.get("message"), "acknowledged": acknowledged,
            "environment": describe_environment(), "children": child_processes(),
            "kopt_settings": {k: v for k, v in os.environ.items() if k.startswith("KOPT_")}}


def _await(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return False
