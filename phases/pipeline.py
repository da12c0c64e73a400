"""The pipeline: architect -> optimizer -> accelerator -> integrator, resumable.

`run_pipeline` starts a run (or continues `run_id`), runs the selected phases in order and
writes each phase's manifest (validated, atomically) as it finishes. A phase whose manifest
is not `verified` stops the pipeline; the next phase would refuse it anyway.
`resume_pipeline(run_id)` finds the last valid manifest (schema, status, sha256 of its
files) and continues with the phase after it -- also after the process was killed mid-phase:
the optimizer keeps the rounds it already committed, and the worktree is reset to its branch.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kopt.harness.case import load_case
from kopt.harness.errors import BadInputError, KoptError, ManifestError
from kopt.harness.names import check_name
from kopt.harness.paths import workspace_root
from kopt.harness.speedup import format_speedup, speed_measured
from kopt.harness.targets.resolve import resolve_target
from kopt.phases import accelerator, architect, integrator, optimizer
from kopt.phases.breakdown import read_breakdown
from kopt.phases.engineers.base import check_engineer
from kopt.phases.events import (
    LOG,
    PHASE_FAILED,
    PHASE_FINISHED,
    PHASE_STARTED,
    Event,
    EventSink,
    null_sink,
)
from kopt.phases.history import create_run_branch, ensure_worktree, open_repo
from kopt.phases.manifest import PHASES, check_handoff, manifest_path, read_manifest, write_manifest
from kopt.phases.outcome import Outcome, of_speedup
from kopt.phases.run import RunCancelled, RunConfig, RunContext, new_run_id, open_context

PHASE_MODULES: dict[str, ModuleType] = {"architect": architect, "optimizer": optimizer,
                                        "accelerator": accelerator, "integrator": integrator}


@dataclass
class RunResult:
    """What `kopt run --json` prints (exactly these keys)."""

    run_id: str
    case: str
    branch: str
    manifests: list[str]
    archive: str | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    verified: bool
    """True when the run's best candidate was accepted by the verifier (final verification)."""
    outcome: dict[str, Any] | None = None
    """`phases.outcome.Outcome`: {"verdict": faster | keep-compile | keep-pytorch |
    cpu-verified | not-verified, "summary": the line `kopt run` ends with, "noise"}."""
    timing_label: str | None = None
    """`cuda-events`, or `cpu-interpreter` (then both speedups are null: no speed measured)."""
    timing_breakdown: dict[str, Any] | None = None
    """Where the run's seconds went: per phase and per worker job kind."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_phases(phases: str | list[str] | None) -> list[str]:
    """A comma-separated subset of the phases, in pipeline order."""
    if phases is None:
        return list(PHASES)
    names = [p.strip() for p in (phases.split(",") if isinstance(phases, str) else phases)
             if p.strip()]
    unknown = [p for p in names if p not in PHASES]
    if unknown or not names:
        raise BadInputError(f"unknown phase(s) {unknown or names!r}",
                            fix=f"expected a comma-separated subset of {', '.join(PHASES)}")
    order = [PHASES.index(p) for p in names]
    if order != sorted(order) or len(set(order)) != len(order):
        raise BadInputError(f"phases {','.join(names)!r} are not in pipeline order",
                            fix=f"list them in the order {','.join(PHASES)}")
    return names


def run_pipeline(case: str | Path, *, engineer: str = "offline", analyst: str | None = None,
                 phases: str | list[str] | None = None, iterations: int = 3,
                 run_id: str | None = None, target: str = "local", events: EventSink = null_sink,
                 cancel: threading.Event | None = None,
                 engineer_options: dict[str, Any] | None = None, device: str | None = None,
                 root: Path | None = None, fakes: dict[str, Any] | None = None,
                 parallel: int | None = None) -> RunResult:
    """Run `phases` (default: all four) of a new run, or of the existing run `run_id`.

    `fakes` (tests only) replaces the harness calls: `measure`, `verify`, `verify_many`,
    `engineer_factory` (see `RunContext`).
    """
    if iterations < 1:
        raise BadInputError(f"--iterations {iterations} is not a positive count",
                            fix="give --iterations 1 or more")
    selected = parse_phases(phases)
    if run_id is not None:
        check_name(run_id, "run id")
    if not (fakes or {}).get("engineer_factory"):
        check_engineer(engineer)
    for spec in (t.strip() for t in target.split(",")):
        if spec:
            resolve_target(spec)  # an unknown name or a malformed spec, before anything is written
    root = Path(root or workspace_root()).resolve()
    case_obj = load_case(case)
    with open_repo(root):
        pass  # GitError (with the `kopt init` fix) before anything is written
    run_dir = root / "manifests" / run_id if run_id else None
    if run_dir is not None and (run_dir / "run.json").is_file():
        config = RunConfig.load(run_dir)
        if load_case(config.case).name != case_obj.name:
            raise BadInputError(f"run {run_id!r} is a run of {load_case(config.case).name!r}, "
                                f"not {case_obj.name!r}", fix="pick another run id")
        config.engineer, config.analyst, config.iterations = engineer, analyst, iterations
        config.engineer_options = dict(engineer_options or config.engineer_options)
        config.save(run_dir)
        ctx = open_context(config, root=root, cancel=cancel, **(fakes or {}))
        ensure_worktree(ctx.case.name, config.run_id, root, discard_changes=True)
    else:
        if selected[0] != "architect":
            raise BadInputError(f"a new run starts with the architect, not {selected[0]!r}",
                                fix="add architect to --phases, or pass --run-id of a run")
        config = RunConfig(run_id=run_id or new_run_id(), case=str(case_obj.directory),
                           engineer=engineer, analyst=analyst, iterations=iterations,
                           target=target, device=device, parallel=parallel,
                           engineer_options=dict(engineer_options or {}))
        ctx = open_context(config, root=root, cancel=cancel, **(fakes or {}))
        config.save(ctx.run_dir)
        create_run_branch(ctx.case.name, config.run_id, root)
        events(Event(LOG, "", f"run {config.run_id}: branch {ctx.branch}, "
                              f"worktree {ctx.worktree}"))
    _run_phases(ctx, selected, events)
    return result_of(ctx.run_dir, root)


def _run_phases(ctx: RunContext, selected: list[str], events: EventSink) -> None:
    for phase in selected:
        ctx.check_cancel()
        events(Event(PHASE_STARTED, phase, f"{phase}: started"))
        try:
            with ctx.breakdown.phase(phase):
                manifest = PHASE_MODULES[phase].run(ctx, events, ctx.cancel)
            ctx.breakdown.save(ctx.run_dir)
            if phase == "integrator":  # the whole run's breakdown, in its final manifest
                manifest.details["timing_breakdown"] = ctx.breakdown.to_dict()
            path = write_manifest(manifest, manifest_path(ctx.run_dir, phase))
        except RunCancelled:
            events(Event(PHASE_FAILED, phase, f"{phase}: stopped by the user",
                         {"error": "cancelled"}))
            raise
        except KoptError as err:
            events(Event(PHASE_FAILED, phase, f"{phase}: {err.one_line()}",
                         {"error": err.one_line()}))
            raise
        said = format_speedup(manifest.speedup, manifest.timing_label, missing="")
        events(Event(PHASE_FINISHED, phase,
                     f"{phase}: {manifest.status}" + (f", {said} vs eager "
                                                      f"({manifest.timing_label})" if said else
                                                      " (CPU interpreter: no speed measured)"
                                                      if manifest.speedup else ""),
                     {"manifest": str(path), "status": manifest.status}))
        if manifest.status != "verified":
            events(Event(LOG, phase, f"{phase} did not verify; the pipeline stops here"))
            return


def last_valid_phase(run_dir: Path, root: Path | None = None) -> str | None:
    """The last phase, in order, whose manifest passes the hand-off check (None: none)."""
    last = None
    for phase in PHASES:
        try:
            check_handoff(run_dir, phase, run_id=run_dir.name, root=root)
        except ManifestError:
            break
        last = phase
    return last


def resume_pipeline(run_id: str, *, events: EventSink = null_sink,
                    cancel: threading.Event | None = None, root: Path | None = None,
                    fakes: dict[str, Any] | None = None) -> RunResult:
    """Continue `run_id` from the phase after its last valid manifest."""
    check_name(run_id, "run id")
    root = Path(root or workspace_root()).resolve()
    run_dir = root / "manifests" / run_id
    config = RunConfig.load(run_dir)
    ctx = open_context(config, root=root, cancel=cancel, **(fakes or {}))
    last = last_valid_phase(run_dir, root)
    remaining = list(PHASES[PHASES.index(last) + 1:]) if last else list(PHASES)
    if not remaining:
        events(Event(LOG, "", f"run {run_id} is complete; nothing to resume"))
        return result_of(run_dir, root)
    ensure_worktree(ctx.case.name, run_id, root, discard_changes=True)
    events(Event(LOG, "", f"resuming run {run_id} at the {remaining[0]} "
                          f"(last valid manifest: {last or 'none'})"))
    _run_phases(ctx, remaining, events)
    return result_of(run_dir, root)


def result_of(run_dir: Path, root: Path | None = None) -> RunResult:
    """The `kopt run --json` object of a run, from its manifests."""
    config = RunConfig.load(run_dir)
    case = load_case(config.case).name
    paths = [manifest_path(run_dir, p) for p in PHASES if manifest_path(run_dir, p).is_file()]
    root = Path(root or workspace_root()).resolve()
    rel = [str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in paths]
    archive = None
    eager = compiled = None
    verified = False
    label = None
    outcome: Outcome | None = None
    final = manifest_path(run_dir, "integrator")
    if final.is_file():
        m = read_manifest(final)
        archive = m.details.get("archive")
        eager = m.details["timing"].get("speedup_vs_eager")
        compiled = m.details["timing"].get("speedup_vs_compile")
        label = m.details["timing"].get("timing_label") or m.timing_label
        verified = bool(m.details["verification"]["accepted"]) and m.status == "verified"
        stored = m.details.get("outcome")
        outcome = Outcome(**stored) if stored else of_speedup(eager, label, verified=verified)
    elif paths:
        m = read_manifest(paths[-1])
        eager = m.speedup
        label = m.timing_label
        verified = m.status == "verified" and m.phase in ("optimizer", "accelerator")
        outcome = of_speedup(eager, label, verified=verified)
    if not speed_measured(label):
        eager = compiled = None  # an interpreter timing is not a speedup
    from kopt.phases.history import branch_name

    return RunResult(run_id=config.run_id, case=case, branch=branch_name(case, config.run_id),
                     manifests=rel, archive=archive, speedup_vs_eager=eager,
                     speedup_vs_compile=compiled, verified=verified,
                     outcome=outcome.to_dict() if outcome else None, timing_label=label,
                     timing_breakdown=read_breakdown(run_dir) or None)
