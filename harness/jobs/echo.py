"""`echo`: a no-op job that reports the worker's environment (targets' health check)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    from kopt.harness.environment import describe_environment

    # `repeat`/`interval_s`: a job that streams output over time (targets' streaming tests)
    for i in range(int(request.get("repeat", 1))):
        if i:
            time.sleep(float(request.get("interval_s", 0.0)))
        print("echo:", request.get("message", ""), flush=True)
    return {"ok": True, "message": request.get("message"), "environment": describe_environment(),
            "kopt_settings": {k: v for k, v in os.environ.items() if k.startswith("KOPT_")}}
