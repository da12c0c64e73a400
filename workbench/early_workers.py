"""`kopt verify` (and `run`, `bench`, `baseline`) starts its first workers before this process
imports torch.

A verification's critical path on a GPU host was: this process imports torch (1.8 s on the
H100 host), draws the inputs, then waits for the reference's isolated interpreter, prepared
only then, to finish its own import of torch (harness.targets.standby). Started here, before
the command modules are imported, both workers import while this process does: the standbys
are the same `ISOLATED` and `STANDBY` the verifier prepares, so its own `prepare` finds them
waiting and its jobs take them when their environment matches.

The device is `--device` when given; otherwise a guess (a GPU when the NVIDIA driver's device
node exists), because reading the case's `device:` needs torch. A wrong guess costs one
discarded process: a job never takes a standby started with another environment.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

COMMANDS = frozenset({"verify", "run", "bench", "baseline"})
"""Commands whose first worker job runs here: `kopt run`'s architect times the baseline in a
standby (on the H100 its first measure job started cold, 2-3 s of a 43 s second run), and
its first verification's reference takes the isolated one."""


def _device(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--device" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--device="):
            return arg.split("=", 1)[1]
    return "cuda" if Path("/dev/nvidiactl").exists() else "cpu"


def _reserve_root(jobs: Path, workspace: Path) -> Path | None:
    """Where a sandboxed standby may reserve its folder before the command has checked its
    input, or None: no early workers. A refused command must leave nothing in the workspace,
    and a sandboxed standby needs its mounts (the compile caches under `.kopt/`) to exist, so
    a workspace without `.kopt/` (no kopt command has run there yet) gets none. Else kopt's
    jobs folder when it exists, or the temporary folder when it is on the workspace's
    filesystem (a job's files are moved into the reserved folder by rename)."""
    if not jobs.parent.is_dir():
        return None
    if jobs.is_dir():
        return jobs
    tmp = Path(tempfile.gettempdir())
    try:
        if tmp.stat().st_dev == workspace.stat().st_dev:
            return tmp
    except OSError:
        pass
    return None


RUN_STANDBYS_ON_GPU = "2"
"""`kopt run` on a GPU keeps two standbys unless `KOPT_WORKER_STANDBY` says otherwise: a run's
jobs follow each other (verification, then timing) faster than one standby imports torch. On
an H200 (2026-11-28) a first `kopt run rmsnorm` took 50.1 s with two against 60.2 s with one.
On the CPU one: nothing is timed there, and a two-core machine's second import slows the work."""


def default_depth(argv: list[str], device: str) -> None:
    """Set `KOPT_WORKER_STANDBY` for this command when the user has not."""
    if argv[:1] == ["run"] and device == "cuda":
        os.environ.setdefault("KOPT_WORKER_STANDBY", RUN_STANDBYS_ON_GPU)


def start(argv: list[str]) -> bool:
    """Start the standbys for `argv`'s command when it verifies locally; True if started."""
    if not argv or argv[0] not in COMMANDS:
        return False
    if any(a in ("-h", "--help", "--no-sandbox") or a.startswith("--target") for a in argv):
        return False  # help only, another sandbox setting, or another machine
    device = _device(argv)
    default_depth(argv, device)
    if device not in ("cuda", "cpu"):
        return False
    from kopt.harness.paths import kopt_dir, use_compile_caches, workspace_root
    from kopt.harness.targets.local import LocalTarget

    root = _reserve_root(kopt_dir() / "jobs", workspace_root())
    if root is None:
        return False
    if argv[0] == "run":  # the run's workers have its compile caches (phases.run.open_context)
        use_compile_caches(workspace_root())
    try:
        LocalTarget().prepare({"TRITON_INTERPRET": "1"} if device == "cpu" else {}, root)
    except OSError:
        return False
    return bool(os.environ.get("KOPT_WORKER_STANDBY", "1").strip().lower()
                not in ("0", "false", "no", "off"))
