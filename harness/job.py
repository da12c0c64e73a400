"""Parent side of the worker protocol: stage a job directory, run it on a target.

A job directory is self-contained (request, a copy of the case, the candidate, staged input
tensors) so that any target can ship it elsewhere and bring `out/` back.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from kopt.harness.case import Case
from kopt.harness.errors import BadInputError
from kopt.harness.paths import jobs_root
from kopt.harness.targets.base import LineSink, Target, WorkerOutcome
from kopt.harness.targets.resolve import resolve_target


def new_job_dir(job: str, root: Path | None = None) -> Path:
    base = root or jobs_root()
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{job}-{uuid.uuid4().hex[:6]}-", dir=base))


def stage_job(
    job: str,
    request: dict[str, Any],
    *,
    case: Case | None = None,
    candidate: Path | None = None,
    tensors: dict[str, dict[str, torch.Tensor]] | None = None,
    root: Path | None = None,
    link_from: Path | None = None,
) -> Path:
    """Create a job directory: `request.json` (+ `case/`, `candidate.py`, `inputs/<name>.safetensors`).
    `link_from`: another job's folder staged with the same `tensors`, whose files become hard
    links here (each written once: a verification stages every weight and input for the
    reference and again for each candidate); a file that cannot be linked is written."""
    job_dir = new_job_dir(job, root)
    if case is not None:
        shutil.copytree(case.directory, job_dir / "case",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        request = {**request, "case_dir": "case"}
    if candidate is not None:
        shutil.copy2(candidate, job_dir / "candidate.py")
        request = {**request, "candidate": "candidate.py"}
    for name, group in (tensors or {}).items():
        (job_dir / "inputs").mkdir(exist_ok=True)
        dest = job_dir / "inputs" / f"{name}.safetensors"
        if link_from is not None:
            try:
                os.link(link_from / "inputs" / f"{name}.safetensors", dest)
                continue
            except OSError:  # another file system, or not staged there: written below
                pass
        save_file({k: v.detach().cpu().contiguous() for k, v in group.items()}, str(dest))
    (job_dir / "request.json").write_text(json.dumps({"job": job, **request}, indent=1, default=str))
    return job_dir


def restage_request(job_dir: Path, changes: dict[str, Any]) -> None:
    """`changes` written over a staged job's `request.json` (its other keys kept)."""
    file = job_dir / "request.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **changes}, indent=1, default=str))


def run_job(target: Target, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: LineSink | None = None) -> WorkerOutcome:
    return target.run(job_dir, timeout=timeout, env=env, on_line=on_line)


def load_output(job_dir: Path, name: str) -> dict[str, torch.Tensor] | None:
    """`out/<name>.safetensors` written by the worker, or None."""
    file = job_dir / "out" / f"{name}.safetensors"
    return load_file(str(file)) if file.is_file() else None


def cleanup(job_dir: Path) -> None:
    shutil.rmtree(job_dir, ignore_errors=True)


def candidate_files(candidates: Sequence[Path | str]) -> list[Path]:
    """The candidate paths, each checked to exist (bad input otherwise)."""
    paths = [Path(c).expanduser() for c in candidates]
    for p in paths:
        if p.is_dir():
            raise BadInputError(f"candidate {str(p)!r} is a directory",
                                fix="pass the path of a .py file that defines ModelNew")
        if not p.is_file():
            raise BadInputError(f"candidate file {str(p)!r} does not exist",
                                fix="pass the path of a .py file that defines ModelNew")
    return paths


def as_target(target: Target | str | None) -> Target:
    """A Target object from a Target, a spec string, or None (local)."""
    return target if target is not None and not isinstance(target, str) else resolve_target(target)
