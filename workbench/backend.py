"""What the TUI calls: one object that wraps the phases and the harness.

The screens never import `phases` or `harness` directly for work; they call a `Backend`.
`Backend` is the real thing (git history, the pipeline, the verifier, the bench); tests hand
the app a subclass that overrides its methods with small fakes. Every method may block: the
screens call them from thread workers only, never from the UI thread.

Runs and iterations are `phases.history.RunInfo` / `IterationInfo` objects (ARCHITECTURE.md);
the UI reads them by attribute name only, so a fake may use any object with those fields.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.harness.errors import BadInputError, KoptError
from kopt.phases.events import EventSink

PHASES = ("architect", "optimizer", "accelerator", "integrator")


@dataclass(frozen=True)
class CaseRow:
    """One line of the home screen."""

    name: str
    description: str = ""
    runs: int = 0
    """How many runs of this case the history holds."""
    best_speedup: float | None = None
    """Best verified speedup over all runs (None: no verified iteration yet)."""
    verdict: str = "no runs"
    """approved | rejected | pending | no runs | invalid (the case does not load)."""
    source: str = "bundled"
    """bundled | user."""
    latest_empty: bool = False
    """The latest run has no iteration (cancelled or failed before its first kernel): opening
    the case offers a new run instead of showing an empty one."""


@dataclass(frozen=True)
class RunRequest:
    """What the new-run dialog asks for (`run_pipeline`'s arguments)."""

    case: str
    engineer: str = "offline"
    analyst: str | None = None
    phases: list[str] | None = None
    """None: all four phases."""
    iterations: int = 3
    run_id: str | None = None
    """Continue this run (e.g. the next iteration after a rejection) instead of a new one."""


@dataclass
class IterationDetail:
    """What the verification, profile and metrics panes show for one iteration."""

    verification: dict[str, Any] | None = None
    """The verifier's report dict (`VerificationReport.to_dict()`)."""
    metrics: dict[str, Any] | None = None
    """The iteration's `metrics.json` (ARCHITECTURE.md), when measured."""


@dataclass
class ManifestView:
    """One phase manifest of a run and whether it validates."""

    phase: str
    data: dict[str, Any]
    valid: bool
    problem: str = ""


@dataclass
class RunOutcome:
    """What a finished pipeline call reports back to the run screen."""

    run_id: str | None
    status: str
    summary: dict[str, Any] = field(default_factory=dict)


def kernel_path(run: Any) -> Path:
    """The candidate file of a run: `kernels/<case>.py` in its worktree."""
    return Path(run.worktree) / "kernels" / f"{run.case}.py"


def format_speedup(value: float | None, timing_label: str | None = None) -> str:
    """`2.40x` (`harness.speedup.format_speedup`, the one formatter); `—` when unmeasured or
    timed by the CPU interpreter (a `Speedup` from history or bench carries its label)."""
    from kopt.harness.speedup import format_speedup as one_formatter

    return one_formatter(value, timing_label)


def default_engineer() -> str:
    """`anthropic` when an API key is set, else the embedded `offline` engineer."""
    return "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"


class Backend:
    """The real calls (phases.pipeline, phases.history, harness.verify, harness.bench)."""

    def __init__(self, *, pipeline_options: dict[str, Any] | None = None,
                 in_process: bool = False) -> None:
        self.pipeline_options = dict(pipeline_options or {})
        """Extra keyword arguments for `run_pipeline` (e.g. `target`, `device`); JSON values
        unless `in_process`."""
        self.in_process = in_process
        """Run the pipeline in this process (tests that hand it Python fakes) instead of in
        a child process (workbench/pipeline_process.py), which keeps the UI's loop free."""
        self._baselines: Any = None
        """The session's `harness.bench.BaselineMemo` (made at the first bench: it imports
        torch)."""

    def workspace_problem(self) -> str | None:
        """Why runs cannot be recorded here (not a git repository), or None."""
        from kopt.phases import history

        try:
            with history.open_repo():
                return None
        except KoptError as err:
            return err.one_line()

    def init_workspace(self) -> str:
        """`kopt init`: make the workspace a git repository; returns what was done."""
        from kopt.phases import history

        top, created = history.init_workspace()
        return f"created a git repository in {top}" if created else f"using {top}"

    def cases(self) -> list[CaseRow]:
        from kopt.harness.case import list_cases
        from kopt.harness.paths import bundled_cases_dir

        rows: list[CaseRow] = []
        runs = self._runs_or_empty(None)
        for case in list_cases():
            if isinstance(case, KoptError):
                name = Path(getattr(case, "file", "?")).parent.name
                rows.append(CaseRow(name=name, description=case.one_line(), verdict="invalid"))
                continue
            mine = [r for r in runs if r.case == case.name]
            source = "bundled" if bundled_cases_dir() in case.directory.parents else "user"
            rows.append(case_row(case.name, case.manifest.description, mine, source=source))
        return rows

    def runs(self, case: str | None = None) -> list[Any]:
        return self._runs_or_empty(case)

    def _runs_or_empty(self, case: str | None) -> list[Any]:
        try:
            from kopt.phases import history
        except ModuleNotFoundError:
            return []
        try:
            return list(history.list_runs(case))
        except KoptError:
            return []

    def run_pipeline(self, request: RunRequest, *, events: EventSink,
                     cancel: threading.Event) -> RunOutcome:
        if self.in_process:
            from kopt.phases.pipeline import run_pipeline

            summary = run_pipeline(request.case, engineer=request.engineer,
                                   analyst=request.analyst, phases=request.phases,
                                   iterations=request.iterations, run_id=request.run_id,
                                   events=events, cancel=cancel,
                                   **self.pipeline_options).to_dict()
        else:
            summary = run_pipeline_process(request, self.pipeline_options, events=events,
                                           cancel=cancel)
        status = "verified" if summary.get("verified") else "finished, not verified"
        outcome = summary.get("outcome") or {}
        if summary.get("verified") and outcome.get("summary"):
            # phases.outcome: "verified, 2.57x vs eager, ...", "verified, no speedup: keep
            # PyTorch (0.83x vs eager)", "verified (CPU interpreter: no speed measured)"
            status = outcome["summary"] if outcome.get("verdict") == "cpu-verified" \
                else f"verified, {outcome['summary']}"
        if cancel.is_set():
            status = "cancelled"
        return RunOutcome(run_id=summary.get("run_id"), status=status, summary=summary)

    def ensure_worktree(self, run: Any) -> Path:
        """The run's worktree, recreated from its branch when it was removed."""
        if run.worktree and Path(run.worktree).is_dir():
            return Path(run.worktree)
        from kopt.phases import history

        return Path(history.ensure_worktree(run.case, run.run_id))

    def approve(self, run_id: str, commit: str | None) -> None:
        from kopt.phases import history

        history.approve(run_id, commit)

    def reject(self, run_id: str, commit: str | None, reason: str) -> None:
        from kopt.phases import history

        history.reject(run_id, commit, reason=reason)

    def undo(self, run_id: str) -> None:
        from kopt.phases import history

        if approval_word(history.get_run(run_id).approval) == "pending":
            raise BadInputError(f"nothing to undo: run {run_id!r} has no approval or rejection",
                                fix="approve (a) or reject (r) an iteration first")
        history.undo_decision(run_id)

    def diff(self, run_id: str, a: str | None, b: str | None) -> str:
        """Kernel diff of iteration `b` against iteration `a` (None: the one before `b`)."""
        from kopt.phases import history

        return history.diff(run_id, a, b)

    def diff_across(self, run_a: Any, a: str, run_b: Any, b: str) -> str:
        """Kernel diff between iterations of two runs (cases may differ)."""
        if run_a.run_id == run_b.run_id:
            return self.diff(run_a.run_id, a, b)
        import git

        from kopt.phases import history

        with history.open_repo() as repo:
            try:
                return repo.git.diff("--no-color", f"{a}:kernels/{run_a.case}.py",
                                     f"{b}:kernels/{run_b.case}.py")
            except git.GitCommandError as err:
                raise BadInputError(f"cannot diff {a[:10]} and {b[:10]}: "
                                    f"{str(err.stderr).strip()[:200]}") from err

    def kernel_source(self, run: Any, commit: str) -> str:
        """The run's kernel file as iteration `commit` committed it."""
        from kopt.phases import history

        return history.show_file(commit, f"kernels/{run.case}.py")

    def uncommitted_edit(self, run: Any) -> bool:
        """Whether the worktree's kernel differs from the last iteration's (an edit that was
        saved but not committed, like lazygit's unstaged changes)."""
        path = kernel_path(run)
        if not run.worktree or not path.is_file():
            return False
        if not run.iterations:
            return True
        try:
            return path.read_text() != self.kernel_source(run, run.iterations[-1].commit)
        except (KoptError, OSError, ValueError):
            return False

    def worktree_diff(self, run: Any) -> str:
        """The uncommitted edit: the worktree's kernel against the last iteration's."""
        import difflib

        latest = run.iterations[-1] if run.iterations else None
        old = self.kernel_source(run, latest.commit) if latest else ""
        new = kernel_path(run).read_text()
        name = f"kernels/{run.case}.py"
        return "".join(difflib.unified_diff(
            old.splitlines(True), new.splitlines(True),
            f"a/{name} (iteration {latest.iteration})" if latest else "/dev/null",
            f"b/{name} (worktree)"))

    def review_copy(self, run: Any, iteration: Any) -> Path:
        """Iteration `iteration`'s kernel written to `.kopt/review/<run>/<commit>/`, for
        re-verifying or re-benching that iteration rather than the worktree's file."""
        from kopt.harness.paths import kopt_dir

        path = kopt_dir() / "review" / run.run_id / iteration.commit[:12] / f"{run.case}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.kernel_source(run, iteration.commit))
        return path

    def iteration_detail(self, run: Any, iteration: Any) -> IterationDetail:
        """The verification and metrics files committed with the iteration."""
        import git

        from kopt.phases import history

        detail = IterationDetail()
        for attr in ("verification", "metrics"):
            try:
                text = history.show_file(iteration.commit, f"kernels/{run.case}.{attr}.json")
                setattr(detail, attr, json.loads(text))
            except (git.GitCommandError, json.JSONDecodeError, KoptError):
                pass
        return detail

    def manifests(self, run_id: str) -> list[ManifestView]:
        from kopt.harness.paths import manifests_dir

        out: list[ManifestView] = []
        for phase in PHASES:
            path = manifests_dir() / run_id / f"{phase}.json"
            if not path.exists():
                continue
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                out.append(ManifestView(phase, {}, False, f"{path}: not JSON ({err})"))
                continue
            from kopt.phases.manifest import validation_errors

            errors = validation_errors(data)
            out.append(ManifestView(phase, data, not errors,
                                    f"{errors[0]} (+{len(errors) - 1} more)" if len(errors) > 1
                                    else (errors[0] if errors else "")))
        return out

    def verify(self, case: str, candidate: Path) -> dict[str, Any]:
        from kopt.harness.verify import verify_candidate

        return verify_candidate(case, candidate).to_dict()

    def bench(self, case: str, candidate: Path, *, verified: bool = False) -> list[dict[str, Any]]:
        """Eager, torch.compile and `candidate` timed side by side. `verified`: the caller
        has just verified and accepted these very bytes (a `snapshot`), so they are timed
        without being verified a second time, and eager's and compile's timings of the case
        are reused from this session's last bench of it (`harness.bench.BaselineMemo`, up to
        ten minutes old: a saved edit's check times only the edit). An explicit bench
        (`verified` False) times all three anew."""
        from kopt.harness.bench import BaselineMemo, bench_case

        if self._baselines is None:
            self._baselines = BaselineMemo()
        if not verified:
            self._baselines.clear()
        return list(bench_case(case, [candidate], verified=[candidate] if verified else [],
                               memo=self._baselines))

    def check_edit(self, case: str, path: Path, *,
                   on_verified: Callable[[dict[str, Any]], bool] | None = None,
                   ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """A saved edit's check (watch mode, the workbench's `e`): the file's bytes as they
        are now are copied (`snapshot`: an editor saving again meanwhile changes nothing),
        the copy verified and, when accepted, timed with that verdict (`bench(verified=True)`).
        `on_verified(report)` is called between the two; when it returns False (the user
        moved on) nothing is timed. Returns the report (naming `path`, not the copy) and the
        bench rows (None when not timed)."""
        snap = self.snapshot(path)
        try:
            report = self.verify(case, snap)
            if report.get("candidate") == str(snap):
                report["candidate"] = str(path)  # the file the user edits, not the copy
            if on_verified is not None and not on_verified(report):
                return report, None
            if not report.get("accepted"):
                return report, None
            return report, self.bench(case, snap, verified=True)
        finally:
            self.drop_snapshot(snap)

    def snapshot(self, path: Path) -> Path:
        """A private copy of `path`, with its file name, that no editor writes to: what a saved
        edit's check verifies and then times, so the timed bytes are the verified ones. The
        caller removes it (`drop_snapshot`)."""
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="kopt-edit-"))
        copy = folder / path.name
        shutil.copyfile(path, copy)
        return copy

    def drop_snapshot(self, copy: Path) -> None:
        import shutil

        if copy.parent.name.startswith("kopt-edit-"):
            shutil.rmtree(copy.parent, ignore_errors=True)

    def import_kernelbench(self, path: Path, name: str | None = None) -> str:
        from kopt.harness.kernelbench import import_kernelbench

        if not path.is_file():
            raise BadInputError(f"no KernelBench file at {str(path)!r}",
                                fix="give the path of a .py file defining Model and get_inputs()")
        return import_kernelbench(path, name=name).name

    def commit_user_edit(self, run: Any, candidate: Path, report: dict[str, Any] | None,
                         bench: list[dict[str, Any]] | None) -> str:
        """Record the user's edit of the kernel as an iteration authored by `user`, with its
        verification report and timing beside it (the worktree layout of ARCHITECTURE.md)."""
        from kopt.phases import history

        worktree = Path(run.worktree)
        rel = candidate.resolve().relative_to(worktree.resolve()).as_posix()
        base = candidate.with_suffix("")
        if report is not None:
            (base.parent / f"{base.name}.verification.json").write_text(
                json.dumps(report, indent=1, default=str) + "\n")
        row = next((r for r in bench or [] if r.get("variant") not in ("eager", "compile")),
                   None)
        speedup = row.get("speedup_vs_eager") if row else None
        pct = row.get("pct_of_floor") if row else None
        verified = bool(report and report.get("accepted"))
        number = max((it.iteration for it in run.iterations), default=0) + 1
        evidence = (f"{format_speedup(speedup, row.get('timing_label'))} vs eager, "
                    f"{row.get('median_ms', 0):.3f} ms ({row.get('timing_label', '')})"
                    if row and speedup else "not timed")
        return history.commit_iteration(
            worktree, run_id=run.run_id, phase="optimizer", iteration=number, case=run.case,
            subject=f"user: {run.case} iter {number} - {evidence}",
            body="Edited by hand in the workbench; re-verified and re-benched on save.",
            speedup=speedup if verified else None, pct_of_floor=pct if verified else None,
            timing_label=row.get("timing_label") if row else None,
            verified=verified, author="user", candidate=rel, paths=["kernels"])


