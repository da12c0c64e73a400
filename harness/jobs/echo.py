"""`echo`: a no-op job that reports the worker's environment (targets' health check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    from harness.environment import describe_environment

    print("echo:", request.get("message", ""), flush=True)
    return {"ok": True, "message": request.get("message"), "environment": describe_environment()}
