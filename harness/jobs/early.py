"""A job's child started before its job (harness.jobs.supervised.fork_early, by a standby).

The start every child makes (imports; on a GPU CUDA's context and a first harness Triton
launch: 1.0-1.3 s of a small candidate job on the H100, 2026-11-28) is done while the standby
waits for a job; when one comes, the child goes on as that job kind's child
(`supervised.CHILDREN`). No candidate code, job file or input exists in it before then.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kopt.harness.jobs.supervised import CHILDREN, Link, child_function

EARLY_LATE_S: float | None = None
"""In an early child that took a job: how long that job waited for the child's own start
(its imports, CUDA's context) to finish; None in a child forked for its job."""


def early_child(link: Link) -> None:
    """A job's child forked by a standby before its job (`fork_early`): the start every child
    makes (imports; on a GPU CUDA's context and a first harness Triton launch: 1.0-1.3 s of a
    small candidate job on the H100) is done while the standby waits; then it waits for the
    job (its kind, folder, request and environment) and goes on as that kind's child
    (`CHILDREN`). No candidate code, job file or input exists in it before the job arrives."""
    import torch

    import kopt.harness.case  # noqa: F401  (what the children import before the candidate)
    import kopt.harness.data  # noqa: F401
    from kopt.harness.verification import conditions, draws, guards, tensors  # noqa: F401

    warmed = None
    if os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available():
        guards.start_device("cuda")
        warmed = "cuda"
    ready_at = time.time()
    msg = link.recv()
    if msg.get("op") != "job" or msg.get("kind") not in CHILDREN:
        return
    global EARLY_LATE_S
    EARLY_LATE_S = max(0.0, ready_at - float(msg.get("sent_at") or ready_at))
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in msg["env"].items()})
    os.chdir(msg["cwd"])
    request = msg["request"]
    if request.get("interpret"):
        from kopt.harness.interpreter import interpreter_support

        interpreter_support()
    child_function(msg["kind"])(link, Path(msg["job_dir"]), request, warmed=warmed)