def run_pipeline_process(request: RunRequest, options: dict[str, Any], *, events: EventSink,
                         cancel: threading.Event) -> dict[str, Any]:
    """`run_pipeline` in a child process (workbench/pipeline_process.py): its events are
    passed to `events` as they arrive; setting `cancel` asks the child to stop after its
    current step. Returns `RunResult.to_dict()`; raises `KoptError` when the run failed."""
    import collections
    import subprocess
    import sys
    from dataclasses import asdict

    from kopt.harness.paths import import_root
    from kopt.phases.events import Event
    from kopt.workbench.pipeline_process import CANCEL

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(import_root()), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, "-m", "kopt.workbench.pipeline_process"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr_tail: collections.deque[str] = collections.deque(maxlen=20)

    def drain() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            stderr_tail.append(line.rstrip())

    def forward_cancel() -> None:
        while proc.poll() is None:
            if cancel.wait(0.2):
                try:
                    proc.stdin.write(CANCEL + "\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                except (BrokenPipeError, ValueError, OSError):
                    pass
                return

    threading.Thread(target=drain, daemon=True, name="kopt-pipeline-stderr").start()
    proc.stdin.write(json.dumps({"request": asdict(request), "options": options}) + "\n")
    proc.stdin.flush()
    threading.Thread(target=forward_cancel, daemon=True, name="kopt-pipeline-cancel").start()
    summary: dict[str, Any] | None = None
    error: str | None = None
    try:
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "event" in message:
                events(Event(**message["event"]))
            elif "result" in message:
                summary = message["result"]
            elif "error" in message:
                error = str(message["error"])
    finally:
        returncode = proc.wait()
        proc.stdin.close()
    if summary is not None:
        return summary
    if error is None:
        tail = " | ".join(list(stderr_tail)[-3:])
        error = f"the pipeline process exited with code {returncode}" + \
            (f": {tail}" if tail else "")
    raise KoptError(error)


def case_row(name: str, description: str, runs: list[Any], *, source: str = "bundled") -> CaseRow:
    """Summarise a case's runs: best speedup and the latest decision."""
    speedups = [r.best_speedup for r in runs if r.best_speedup is not None]
    verdict = "no runs"
    if runs:
        verdict = approval_word(runs[-1].approval)
    return CaseRow(name=name, description=description, runs=len(runs),
                   best_speedup=max(speedups) if speedups else None, verdict=verdict,
                   source=source, latest_empty=bool(runs) and not runs[-1].iterations)


def approval_word(approval: Any) -> str:
    """approved | rejected | pending, from whatever `RunInfo.approval` holds."""
    if approval is None:
        return "pending"
    if isinstance(approval, dict):
        approval = approval.get("state") or approval.get("status") or approval.get("decision")
    text = str(getattr(approval, "state", approval) or "pending").lower()
    return text if text in ("approved", "rejected") else "pending"
