"""`RunContext`: everything the four phases of one run share.

A run is `manifests/<run-id>/` (manifests, `run.json`, per-phase folders, `artifacts/`,
`transcripts/`) plus branch `kopt/<case>/<run-id>` checked out in `.kopt/worktrees/<run-id>`.
`run.json` records how the run was started so that `kopt run --resume RUN_ID` continues
with the same engineer, analyst, target and budget.

The measuring and verifying functions are fields so that tests can inject small fakes;
by default they are the harness's `measure_variant` and `verify_candidate`.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.case import Case, load_case
from harness.device import default_input_set, resolve_device, timing_label
from harness.errors import BadInputError, KoptError
from harness.paths import manifests_dir, workspace_root
from phases.history import branch_name, worktree_path

# A CPU-interpreter candidate takes ~0.4 s a call at smoke size: a few seconds of samples
# is all the precision such a figure deserves (it is never a GPU number).
CPU_TIMING_OPTIONS = {"max_seconds": 3.0, "max_iters": 20, "min_iters": 3}


class RunCancelled(KoptError):
    """The user stopped the run (Ctrl-C); it can resume from its last valid manifest."""

    exit_code = 130


@dataclass
class RunConfig:
    """How a run was started (`manifests/<run-id>/run.json`)."""

    run_id: str
    case: str
    """Case name or directory, as given to `kopt run`."""
    engineer: str = "offline"
    analyst: str | None = None
    iterations: int = 3
    target: str = "local"
    device: str | None = None
    engineer_options: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime()))

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / ".run.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1, default=str))
        os.replace(tmp, run_dir / "run.json")

    @classmethod
    def load(cls, run_dir: Path) -> RunConfig:
        file = run_dir / "run.json"
        if not file.is_file():
            raise BadInputError(f"no run at {run_dir}", fix="list runs with `kopt history`")
        data = json.loads(file.read_text())
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def new_run_id() -> str:
    """UTC time (sortable) and a random suffix: `20250101-120000-3fa9`."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


@dataclass
class RunContext:
    """One run, as every phase sees it."""

    config: RunConfig
    case: Case
    root: Path
    """The workspace root (manifests/, archive/, .kopt/ live here)."""
    device: str
    """`cuda`, or `cpu` (Triton interpreter on the smoke inputs)."""
    input_set: str
    """What timings run on: `main` on a GPU, `smoke` on the CPU."""
    cancel: threading.Event = field(default_factory=threading.Event)
    measure: Callable[..., dict[str, Any]] | None = None
    """measure_variant(case, variant, **kw) -> metrics dict (default: the harness's)."""
    verify: Callable[..., Any] | None = None
    """verify_candidate(case, path, **kw) -> VerificationReport (default: the harness's)."""
    verify_many: Callable[..., list[Any]] | None = None
    """verify_candidates(case, paths, **kw) (default: the harness's)."""
    tune: Callable[..., list[dict[str, Any]]] | None = None
    """time_trials(case, paths, **kw) -> one dict per trial (default: harness.tune's)."""
    engineer_factory: Callable[[str, dict[str, Any]], Any] | None = None
    """make_engineer(spec, options) (default: phases.engineers.base.make_engineer)."""

    @property
    def run_id(self) -> str:
        return self.config.run_id

    @property
    def branch(self) -> str:
        return branch_name(self.case.name, self.run_id)

    @property
    def worktree(self) -> Path:
        return worktree_path(self.run_id, self.root)

    @property
    def run_dir(self) -> Path:
        return self.root / "manifests" / self.run_id

    @property
    def artifacts_dir(self) -> Path:
        return self.run_dir / "artifacts"

    @property
    def kernel_rel(self) -> str:
        """The candidate's path in the worktree (ARCHITECTURE.md's layout)."""
        return f"kernels/{self.case.name}.py"

    @property
    def timing_label(self) -> str:
        return timing_label(self.device)

    @property
    def timing_options(self) -> dict[str, Any] | None:
        return dict(CPU_TIMING_OPTIONS) if self.device == "cpu" else None

    def phase_dir(self, phase: str) -> Path:
        d = self.run_dir / phase
        d.mkdir(parents=True, exist_ok=True)
        return d

    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise RunCancelled(f"run {self.run_id} stopped",
                               fix=f"resume with `kopt run --resume {self.run_id}`")

    # -- the harness, or the fakes a test injected --------------------------------------------

    def measure_variant(self, variant: str | Path, **kw: Any) -> dict[str, Any]:
        if self.measure is not None:
            return self.measure(self.case, variant, **kw)
        from harness.runner import measure_variant

        kw.setdefault("timing_options", self.timing_options)
        return measure_variant(self.case, variant, device=self.device, target=self.config.target,
                               artifacts_root=self.artifacts_dir, input_set=self.input_set, **kw)

    def verify_candidate(self, path: Path, **kw: Any) -> Any:
        if self.verify is not None:
            return self.verify(self.case, path, **kw)
        from harness.verify import verify_candidate

        return verify_candidate(self.case, path, device=self.device, target=self.config.target,
                                **kw)

    def verify_candidates(self, paths: list[Path], **kw: Any) -> list[Any]:
        if self.verify_many is not None:
            return self.verify_many(self.case, paths, **kw)
        if self.verify is not None:
            return [self.verify(self.case, p, **kw) for p in paths]
        from harness.verify import verify_candidates

        return verify_candidates(self.case, paths, device=self.device,
                                 target=self.config.target, **kw)

    def time_trials(self, paths: list[Path], *, budget_s: float) -> list[dict[str, Any]]:
        """Time (and output-check) every trial file in one worker job: `harness.tune`."""
        if self.tune is not None:
            return self.tune(self.case, paths, budget_s=budget_s)
        if self.measure is not None:  # a test's fake harness: its timings, outputs taken as right
            out = []
            for p in paths:
                m = self.measure(self.case, p, label=p.stem)
                lat = m.get("latency_ms") or {}
                out.append({"ok": bool(lat), "checked": bool(lat), "median_ms": lat.get("median"),
                            "p20_ms": lat.get("p20"), "p80_ms": lat.get("p80"),
                            "detail": "output matches" if lat else str(m.get("error"))})
            return out
        from harness.tune import time_trials

        return time_trials(self.case, paths, device=self.device, input_set=self.input_set,
                           target=self.config.target, budget_s=budget_s,
                           timing_options=self.timing_options)

    def make_engineer(self) -> Any:
        if self.engineer_factory is not None:
            return self.engineer_factory(self.config.engineer, self.config.engineer_options)
        from phases.engineers.base import make_engineer

        return make_engineer(self.config.engineer, self.config.engineer_options)


def open_context(config: RunConfig, *, root: Path | None = None,
                 cancel: threading.Event | None = None, **fakes: Any) -> RunContext:
    """The context of `config`'s run in the workspace `root`."""
    root = Path(root or workspace_root()).resolve()
    case = load_case(config.case)
    device = resolve_device(case, config.device)
    return RunContext(config=config, case=case, root=root, device=device,
                      input_set=default_input_set(case, device),
                      cancel=cancel or threading.Event(), **fakes)


def run_dir_of(run_id: str, root: Path | None = None) -> Path:
    return (Path(root) if root else manifests_dir().parent) / "manifests" / run_id
