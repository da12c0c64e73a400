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

from kopt.harness.case import Case, load_case
from kopt.harness.device import default_input_set, resolve_device, timing_label
from kopt.harness.errors import BadInputError, KoptError
from kopt.harness.paths import manifests_dir, use_compile_caches, workspace_root
from kopt.phases.breakdown import ClockedTarget, TimingBreakdown
from kopt.phases.history import branch_name, worktree_path

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
    """Where evaluations run (and every timing compared with the baseline)."""
    targets: list[str] = field(default_factory=list)
    """More targets whose GPUs share the run's evaluations (`--target a,b`: `b` here)."""
    parallel: int | None = None
    """At most this many evaluations at once (`--parallel N`); default one per GPU."""
    device: str | None = None
    engineer_options: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime()))

    def __post_init__(self) -> None:
        if "," in self.target:  # `--target a,b`: the first times, all of them verify
            specs = [t.strip() for t in self.target.split(",") if t.strip()]
            if not specs:
                raise BadInputError(f"--target {self.target!r} names no target",
                                    fix="e.g. --target local or --target ssh://gpu-a,ssh://gpu-b")
            self.target, self.targets = specs[0], [*specs[1:], *self.targets]
        if self.parallel is not None and self.parallel < 1:
            raise BadInputError(f"--parallel {self.parallel} is not a positive count",
                                fix="give --parallel 1 or more (or leave it out: one per GPU)")

    @property
    def target_specs(self) -> list[str]:
        return [self.target, *self.targets]

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


