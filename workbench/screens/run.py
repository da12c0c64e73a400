"""The run screen: phase strip, iterations on the left, panes on the right.

Everything slow (the pipeline, git, verification, benchmarks) runs in thread workers that
post messages back; the UI thread only renders. `esc` cancels running jobs (the pipeline
through its cancel event; other jobs are dropped when they return).
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from kopt.harness.errors import KoptError
from kopt.phases import events as ev
from kopt.workbench.backend import (
    IterationDetail,
    ManifestView,
    RunOutcome,
    RunRequest,
    approval_word,
    format_speedup,
    kernel_path,
)
from kopt.workbench.widgets.agent_log import AgentLog
from kopt.workbench.widgets.diff_view import DiffView
from kopt.workbench.widgets.iteration_table import IterationTable, WorktreeEdit, table_width
from kopt.workbench.widgets.key_footer import KeyFooter
from kopt.workbench.widgets.manifest_view import ManifestView as ManifestPane
from kopt.workbench.widgets.metrics_chart import MetricsChart
from kopt.workbench.widgets.phase_strip import PhaseStrip
from kopt.workbench.widgets.profile_view import ProfileView
from kopt.workbench.widgets.verification_view import VerificationView

TABS = ("diff", "verification", "profile", "metrics", "log", "manifest")
TAB_LABELS = {"diff": ("1 Diff", "1 Diff"), "verification": ("2 Verification", "2 Ver"),
              "profile": ("3 Profile", "3 Prof"), "metrics": ("4 Metrics", "4 Met"),
              "log": ("5 Log", "5 Log"), "manifest": ("6 Manifest", "6 Man")}
"""(wide, narrow) labels: all six tabs fit beside the iterations at 80 columns."""
NARROW_WIDTH = 100
"""Below this many columns the run screen drops table columns and shortens labels."""
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def approved_commit(approval: Any) -> str | None:
    """The commit an approval/rejection names, if `RunInfo.approval` records one."""
    if isinstance(approval, dict):
        return approval.get("commit")
    return getattr(approval, "commit", None)


def find_key(data: Any, key: str) -> Any:
    """The first value stored under `key` anywhere in nested dicts/lists."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        values = list(data.values())
    elif isinstance(data, list):
        values = data
    else:
        return None
    for value in values:
        found = find_key(value, key)
        if found is not None:
            return found
    return None


