"""Where kopt reads and writes.

kopt writes nowhere in the user's tree but `manifests/`, `archive/` and `.kopt/` under the
workspace root. The workspace root is `$KOPT_HOME` if set, else the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""The folder holding `harness/`, `phases/`, `workbench/` and the bundled `cases/`: a source
checkout's root, or `site-packages/kopt` for an installed wheel."""


def import_root() -> Path:
    """The folder a worker's PYTHONPATH needs for `import kopt` to find this copy of kopt."""
    import kopt

    return Path(kopt.__file__).resolve().parent.parent


def workspace_root() -> Path:
    """The workbench directory: `$KOPT_HOME`, else the current working directory."""
    return Path(os.environ.get("KOPT_HOME") or os.getcwd()).resolve()


def use_compile_caches(root: Path) -> dict[str, str]:
    """Point Triton's and Inductor's compile caches at `.kopt/cache/` (unless the user set
    them), so that every worker job of a run -- and the next run -- reuses what an earlier
    job compiled instead of compiling into a fresh temporary folder. Set in this process's
    environment, which every worker (and its standby) inherits: `kopt run`'s early workers
    (workbench.early_workers) set it before they start, so their environment is the run's."""
    base = root / ".kopt" / "cache"
    wanted = {"TRITON_CACHE_DIR": str(base / "triton"),
              "TORCHINDUCTOR_CACHE_DIR": str(base / "inductor")}
    for key, value in wanted.items():
        os.environ.setdefault(key, value)
    return {k: os.environ[k] for k in wanted}


def kopt_dir() -> Path:
    """`.kopt/` under the workspace: caches, worktrees, artifacts of commands outside a run."""
    return workspace_root() / ".kopt"


def baselines_dir() -> Path:
    """Eager's and torch.compile's timings of unchanged cases, kept ten minutes
    (`harness.bench.workspace_baselines`)."""
    return kopt_dir() / "baselines"


def cache_dir() -> Path:
    """Cached input/weight tensors and measured device ceilings."""
    return Path(os.environ.get("KOPT_CACHE") or kopt_dir() / "cache")


def jobs_root() -> Path:
    """Where job directories are made unless a caller names another folder (created: a
    sandboxed standby reserves its folder there before the first job is staged)."""
    root = kopt_dir() / "jobs"
    root.mkdir(parents=True, exist_ok=True)
    return root


def manifests_dir() -> Path:
    return workspace_root() / "manifests"


def archive_dir() -> Path:
    return workspace_root() / "archive"


def bundled_cases_dir() -> Path:
    """The `cases/` shipped with kopt (beside the `harness` package)."""
    return PACKAGE_ROOT / "cases"


def user_cases_dir() -> Path:
    """The workspace's own `cases/` (may be the same folder as the bundled one)."""
    return workspace_root() / "cases"