def local_gpu_name() -> str:
    """This machine's first GPU's model."""
    import torch

    return torch.cuda.get_device_name(0)


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
    targets: list[Any] | None = None
    """The run's `Target` objects (default: `config.target_specs` resolved); tests inject
    fakes here."""
    breakdown: TimingBreakdown = field(default_factory=TimingBreakdown)
    """Where this run's seconds go (phases, worker jobs); saved in the run folder."""
    _clocked: Any = field(default=None, init=False, repr=False)
    _slots: list[Any] | None = field(default=None, init=False, repr=False)
    _lost: set[int] = field(default_factory=set, init=False, repr=False)
    """id() of targets lost during this run: they take no more of its work."""

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

    def clocked_target(self) -> Any:
        """`config.target`, resolved once, every job it runs clocked into `breakdown`."""
        if self._clocked is None:
            from kopt.harness.targets.resolve import resolve_target

            self._clocked = ClockedTarget(resolve_target(self.config.target), self.breakdown)
        return self._clocked

    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise RunCancelled(f"run {self.run_id} stopped",
                               fix=f"resume with `kopt run --resume {self.run_id}`")

    # -- where evaluations run ------------------------------------------------------------------

    def slots(self) -> list[Any]:
        """The run's slots (`harness.parallel`): one per GPU of its targets, at most
        `config.parallel`, the primary target's first. Resolved once per run."""
        if self._slots is None:
            from kopt.harness.parallel import slots_for
            from kopt.harness.targets.resolve import resolve_target

            targets = self.targets if self.targets is not None else \
                [resolve_target(spec) for spec in self.config.target_specs]
            self._slots = slots_for(targets, max_parallel=self.config.parallel)
        return self._slots

    @property
    def serial(self) -> bool:
        """One slot: every evaluation runs here, one at a time, on `config.target` (as before
        targets had slots)."""
        return len(self.slots()) == 1

    def timing_slots(self) -> list[Any]:
        """The slots whose timings compare with the baseline's: the primary slot's GPU model
        (on a CPU-only target: the primary target itself). Timings from other GPUs are never
        read as one series with these."""
        from kopt.harness.parallel import gpu_model

        slots = self.slots()
        model = gpu_model(slots[0])
        if model is None:
            return [s for s in slots if s.target is slots[0].target and s.gpu is None]
        return [s for s in slots if gpu_model(s) == model]

    def timing_gpu(self) -> str:
        """The GPU model that times candidates: the timing slots' (a remote GPU through ssh or
        ray), else this machine's. What the tuning and strategy memories are kept by."""
        from kopt.harness.parallel import gpu_model

        return gpu_model(self.timing_slots()[0]) or local_gpu_name()

    def shape_bucket(self) -> str:
        """The timed input set's shapes, each dimension rounded up to a power of two."""
        from kopt.phases.tuning_memory import shape_bucket

        return shape_bucket([list(s.shape) for s in
                             self.case.input_set(self.input_set).tensor_specs()])

    def baseline_gpu(self) -> str | None:
        """The GPU model the architect timed the baseline on (its metrics' environment)."""
        try:
            architect = json.loads((self.run_dir / "architect.json").read_text())
            metrics = architect["details"]["baseline"]["metrics"]
            env = json.loads((self.root / metrics).read_text()).get("environment") or {}
        except (OSError, KeyError, TypeError, ValueError):
            return None
        return (env.get("gpu") or {}).get("name")

    def check_timing_gpu(self) -> None:
        """Refuse to time candidates on another GPU model than the baseline's: their
        speedups would read two GPUs as one series."""
        from kopt.harness.parallel import gpu_model

        if self.device != "cuda":
            return
        was, now = self.baseline_gpu(), gpu_model(self.timing_slots()[0])
        if was and now and was != now:
            raise BadInputError(f"run {self.run_id}'s baseline was timed on {was!r} but its "
                                f"target {self.config.target!r} now times on {now!r}: the "
                                "speedups would mix two GPUs",
                                fix=f"start a new run (`kopt run {self.case.name}`) on this "
                                    f"GPU, or resume where a {was} is")

    def evaluate(self, tasks: list[Callable[[Any], Any]], *, timing: bool = False) -> list[Any]:
        """Run each `task(target)` on a free slot (timing: on the timing slots); results in
        task order; a lost target's tasks are re-queued on another slot, and it takes no more
        of this run's work. With one slot the tasks run here, one after another, on
        `config.target` (`target=None`)."""
        if self.serial:
            return [task(None) for task in tasks]
        from kopt.harness.errors import TargetLost
        from kopt.harness.parallel import evaluate_many

        slots = [s for s in (self.timing_slots() if timing else self.slots())
                 if id(s.target) not in self._lost]
        if not slots:
            raise TargetLost(f"every target of run {self.run_id} that can take this evaluation "
                             "was lost" + (" (timings compare only on the baseline's GPU model)"
                                           if timing else ""),
                             fix=f"check them with `kopt targets`, then `kopt run --resume "
                                 f"{self.run_id}`")

        def remembering(task: Callable[[Any], Any]) -> Callable[[Any], Any]:
            def run(slot: Any) -> Any:
                try:
                    return task(slot)
                except TargetLost:
                    self._lost.add(id(slot.target))
                    raise
            return run

        return evaluate_many([remembering(t) for t in tasks], slots)

    # -- the harness, or the fakes a test injected --------------------------------------------

    def measure_variant(self, variant: str | Path, *, target: Any = None,
                        **kw: Any) -> dict[str, Any]:
        if target is None and not self.serial:
            return self.evaluate([lambda t: self.measure_variant(variant, target=t, **kw)],
                                 timing=True)[0]
        if target is not None:
            kw["target"] = target
        if self.measure is not None:
            return self.measure(self.case, variant, **kw)
        from kopt.harness.runner import measure_variant

        kw.setdefault("timing_options", self.timing_options)
        kw.setdefault("target", self.clocked_target())
        return measure_variant(self.case, variant, device=self.device,
                               artifacts_root=self.artifacts_dir, input_set=self.input_set, **kw)

    def measure_variants(self, variants: list[tuple[str | Path, str]],
                         **kw: Any) -> list[dict[str, Any]]:
        """Time several (variant, label) at once on the timing slots; metrics in order."""
        if self.serial:
            return [self.measure_variant(v, label=label, **kw) for v, label in variants]
        return self.evaluate([lambda t, v=v, label=label: self.measure_variant(v, target=t,
                                                                               label=label, **kw)
                              for v, label in variants], timing=True)

    def verify_candidate(self, path: Path, *, target: Any = None, **kw: Any) -> Any:
        if target is None and not self.serial:
            return self.evaluate([lambda t: self.verify_candidate(path, target=t, **kw)])[0]
        if target is not None:
            kw["target"] = target
        if self.verify is not None:
            return self.verify(self.case, path, **kw)
        from kopt.harness.verify import verify_candidate

        kw.setdefault("target", self.clocked_target())
        with self.breakdown.covered():  # its jobs are clocked as jobs, the rest by its steps
            report = verify_candidate(self.case, path, device=self.device, **kw)
        self.breakdown.add_verification(report)
        return report

    def verify_candidates(self, paths: list[Path], *, target: Any = None,
                          **kw: Any) -> list[Any]:
        """Verify several files: with one slot in one call (shared draws, one reference run);
        with several, one file per free slot, reports in the order of `paths`."""
        if target is None and not self.serial:
            return self.evaluate([lambda t, p=p: self.verify_candidates([p], target=t, **kw)[0]
                                  for p in paths])
        if target is not None:
            kw["target"] = target
        if self.verify_many is not None:
            return self.verify_many(self.case, paths, **kw)
        if self.verify is not None:
            return [self.verify(self.case, p, **kw) for p in paths]
        from kopt.harness.verify import verify_candidates

        kw.setdefault("target", self.clocked_target())
        with self.breakdown.covered():
            reports = verify_candidates(self.case, paths, device=self.device, **kw)
        if reports:  # one shared set of draws; each report carries its own judge
            self.breakdown.add_verification(reports[0])
            for report in reports[1:]:  # shared draws and jobs: only its own judgement
                self.breakdown.add_verification(report, judge_only=True)
        return reports

    def time_trials(self, paths: list[Path], *, budget_s: float,
                    target: Any = None) -> list[dict[str, Any]]:
        """Time (and output-check) trial files: `harness.tune`, one worker job per timing
        slot (contiguous shares of `paths`, each with the whole `budget_s`); rows in order."""
        if target is None and not self.serial:
            share = -(-len(paths) // max(1, min(len(self.timing_slots()), len(paths))))
            chunks = [paths[i:i + share] for i in range(0, len(paths), share)]
            parts = self.evaluate([lambda t, c=c: self.time_trials(c, budget_s=budget_s,
                                                                   target=t) for c in chunks],
                                  timing=True)
            return [row for part in parts for row in part]
        where = {"target": target} if target is not None else {}
        if self.tune is not None:
            rows = self.tune(self.case, paths, budget_s=budget_s, **where)
        elif self.measure is not None:  # a test's fake harness: its timings, outputs taken as right
            rows = []
            for p in paths:
                m = self.measure(self.case, p, label=p.stem, **where)
                lat = m.get("latency_ms") or {}
                rows.append({"ok": bool(lat), "checked": bool(lat), "median_ms": lat.get("median"),
                             "p20_ms": lat.get("p20"), "p80_ms": lat.get("p80"),
                             "detail": "output matches" if lat else str(m.get("error"))})
        else:
            from kopt.harness.tune import time_trials

            rows = time_trials(self.case, paths, device=self.device, input_set=self.input_set,
                               target=target if target is not None else self.clocked_target(),
                               budget_s=budget_s, timing_options=self.timing_options)
        if target is not None:  # provenance: which host and GPU timed each trial
            for row in rows:
                row.setdefault("host", target.name)
                row.setdefault("gpu", getattr(target, "gpu", None))
        return rows

    def make_engineer(self) -> Any:
        if self.engineer_factory is not None:
            return self.engineer_factory(self.config.engineer, self.config.engineer_options)
        from kopt.phases.engineers.base import make_engineer

        return make_engineer(self.config.engineer, self.config.engineer_options)


def open_context(config: RunConfig, *, root: Path | None = None,
                 cancel: threading.Event | None = None, **fakes: Any) -> RunContext:
    """The context of `config`'s run in the workspace `root`."""
    root = Path(root or workspace_root()).resolve()
    case = load_case(config.case)
    device = fakes.pop("device", None) or resolve_device(case, config.device)
    use_compile_caches(root)
    return RunContext(config=config, case=case, root=root, device=device,
                      input_set=default_input_set(case, device),
                      cancel=cancel or threading.Event(),
                      breakdown=TimingBreakdown.load(root / "manifests" / config.run_id),
                      **fakes)


def run_dir_of(run_id: str, root: Path | None = None) -> Path:
    return (Path(root) if root else manifests_dir().parent) / "manifests" / run_id