class RunScreen(Screen[None]):
    """One run of one case: watch it progress, review its iterations, decide."""

    DEFAULT_CSS = """
    RunScreen #body { height: 1fr; }
    RunScreen #left { width: auto; border-right: solid $panel-lighten-2; }
    RunScreen #run-title { height: auto; padding: 0 1; text-style: bold; }
    RunScreen #panes { width: 1fr; }
    RunScreen #job { height: 1; padding: 0 1; background: $boost; }
    """

    BINDINGS = [
        # In the footer's order, which is also its priority: on a narrow terminal the last
        # ones that do not fit are left to `?` (widgets/key_footer.py).
        Binding("a", "approve", "Approve", id="approve"),
        Binding("r", "reject", "Reject", id="reject"),
        Binding("escape", "escape", "Cancel/back", id="cancel"),
        Binding("v", "verify", "Verify", id="verify"),
        Binding("b", "bench", "Bench", id="bench"),
        Binding("e", "edit", "Edit", id="edit"),
        Binding("z", "undo", "Undo", id="undo"),
        Binding("w", "toggle_watch", "Watch", id="watch"),
        Binding("d", "toggle_diff_mode", "Diff mode", id="diff_mode"),
        Binding("q", "back", "Back", id="back"),
        Binding("c", "toggle_diff_base", "Diff base", show=False, id="diff_base"),
        Binding("n", "new_run", "New run", show=False, id="new_run"),
        Binding("h", "tab(-1)", "Prev pane", show=False, id="prev_pane"),
        Binding("l", "tab(1)", "Next pane", show=False, id="next_pane"),
        Binding("1", "show_tab('diff')", "Diff", show=False, id="pane_diff"),
        Binding("2", "show_tab('verification')", "Verification", show=False,
                id="pane_verification"),
        Binding("3", "show_tab('profile')", "Profile", show=False, id="pane_profile"),
        Binding("4", "show_tab('metrics')", "Metrics", show=False, id="pane_metrics"),
        Binding("5", "show_tab('log')", "Log", show=False, id="pane_log"),
        Binding("6", "show_tab('manifest')", "Manifest", show=False, id="pane_manifest"),
    ]

    diff_mode: reactive[str] = reactive("split")
    """unified | split (`d`); narrow terminals show unified regardless."""
    diff_base: reactive[str] = reactive("parent")
    """parent | first: what the selected iteration is compared with (`c`)."""
    watching: reactive[bool] = reactive(False)
    """Whether saving the kernel in the worktree re-verifies and re-benches it (`w`)."""

    class PipelineEvent(Message):
        """An event from the pipeline thread."""

        def __init__(self, event: ev.Event) -> None:
            super().__init__()
            self.event = event

    class PipelineDone(Message):
        """The pipeline call returned (outcome) or raised (error)."""

        def __init__(self, outcome: RunOutcome | None, error: str | None) -> None:
            super().__init__()
            self.outcome = outcome
            self.error = error

    class RunLoaded(Message):
        """The run's history and manifests, read from git and manifests/."""

        def __init__(self, run: Any | None, manifests: list[ManifestView],
                     generation: int = 0, edited: bool = False) -> None:
            super().__init__()
            self.run = run
            self.manifests = manifests
            self.generation = generation
            self.edited = edited
            """The worktree's kernel differs from the last iteration's (not committed)."""

    class DetailLoaded(Message):
        """The diff and recorded verification/metrics of the selected iteration."""

        def __init__(self, commit: str, diff: str, title: str, detail: IterationDetail) -> None:
            super().__init__()
            self.commit = commit
            self.diff = diff
            self.title = title
            self.detail = detail

    class JobFinished(Message):
        """A verify/bench/decision job ended; `result` is what it produced."""

        def __init__(self, job: str, result: Any = None, error: str | None = None) -> None:
            super().__init__()
            self.job = job
            self.result = result
            self.error = error

    class EditorReady(Message):
        """The kernel file to edit is in place in the worktree (`e`)."""

        def __init__(self, path: Path, note: str = "") -> None:
            super().__init__()
            self.path = path
            self.note = note

    class KernelSaved(Message):
        """The watcher saw new content in kernel files of the worktree."""

        def __init__(self, paths: set[Path]) -> None:
            super().__init__()
            self.paths = paths

    def __init__(self, *, case: str, run_id: str | None = None,
                 request: RunRequest | None = None) -> None:
        super().__init__()
        self.case = case
        self.run_id = run_id or (request.run_id if request else None)
        self.request = request
        self.run: Any | None = None
        self.manifests: list[ManifestView] = []
        self.jobs: dict[str, float] = {}
        self._generation = 0
        """Bumped when a new run replaces the one on screen; older loads are dropped."""
        self.cancel_event = threading.Event()
        self.known_runs: set[str] | None = None
        self.watcher: Any = None
        self.last_engineer = request.engineer if request else "offline"
        self.bench_rows: list[dict[str, Any]] | None = None
        self._detail_for: str | None = None
        self.edit_report: dict[str, Any] | None = None
        """The latest verification of the worktree's uncommitted kernel (its row's pane)."""
        self._spin = 0

    # ---- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield PhaseStrip(id="phases")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield Static("", id="run-title")
                yield IterationTable(id="iterations")
            with TabbedContent(id="panes", initial="diff"):
                with TabPane("1 Diff", id="diff"):
                    yield DiffView(id="diff-view")
                with TabPane("2 Verification", id="verification"):
                    yield VerificationView(id="verification-view")
                with TabPane("3 Profile", id="profile"):
                    yield ProfileView(id="profile-view")
                with TabPane("4 Metrics", id="metrics"):
                    yield MetricsChart(id="metrics-view")
                with TabPane("5 Log", id="log"):
                    yield AgentLog(id="log-view")
                with TabPane("6 Manifest", id="manifest"):
                    yield ManifestPane(id="manifest-view")
        yield Static("", id="job")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "kopt"
        self.sub_title = self.case
        self.diff_mode = self.app.config.tui.diff_mode
        self.watching = self.app.config.tui.watch  # starts once the run is loaded
        self.query_one(IterationTable).focus()
        self.set_interval(0.25, self._tick)
        self._layout_for(self.app.size.width)
        self._update_title()
        self._update_job_line()
        if self.request is not None:
            self.start_pipeline(self.request)
        else:
            self.load_run()

    def on_unmount(self) -> None:
        self.cancel_event.set()
        self._stop_watcher()

    def on_resize(self) -> None:
        self._layout_for(self.app.size.width)

    def _layout_for(self, width: int) -> None:
        """Drop table columns and shorten tab labels on a narrow terminal (k9s-style)."""
        narrow = width < NARROW_WIDTH
        self.set_class(narrow, "narrow")
        self._update_job_line()
        table = self.query_one(IterationTable)
        table.narrow = narrow
        self.query_one("#left").styles.width = table_width(narrow) + 1  # + its border
        tabs = self.query_one(TabbedContent)
        for pane, labels in TAB_LABELS.items():
            tabs.get_tab(pane).label = labels[1] if narrow else labels[0]

    # ---- jobs ---------------------------------------------------------------------------

    def _job_started(self, name: str) -> None:
        self.jobs[name] = time.monotonic()
        self._update_job_line()

    def _job_ended(self, name: str) -> None:
        self.jobs.pop(name, None)
        self._update_job_line()

    def _tick(self) -> None:
        if self.jobs:
            self._spin += 1
            self._update_job_line()

    def _update_job_line(self) -> None:
        line = Text()
        if self.jobs:
            now = time.monotonic()
            line.append(SPINNER[self._spin % len(SPINNER)] + " ", style="yellow")
            line.append(" · ".join(f"{name} {now - t0:.0f}s" for name, t0 in self.jobs.items()),
                        style="yellow")
            line.append("  esc cancels", style="dim")
        else:
            line.append("ready", style="dim")
        line.append(f"   watch {'on' if self.watching else 'off'}",
                    style="bold green" if self.watching else "dim")
        base = "previous" if self.diff_base == "parent" else "first"
        mode = "unified (narrow)" if self.has_class("narrow") else self.diff_mode
        line.append(f" · diff {mode} vs {base} iteration", style="dim")
        self.query_one("#job", Static).update(line)

    @property
    def pipeline_running(self) -> bool:
        return "pipeline" in self.jobs

    # ---- the pipeline -------------------------------------------------------------------

    def start_pipeline(self, request: RunRequest) -> None:
        if self.pipeline_running:
            self.notify("a run is already in progress (esc cancels it)", severity="warning")
            return
        self.request = request
        self.last_engineer = request.engineer
        self.cancel_event = threading.Event()
        if request.run_id is None:  # a new run: forget the one on screen
            self._generation += 1  # and any load of it still in flight
            self.query_one(PhaseStrip).reset()
            self.run, self.run_id, self.known_runs = None, None, None
            self.manifests = []
            self.query_one(IterationTable).set_iterations([])
            self.query_one(DiffView).show("")
            self._update_title()
        self._job_started("pipeline")
        self.query_one(AgentLog).add(Text(
            f"── run {request.case} with {request.engineer}"
            + (f" (continuing {request.run_id})" if request.run_id else ""), style="bold"))
        self._pipeline_worker(request, self.cancel_event)

    @work(thread=True, group="pipeline")
    def _pipeline_worker(self, request: RunRequest, cancel: threading.Event) -> None:
        backend = self.app.backend
        if self.known_runs is None:
            self.known_runs = {r.run_id for r in backend.runs(request.case)}

        def sink(event: ev.Event) -> None:
            self.post_message(self.PipelineEvent(event))

        try:
            outcome = backend.run_pipeline(request, events=sink, cancel=cancel)
        except KoptError as err:
            self.post_message(self.PipelineDone(None, err.one_line()))
        except Exception as err:  # a bug in a phase must not take the workbench down
            self.post_message(self.PipelineDone(None, f"{type(err).__name__}: {err}"))
        else:
            self.post_message(self.PipelineDone(outcome, None))

    def on_run_screen_pipeline_event(self, message: PipelineEvent) -> None:
        event = message.event
        self.query_one(PhaseStrip).apply(event)
        self.query_one(AgentLog).add_event(event)
        if event.data.get("run_id") and not self.run_id:
            self.run_id = str(event.data["run_id"])
        if event.kind == ev.VERIFICATION:
            self.query_one(VerificationView).show(event.data, source=event.phase or "pipeline")
        if event.kind in (ev.ITERATION, ev.PHASE_FINISHED, ev.PHASE_FAILED):
            self.load_run()

    def on_run_screen_pipeline_done(self, message: PipelineDone) -> None:
        self._job_ended("pipeline")
        log = self.query_one(AgentLog)
        if message.error:
            if self.cancel_event.is_set():
                log.add(Text("── run cancelled", style="magenta"))
            else:
                log.add(Text(f"── run failed: {message.error}", style="bold red"))
                self.notify(message.error, title="run failed", severity="error")
        elif message.outcome is not None:
            if message.outcome.run_id:
                self.run_id = message.outcome.run_id
            log.add(Text(f"── run {message.outcome.status or 'finished'}", style="bold"))
        if self.cancel_event.is_set():
            self.query_one(PhaseStrip).cancel_running()
        self.load_run()

    # ---- loading history ----------------------------------------------------------------

    def load_run(self) -> None:
        """Re-read the run on screen (in a thread). What to read is decided here, on the UI
        thread: a worker that read `run_id` after a new run had cleared it would load the
        previous run back onto the screen."""
        if self.pipeline_running and not self.run_id and self.known_runs is None:
            return  # the new run's worker has not listed the runs before it yet
        self._load_run_worker(self.run_id, self.pipeline_running, set(self.known_runs or ()),
                              self._generation)

    @work(thread=True, exclusive=True, group="load")
    def _load_run_worker(self, run_id: str | None, pipeline_running: bool, known: set[str],
                         generation: int) -> None:
        backend = self.app.backend
        runs = backend.runs(self.case)
        run = None
        if run_id:
            run = next((r for r in runs if r.run_id == run_id), None)
        elif pipeline_running:
            run = next((r for r in reversed(runs) if r.run_id not in known), None)
        elif runs:
            run = runs[-1]
        manifests = []
        edited = False
        if run is not None:
            manifests = backend.manifests(run.run_id)
            if not pipeline_running:  # (a running engineer writes the file before committing)
                try:
                    run.worktree = str(backend.ensure_worktree(run))
                    edited = backend.uncommitted_edit(run)
                except KoptError as err:
                    self.app.call_from_thread(self.notify, err.one_line(), severity="error")
        if not get_current_worker().is_cancelled:
            self.post_message(self.RunLoaded(run, manifests, generation, edited))

    def on_run_screen_run_loaded(self, message: RunLoaded) -> None:
        if message.generation != self._generation:
            return  # read before a new run started: not the run on screen any more
        if message.run is None:
            self._update_title()
            return
        first_load = self.run is None
        self.run = message.run
        self.run_id = message.run.run_id
        self.manifests = message.manifests
        approval = approval_word(self.run.approval)
        table = self.query_one(IterationTable)
        table.set_iterations(list(self.run.iterations), approval=approval,
                             approved_commit=approved_commit(self.run.approval),
                             edited=message.edited)
        if first_load and not self.pipeline_running:
            self.query_one(PhaseStrip).set_done([m.phase for m in self.manifests
                                                 if m.data.get("status") == "verified"])
        self.query_one(ManifestPane).show(self.manifests)
        self._refresh_charts()
        self._update_title()
        self._load_selected()
        if self.watching and self.watcher is None:
            self._start_watcher()

    def _update_title(self) -> None:
        title = self.query_one("#run-title", Static)
        if self.run is None:
            title.update(Text.assemble((self.case, "bold"), "\n",
                                       ("starting…" if self.pipeline_running else
                                        "no runs yet: n starts one", "dim")))
            return
        approval = approval_word(self.run.approval)
        best = format_speedup(self.run.best_speedup)
        title.update(Text.assemble(
            (self.case, "bold"), "  ", (self.run.run_id, "dim"), "\n",
            f"best {best} · ",
            (approval, {"approved": "green", "rejected": "red"}.get(approval, "yellow"))))

    def _baseline_ms(self) -> float | None:
        for m in self.manifests:
            value = find_key(m.data, "baseline_ms")
            if isinstance(value, int | float):
                return float(value)
        return None

    def _refresh_charts(self) -> None:
        iterations = self.query_one(IterationTable).iterations
        profile = None
        for m in self.manifests:
            if m.phase == "architect":
                profile = find_key(m.data, "profile") or m.data.get("details")
        self.query_one(ProfileView).show(profile if isinstance(profile, dict) else None,
                                         iterations)
        self.query_one(MetricsChart).show(iterations, baseline_ms=self._baseline_ms(),
                                          bench_rows=self.bench_rows)

    # ---- the selected iteration ---------------------------------------------------------

    @on(DataTable.RowHighlighted, "#iterations")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._load_selected()

    @on(DataTable.RowSelected, "#iterations")
    def _drill_down(self, event: DataTable.RowSelected) -> None:
        """enter: into the active pane."""
        pane = self.query_one(TabbedContent).active_pane
        if pane is not None:
            target = pane.query("DiffView, VerificationView, ProfileView, MetricsChart, "
                                "AgentLog, ManifestView").first()
            target.focus()

    def _base_for(self, iteration: Any) -> tuple[str | None, str]:
        iterations = self.query_one(IterationTable).iterations
        if isinstance(iteration, WorktreeEdit):
            return None, "the last iteration"
        if self.diff_base == "first" and iterations and iterations[0].commit != iteration.commit:
            return iterations[0].commit, f"iteration {iterations[0].iteration}"
        return None, "the iteration before"

    def _load_selected(self) -> None:
        selected = self.query_one(IterationTable).selected
        if selected is None or self.run is None:
            return
        base, base_name = self._base_for(selected)
        self._detail_for = selected.commit
        title = (f"uncommitted edit in the worktree vs {base_name}"
                 if isinstance(selected, WorktreeEdit) else
                 f"iteration {selected.iteration} · {selected.phase} · "
                 f"{selected.commit[:8]} vs {base_name}")
        self._detail_worker(self.run, selected, base, title)

    @work(thread=True, exclusive=True, group="detail")
    def _detail_worker(self, run: Any, iteration: Any, base: str | None, title: str) -> None:
        backend = self.app.backend
        try:
            if isinstance(iteration, WorktreeEdit):
                diff = backend.worktree_diff(run)
            else:
                diff = backend.diff(run.run_id, base, iteration.commit)
        except (KoptError, OSError) as err:
            text = err.one_line() if isinstance(err, KoptError) else str(err)
            diff = f"# diff unavailable: {text}"
        detail = IterationDetail(verification=self.edit_report) \
            if isinstance(iteration, WorktreeEdit) else backend.iteration_detail(run, iteration)
        if not get_current_worker().is_cancelled:
            self.post_message(self.DetailLoaded(iteration.commit, diff, title, detail))

    def on_run_screen_detail_loaded(self, message: DetailLoaded) -> None:
        if message.commit != self._detail_for:
            return
        self.query_one(DiffView).show(message.diff, title=message.title)
        # the worktree's row shows the edit's verification as it is now: the worker read
        # `edit_report` before a verification that finished while it loaded the diff (CI,
        # 2026-11-30: a reload's late detail blanked the report the watch had just shown)
        verification = self.edit_report if message.commit == WorktreeEdit.commit \
            else message.detail.verification
        self.query_one(VerificationView).show(verification, source="recorded")

    # ---- watching -----------------------------------------------------------------------

    def watch_watching(self, on: bool) -> None:
        if on and self.run is not None:
            self._start_watcher()
        elif not on:
            self._stop_watcher()
        if self.is_mounted:
            self._update_job_line()

    def watch_diff_mode(self, mode: str) -> None:
        if self.is_mounted:
            self.query_one(DiffView).mode = mode
            self._update_job_line()

    def watch_diff_base(self) -> None:
        if self.is_mounted:
            self._load_selected()
            self._update_job_line()

    def _start_watcher(self) -> None:
        from kopt.workbench.watch import KernelWatcher

        if self.watcher is not None or self.run is None:
            return
        self.watcher = KernelWatcher(root=Path(self.run.worktree),
                                     on_change=lambda paths: self.post_message(
                                         self.KernelSaved(paths)))
        self.watcher.start()

    def _stop_watcher(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None

    def on_run_screen_kernel_saved(self, message: KernelSaved) -> None:
        for path in sorted(message.paths):
            self.query_one(AgentLog).add(Text(f"saved {path.name}: re-verifying", style="cyan"))
            self.check_edit(path, offer_commit=not self.pipeline_running)
        if not self.pipeline_running:
            self.load_run()  # the "uncommitted" row

    def check_edit(self, path: Path, *, offer_commit: bool) -> None:
        """Re-verify and re-bench the worktree's kernel; then offer it as a user iteration
        (not when it holds what the last iteration committed: nothing to commit)."""
        self._job_started("verify")
        self.query_one(VerificationView).show_pending(f"verifying {path.name}…")
        self._check_worker(self.run, None, path, offer_commit)

    def check_iteration(self, iteration: Any) -> None:
        """Re-verify one committed iteration's kernel (not the worktree's file)."""
        self._job_started("verify")
        self.query_one(VerificationView).show_pending(
            f"verifying iteration {iteration.iteration} ({iteration.commit[:8]})…")
        self._check_worker(self.run, iteration, None, False)

    @work(thread=True, exclusive=True, group="verify")
    def _check_worker(self, run: Any, iteration: Any | None, path: Path | None,
                      offer_commit: bool) -> None:
        backend = self.app.backend
        worker = get_current_worker()
        label = f"iteration {iteration.iteration}" if iteration is not None else \
            (path.name if path else "")
        stage = ["verify"]  # the job a KoptError ends: the verification's, then the timing's
        try:
            if iteration is not None:  # a committed iteration was benched when it was made
                path = backend.review_copy(run, iteration)
                report = backend.verify(self.case, path)
                if not worker.is_cancelled:
                    self.post_message(self.JobFinished("verify", {
                        "report": report, "path": path, "label": label, "worktree": False}))
                return
            assert path is not None
            if offer_commit and not backend.uncommitted_edit(run):
                latest = run.iterations[-1].iteration if run.iterations else 0
                self.post_message(self.JobFinished("verify", {
                    "unchanged": f"{path.name} holds what iteration {latest} committed: "
                                 "nothing to verify or commit"}))
                return
            edited = path

            def verified(report: dict[str, Any]) -> bool:
                if worker.is_cancelled:
                    return False
                self.post_message(self.JobFinished("verify", {
                    "report": report, "path": edited, "label": label, "worktree": True}))
                if report.get("accepted"):
                    stage[0] = "bench"
                    self.post_message(self.JobFinished("bench-start"))
                return True

            report, rows = backend.check_edit(self.case, path, on_verified=verified)
        except KoptError as err:
            self.post_message(self.JobFinished(stage[0], error=err.one_line()))
            return
        if rows is None or worker.is_cancelled:
            return
        self.post_message(self.JobFinished("bench", {"rows": rows, "path": path,
                                                      "report": report,
                                                      "offer_commit": offer_commit}))

    # ---- job results --------------------------------------------------------------------

    def on_run_screen_job_finished(self, message: JobFinished) -> None:
        job = message.job
        if job == "bench-start":
            self._job_started("bench")
            return
        self._job_ended(job)
        if message.error:
            self.notify(message.error, title=f"{job} failed", severity="error")
            self.query_one(AgentLog).add(Text(f"{job} failed: {message.error}", style="red"))
            return
        result = message.result or {}
        if job == "verify" and "unchanged" in result:
            self._load_selected()  # the pane shows the highlighted row's verification again
            self.notify(result["unchanged"])
            self.query_one(AgentLog).add(Text(result["unchanged"], style="dim"))
        elif job == "verify":
            report = result["report"]
            if result.get("worktree"):
                self.edit_report = report
            self.query_one(VerificationView).show(report, source=f"{result['label']}, now")
            word = "accepted" if report.get("accepted") else "rejected"
            self.query_one(AgentLog).add(Text(f"verification of {result['label']}: {word}",
                                              style="green" if report.get("accepted") else "red"))
            self.notify(f"verification: {word}", severity="information" if
                        report.get("accepted") else "error")
        elif job == "bench":
            self.bench_rows = result["rows"]
            self._refresh_charts()
            self.notify("re-bench done: see Metrics (4)")
            if result.get("offer_commit"):
                self._offer_commit(result["path"], result["report"], result["rows"])
        elif job == "decision":
            self.notify(result.get("text", "done"))
            self.query_one(AgentLog).add(Text(result.get("text", ""), style="bold"))
            self.load_run()
            nxt = result.get("next")
            if nxt is not None:
                self.start_pipeline(nxt)
        elif job == "commit":
            self.notify(f"committed your edit as iteration {result.get('commit', '')[:8]}")
            self.load_run()

    def _offer_commit(self, path: Path, report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        from kopt.workbench.screens.confirm import ConfirmScreen

        speed = next((r.get("speedup_vs_eager") for r in rows
                      if r.get("variant") not in ("eager", "compile")), None)
        detail = f"verified; {format_speedup(speed)} vs eager" if isinstance(speed, int | float) else \
            "verified"

        def answer(yes: bool | None) -> None:
            if yes:
                self._job_started("commit")
                self._commit_worker(path, report, rows)

        self.app.push_screen(ConfirmScreen(question=f"Commit your edit of {path.name} as a "
                                           "user iteration?", detail=detail), answer)

    @work(thread=True, group="commit")
    def _commit_worker(self, path: Path, report: dict[str, Any],
                       rows: list[dict[str, Any]]) -> None:
        try:
            commit = self.app.backend.commit_user_edit(self.run, path, report, rows)
        except KoptError as err:
            self.post_message(self.JobFinished("commit", error=err.one_line()))
            return
        self.post_message(self.JobFinished("commit", {"commit": commit}))

    # ---- actions ------------------------------------------------------------------------

    def _need_iteration(self) -> Any | None:
        selected = self.query_one(IterationTable).selected
        if self.run is None or selected is None:
            self.notify("no iteration selected", severity="warning")
            return None
        if isinstance(selected, WorktreeEdit):
            self.notify("the uncommitted edit is not an iteration yet: save it with watch on "
                        "(w) or edit it (e) to verify and commit it", severity="warning")
            return None
        return selected

    def action_approve(self) -> None:
        selected = self._need_iteration()
        if selected is None:
            return
        if not selected.verified:
            self.notify(f"iteration {selected.iteration} failed verification; "
                        "only a verified kernel can be approved", severity="error")
            return
        self._job_started("decision")
        self._decision_worker("approve", selected, None, None)

    def action_reject(self) -> None:
        from kopt.workbench.screens.feedback import FeedbackScreen, Rejection

        selected = self._need_iteration()
        if selected is None:
            return

        def done(answer: Rejection | None) -> None:
            if answer is None:
                return
            nxt = None
            if answer.next_iteration:
                # The next run of this case hands the rejection reason to its engineer
                # (phases.optimizer.previous_rejection).
                nxt = RunRequest(case=self.case, engineer=self.last_engineer, iterations=1)
            self._job_started("decision")
            self._decision_worker("reject", selected, answer.reason, nxt)

        self.app.push_screen(FeedbackScreen(iteration=f"iteration {selected.iteration}"), done)

    def action_undo(self) -> None:
        if self.run is None:
            self.notify("no run to undo a decision in", severity="warning")
            return
        if approval_word(self.run.approval) == "pending":
            self.notify("nothing to undo: this run has no approval or rejection",
                        severity="warning")
            return
        self._job_started("decision")
        self._decision_worker("undo", None, None, None)

    @work(thread=True, group="decision")
    def _decision_worker(self, kind: str, iteration: Any, reason: str | None,
                         nxt: RunRequest | None) -> None:
        backend = self.app.backend
        run_id = self.run.run_id
        try:
            if kind == "approve":
                backend.approve(run_id, iteration.commit)
                text = f"approved iteration {iteration.iteration} ({iteration.commit[:8]})"
            elif kind == "reject":
                backend.reject(run_id, iteration.commit, reason or "")
                text = f"rejected iteration {iteration.iteration}: {reason}"
            else:
                backend.undo(run_id)
                text = "undid the last decision"
        except KoptError as err:
            self.post_message(self.JobFinished("decision", error=err.one_line()))
            return
        self.post_message(self.JobFinished("decision", {"text": text, "next": nxt}))

    def _target(self) -> Any | None:
        """The highlighted row for `v`/`b`/`e`: an iteration or the uncommitted edit."""
        if self.run is None:
            self.notify("no run yet", severity="warning")
            return None
        selected = self.query_one(IterationTable).selected
        if selected is None:
            self.notify("no iteration yet: e edits the kernel once the run has one",
                        severity="warning")
        return selected

    def action_verify(self) -> None:
        """Re-verify the highlighted iteration (or the uncommitted edit)."""
        target = self._target()
        if target is None:
            return
        self.query_one(TabbedContent).active = "verification"
        if isinstance(target, WorktreeEdit):
            self.check_edit(kernel_path(self.run), offer_commit=False)
        else:
            self.check_iteration(target)

    def action_bench(self) -> None:
        """Re-bench the highlighted iteration (or the uncommitted edit) against eager."""
        target = self._target()
        if target is None:
            return
        self._job_started("bench")
        self.query_one(TabbedContent).active = "metrics"
        self._bench_worker(self.run, None if isinstance(target, WorktreeEdit) else target)

    @work(thread=True, exclusive=True, group="bench")
    def _bench_worker(self, run: Any, iteration: Any | None) -> None:
        backend = self.app.backend
        try:
            path = kernel_path(run) if iteration is None else backend.review_copy(run, iteration)
            rows = backend.bench(self.case, path)
        except KoptError as err:
            self.post_message(self.JobFinished("bench", error=err.one_line()))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(self.JobFinished("bench", {"rows": rows, "path": path}))

    def action_edit(self) -> None:
        """Edit the highlighted iteration's kernel in the worktree: the uncommitted edit or
        the newest iteration as it is; an older iteration is first written over the
        worktree's file (refused while an uncommitted edit would be lost)."""
        target = self._target()
        if target is None:
            return
        table = self.query_one(IterationTable)
        if isinstance(target, WorktreeEdit) or target is table.latest and table.edit is None:
            self.post_message(self.EditorReady(kernel_path(self.run)))
            return
        if table.edit is not None:
            self.notify("the worktree holds an uncommitted edit: commit it (e on its row, then "
                        "save) or edit it, before going back to an older iteration",
                        severity="warning")
            return
        self._edit_worker(self.run, target)

    @work(thread=True, exclusive=True, group="edit")
    def _edit_worker(self, run: Any, iteration: Any) -> None:
        try:
            source = self.app.backend.kernel_source(run, iteration.commit)
            path = kernel_path(run)
            path.write_text(source)
        except (KoptError, OSError) as err:
            text = err.one_line() if isinstance(err, KoptError) else str(err)
            self.post_message(self.JobFinished("edit", error=text))
            return
        self.post_message(self.EditorReady(path, f"starting from iteration {iteration.iteration}"))

    def on_run_screen_editor_ready(self, message: EditorReady) -> None:
        path = message.path
        if message.note:
            self.query_one(AgentLog).add(Text(f"editing {path.name}, {message.note}",
                                              style="cyan"))
        if self.watcher is not None:
            self.watcher.remember(path)  # kopt wrote it: not the user's save
        before = path.read_bytes() if path.exists() else b""
        command = [*shlex.split(self.app.config.editor_command()), str(path)]
        try:
            with self.app.suspend():
                subprocess.run(command, check=False)
        except Exception as err:  # no suspend support (e.g. headless) or editor missing
            self.notify(f"could not run {command[0]!r}: {err}", severity="error")
            self.load_run()
            return
        self.refresh()
        changed = path.exists() and path.read_bytes() != before
        if changed and self.watcher is not None:
            return  # the watcher reports it
        if changed:
            self.check_edit(path, offer_commit=not self.pipeline_running)
        self.load_run()

    def action_toggle_watch(self) -> None:
        self.watching = not self.watching
        self.notify(f"watch {'on: saving the kernel re-verifies it' if self.watching else 'off'}")

    def action_toggle_diff_mode(self) -> None:
        self.diff_mode = "unified" if self.diff_mode == "split" else "split"

    def action_toggle_diff_base(self) -> None:
        self.diff_base = "first" if self.diff_base == "parent" else "parent"

    def action_new_run(self) -> None:
        if self.pipeline_running:
            self.notify("a run is in progress (esc cancels it)", severity="warning")
            return
        self.app.new_run(self.case)

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_tab(self, step: int) -> None:
        tabs = self.query_one(TabbedContent)
        index = TABS.index(tabs.active) if tabs.active in TABS else 0
        tabs.active = TABS[(index + step) % len(TABS)]

    def action_escape(self) -> None:
        if self.jobs:
            self.cancel_jobs()
        elif self.focused is not None and not isinstance(self.focused, IterationTable):
            self.query_one(IterationTable).focus()
        else:
            self.action_back()

    def cancel_jobs(self) -> None:
        names = ", ".join(self.jobs)
        self.cancel_event.set()
        for group in ("verify", "bench", "commit", "decision"):
            self.workers.cancel_group(self, group)
        for name in list(self.jobs):
            if name != "pipeline":  # the pipeline reports back when it has stopped
                self._job_ended(name)
        self.notify(f"cancelled {names}")

    def action_back(self) -> None:
        if self.pipeline_running:
            self.notify("a run is in progress: esc cancels it first", severity="warning")
            return
        self.app.pop_screen()
