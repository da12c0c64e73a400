"""kopt-tui driven headless with Pilot over a fake backend (tests/test_tui_fakes.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_tui_fakes import FakeBackend, kernel_source
from textual import events

from kopt.harness.errors import BadInputError
from kopt.workbench.app import KoptApp
from kopt.workbench.config import TuiConfig, load_config
from kopt.workbench.screens.branches import BranchesScreen
from kopt.workbench.screens.confirm import ConfirmScreen
from kopt.workbench.screens.feedback import FeedbackScreen
from kopt.workbench.screens.help import HelpScreen
from kopt.workbench.screens.home import HomeScreen
from kopt.workbench.screens.new_run import NewRunScreen
from kopt.workbench.screens.run import RunScreen
from kopt.workbench.widgets.diff_view import DiffView
from kopt.workbench.widgets.iteration_table import IterationTable
from kopt.workbench.widgets.phase_strip import PhaseStrip
from kopt.workbench.widgets.verification_view import VerificationView

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def wait_for(pilot, condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Let the app run until `condition()` holds (fails the test after `timeout`)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the UI")
        await pilot.pause(0.02)


def run_screen(app: KoptApp) -> RunScreen:
    assert isinstance(app.screen, RunScreen), type(app.screen).__name__
    return app.screen


@pytest.fixture
def backend(workspace: Path) -> FakeBackend:
    return FakeBackend(workspace)


async def test_run_review_reject_approve_undo(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    backend.gate = threading.Semaphore(0)
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.rows)
        await pilot.press("down", "down")  # rmsnorm_mul: no runs yet
        await pilot.press("n")
        assert isinstance(app.screen, NewRunScreen)
        await pilot.press("enter")  # the defaults
        screen = run_screen(app)

        # The phases advance, one at a time (the fake pipeline waits on a gate per phase).
        strip = screen.query_one(PhaseStrip)
        table = screen.query_one(IterationTable)

        def states() -> tuple[str, ...]:
            return tuple(s.state for s in strip.phases.values())

        await wait_for(pilot, lambda: states() == ("running", "pending", "pending", "pending"))
        backend.gate.release()
        await wait_for(pilot, lambda: states() == ("verified", "running", "pending", "pending"))
        assert table.iterations == []
        backend.gate.release()
        await wait_for(pilot, lambda: states() == ("verified", "verified", "running", "pending"))
        await wait_for(pilot, lambda: len(table.iterations) == 3)  # listed while running
        assert screen.pipeline_running
        backend.gate.release()
        backend.gate.release()
        await wait_for(pilot, lambda: not screen.pipeline_running)
        assert states() == ("verified",) * 4
        backend.gate = None
        req = backend.requests[-1]
        assert (req.case, req.engineer, req.iterations, req.phases) == \
            ("rmsnorm_mul", "offline", 3, None)
        assert [it.author for it in table.iterations] == ["offline"] * 3

        # The diff of the last iteration against its parent.
        diff = screen.query_one(DiffView)
        await wait_for(pilot, lambda: "(x - mean) * 3.0" in diff.diff)
        assert "(x - mean) * 2.0" in diff.diff and "vs the iteration before" in diff.title
        await pilot.press("c")  # against the first iteration
        await wait_for(pilot, lambda: "vs iteration 1" in diff.title)
        assert "(x - mean) * 1.0" in diff.diff

        # Reject with feedback; the next run's engineer gets it for its iteration.
        first_run = backend.runs_by_id[screen.run_id]
        await pilot.press("r")
        assert isinstance(app.screen, FeedbackScreen)
        await pilot.press(*"keep the mean in fp32")
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.run_id not in (None, first_run.run_id)
                       and len(table.iterations) == 1 and not screen.jobs)
        assert first_run.approval is not None and first_run.approval["state"] == "rejected"
        assert first_run.approval["reason"] == "keep the mean in fp32"
        assert first_run.approval["commit"] == first_run.iterations[-1].commit
        assert backend.feedback_seen[-1] == "keep the mean in fp32"
        nxt = backend.requests[-1]
        assert (nxt.case, nxt.run_id, nxt.iterations) == ("rmsnorm_mul", None, 1)
        assert "keep the mean in fp32" in table.iterations[-1].source
        run = backend.runs_by_id[screen.run_id]

        # Approve the new iteration, then undo back to the rejection.
        await pilot.press("a")
        await wait_for(pilot, lambda: run.approval["state"] == "approved" and not screen.jobs)
        assert run.approval["commit"] == table.iterations[-1].commit
        await wait_for(pilot, lambda: "approved" in str(table.get_row_at(0)[-1]))
        await pilot.press("z")
        await wait_for(pilot, lambda: run.approval is None and not screen.jobs)
        await wait_for(pilot, lambda: "verified" in str(table.get_row_at(0)[-1]))


async def test_failed_iteration_cannot_be_approved(backend: FakeBackend) -> None:
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = run_screen(app)
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: len(table.iterations) == 3)
        await pilot.press("k")  # iteration 2 failed verification
        assert table.selected.iteration == 2
        await pilot.press("a")
        await pilot.pause(0.2)
        run = backend.runs_by_id["run01"]
        assert run.approval["commit"] == table.iterations[2].commit  # unchanged
        verification = screen.query_one(VerificationView)
        await wait_for(pilot, lambda: verification.report is not None
                       and not verification.report["accepted"])


async def test_watch_reverifies_a_saved_kernel_and_commits_it(backend: FakeBackend) -> None:
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = run_screen(app)
        await wait_for(pilot, lambda: screen.run is not None)
        await pilot.press("w")
        await wait_for(pilot, lambda: screen.watcher is not None and screen.watcher.running)
        kernel = Path(screen.run.worktree) / "kernels" / "layernorm_gelu.py"
        tmp = kernel.with_name(".layernorm_gelu.py.tmp")
        tmp.write_text(kernel_source(9, "hand-tuned"))
        tmp.replace(kernel)  # an editor's atomic save
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert [p.name for p in backend.verify_calls] == ["layernorm_gelu.py"]
        # the saved bytes were copied once, verified, then timed without a second
        # verification; the copy is gone and the report names the user's file
        assert backend.bench_calls == backend.verify_calls and backend.bench_verified == [True]
        assert backend.verify_calls[0] != kernel and not backend.verify_calls[0].exists()
        # the pane shows the new verification (a reload of the run may redraw it just after
        # the question appears, on a loaded machine)
        view = screen.query_one(VerificationView)
        await wait_for(pilot, lambda: view.report is not None and view.report["accepted"])
        await pilot.press("y")
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: len(table.iterations) == 4)
        assert table.iterations[-1].author == "user"
        assert "hand-tuned" in table.iterations[-1].source
        await pilot.press("w")
        assert screen.watcher is None


async def test_a_late_detail_of_the_worktree_row_keeps_the_edits_new_verification(
        backend: FakeBackend) -> None:
    """A reload's detail worker read the edit's report before the watch's verification ended;
    its message, arriving after that verification was shown, shows the report as it is now
    (it blanked the pane on a loaded CI machine)."""
    from kopt.workbench.backend import IterationDetail
    from kopt.workbench.widgets.iteration_table import WorktreeEdit

    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = run_screen(app)
        await wait_for(pilot, lambda: screen.run is not None)
        await pilot.pause()  # the first rows' detail loads before the message below
        screen.edit_report = {"accepted": True, "candidate": "layernorm_gelu.py", "checks": []}
        screen._detail_for = WorktreeEdit.commit
        screen.post_message(RunScreen.DetailLoaded(WorktreeEdit.commit, "", "uncommitted edit",
                                                   IterationDetail(verification=None)))
        view = screen.query_one(VerificationView)
        await wait_for(pilot, lambda: view.report is screen.edit_report)


async def test_keys_are_handled_during_a_slow_verification(workspace: Path) -> None:
    """The verification runs in a thread worker: pane keys act while it runs. (How fast they
    act is measured by benchmarks/tui_key_latency.py, not asserted here.)"""
    backend = FakeBackend(workspace)
    backend.verify_gate = threading.Event()  # the verification runs until released
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = run_screen(app)
        await wait_for(pilot, lambda: screen.run is not None)
        await pilot.press("v")
        await wait_for(pilot, lambda: bool(backend.verify_calls))
        tabs = screen.query_one("TabbedContent")
        for key, tab in (("3", "profile"), ("4", "metrics"), ("1", "diff")):
            # Straight to the driver, as a terminal would (Pilot.press also waits for idle).
            app._driver.send_message(events.Key(key, key))
            await wait_for(pilot, lambda tab=tab: tabs.active == tab)
            assert "verify" in screen.jobs  # still verifying
        await pilot.press("escape")  # cancels the verification
        assert not screen.jobs
        assert isinstance(app.screen, RunScreen)
        backend.verify_gate.set()


async def test_help_palette_and_keymap(workspace: Path, backend: FakeBackend) -> None:
    config = TuiConfig(keys={"approve": "A"})
    app = KoptApp(backend=backend, config=config, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = run_screen(app)
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: len(table.iterations) == 3)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = {binding_id: key for key, _desc, binding_id in app.screen.rows}
        assert rows["approve"] == "A" and rows["reject"] == "r" and rows["quit"] == "Q"
        await pilot.press("escape")
        assert app.screen is screen
        commands = {c.title for c in app.get_system_commands(screen)}
        assert {"Approve", "Reject", "Verify", "Bench", "Watch", "Undo", "Branches"} <= commands
        await pilot.press("k")  # iteration 2 (failed); then 1 (verified)
        await pilot.press("k")
        await pilot.press("a")  # no longer bound
        await pilot.pause(0.2)
        run = backend.runs_by_id["run01"]
        assert run.approval["commit"] == table.iterations[2].commit
        await pilot.press("A")
        await wait_for(pilot, lambda: run.approval["commit"] == table.iterations[0].commit)


def test_config_rejects_unknown_binding_ids(workspace: Path) -> None:
    path = workspace / ".kopt" / "config.yaml"
    path.parent.mkdir()
    path.write_text("targets: {gpu: ssh://box}\nkeys:\n  aprove: A\n")
    with pytest.raises(BadInputError, match="unknown binding id 'aprove'.*'approve'"):
        load_config(binding_ids=KoptApp.binding_ids())
    path.write_text("keys:\n  approve: A\ntui:\n  diff_mode: unified\n  watch: true\n")
    config = load_config(binding_ids=KoptApp.binding_ids())
    assert config.keys == {"approve": "A"}
    assert (config.tui.diff_mode, config.tui.watch) == ("unified", True)
    path.write_text("tui:\n  diff_mode: sideways\n")
    with pytest.raises(BadInputError, match="tui.diff_mode"):
        load_config()


async def test_home_filter_and_branch_review_across_runs(backend: FakeBackend) -> None:
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        home = app.screen
        assert isinstance(home, HomeScreen)
        await wait_for(pilot, lambda: len(home.rows) == 4)
        await pilot.press("slash", *"soft", "enter")
        assert [r.name for r in home.visible_rows] == ["softmax_row"]
        await pilot.press("escape")
        assert len(home.visible_rows) == 4

        await pilot.press("g")
        branches = app.screen
        assert isinstance(branches, BranchesScreen)
        await wait_for(pilot, lambda: len(branches.rows) == 6)  # 2 runs + 4 iterations
        await pilot.press("down", "space")  # run01 iteration 1
        await pilot.press("down", "down", "down", "down", "space")  # run02 iteration 1
        assert [(r.run_id, it.iteration) for r, it in branches.marked] == \
            [("run01", 1), ("run02", 1)]
        await pilot.press("enter")
        diff = branches.query_one(DiffView)
        await wait_for(pilot, lambda: bool(diff.diff))
        assert diff.title == "run01#1 vs run02#1"
        assert "-    tl.store(Y_ptr + row * N + cols, (x - mean) * 1.0" in diff.diff
        assert "+    tl.store(Y_ptr + row * N + cols, (x - mean) * 7.0" in diff.diff
        await pilot.press("o")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == "run02"
        await pilot.press("q", "q")
        assert app.screen is home


async def test_diff_is_unified_on_narrow_terminals(backend: FakeBackend) -> None:
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = run_screen(app)
        diff = screen.query_one(DiffView)
        await wait_for(pilot, lambda: bool(diff.diff))
        assert diff.mode == "split" and diff.effective_mode == "unified"
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(160, 40)) as pilot:
        screen = run_screen(app)
        diff = screen.query_one(DiffView)
        await wait_for(pilot, lambda: bool(diff.diff))
        assert diff.effective_mode == "split"
        await pilot.press("d")
        assert diff.effective_mode == "unified"


def test_split_rows_pair_removed_and_added_lines() -> None:
    from kopt.workbench.widgets.diff_view import has_removals, split_rows

    diff = "--- a/k.py\n+++ b/k.py\n@@ -1,3 +1,4 @@\n a\n-b\n+c\n d\n+e\n"
    rows = [(r.old, r.new, r.kind) for r in split_rows(diff)]
    assert rows == [("@@ -1,3 +1,4 @@", "@@ -1,3 +1,4 @@", "hunk"), ("a", "a", "same"),
                    ("b", "c", "changed"), ("d", "d", "same"), (None, "e", "added")]
    assert has_removals(diff)
    assert not has_removals("--- /dev/null\n+++ b/k.py\n@@ -0,0 +1 @@\n+x\n")


async def test_metrics_chart_shows_slower_than_eager_iterations(workspace: Path) -> None:
    """A kernel far slower than eager (0.0012x) is still a row with its figure; an iteration
    with no figure (speedup 0, latency unknown) is a row of dashes, never "0.0000x"."""
    import io

    from rich.console import Console
    from test_tui_fakes import FakeIteration

    from kopt.workbench.widgets.metrics_chart import MetricsChart

    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(120, 40)) as pilot:
        chart = MetricsChart()
        await app.screen.mount(chart)
        slow = FakeIteration("c" * 40, 1, "optimizer", "offline", 0.0012, 30.8, True, "", "k.py")
        unknown = FakeIteration("d" * 40, 2, "optimizer", "offline", 0.0, None, True, "", "k.py")
        chart.show([slow, unknown], baseline_ms=0.037)
        await pilot.pause()
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(chart._body.content)
        text = console.export_text()
        assert "no measured iteration" not in text
        rows = {line.split()[0]: line for line in text.splitlines() if line.strip()[:1].isdigit()}
        assert "0.0012x" in rows["1"]
        assert "0.0000x" not in text and "—" in rows["2"]


async def test_a_rejections_next_run_replaces_the_run_on_screen(workspace: Path) -> None:
    """Rejecting with "try again" reloads the rejected run and starts a new one at once. The
    reload must not land after the new run cleared the screen: it would put the rejected run
    back and keep it there (2026-11-23: one CI run of the test above hung on exactly this)."""
    backend = FakeBackend(workspace)
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.rows)
        await pilot.press("down", "down")  # rmsnorm_mul: no runs yet
        await pilot.press("n", "enter")
        screen = run_screen(app)
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: not screen.pipeline_running and len(table.iterations) == 3
                       and not screen.jobs)
        first = screen.run_id
        backend.gate = threading.Semaphore(0)  # hold the next run at its first phase
        await pilot.press("r", *"keep the mean in fp32", "enter")
        await wait_for(pilot, lambda: screen.pipeline_running)
        await pilot.pause(1.0)  # the rejected run's reload has long finished
        assert screen.run_id != first
        for _ in range(4):
            backend.gate.release()
        await wait_for(pilot, lambda: not screen.pipeline_running and not screen.jobs
                       and screen.run_id not in (None, first) and len(table.iterations) == 1)
        assert "keep the mean in fp32" in table.iterations[-1].source


async def test_esc_cancels_a_running_pipeline(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    backend.gate = threading.Semaphore(0)
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.rows)
        await pilot.press("n", "enter")
        screen = run_screen(app)
        strip = screen.query_one(PhaseStrip)
        await wait_for(pilot, lambda: strip.phases["architect"].state == "running")
        await pilot.press("q")  # refuses to leave a running run
        assert app.screen is screen
        await pilot.press("escape")
        assert screen.cancel_event.is_set()
        backend.gate.release()
        await wait_for(pilot, lambda: not screen.pipeline_running)
        assert strip.phases["optimizer"].state == "pending"
        assert strip.phases["architect"].state in ("verified", "cancelled")
        await pilot.press("escape")  # nothing running: back home
        assert isinstance(app.screen, HomeScreen)


async def test_log_follows_the_tail_until_scrolled_up(backend: FakeBackend) -> None:
    from kopt.phases.events import LOG, Event
    from kopt.workbench.widgets.agent_log import AgentLog

    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = run_screen(app)
        await pilot.press("5")
        log = screen.query_one(AgentLog)
        for i in range(200):
            log.add_event(Event(LOG, "optimizer", f"line {i}"))
        await pilot.pause(0.2)
        assert log.max_scroll_y > 0 and log.is_vertical_scroll_end
        log.scroll_to(y=0, animate=False)
        await pilot.pause(0.1)
        for i in range(50):
            log.add_event(Event(LOG, "optimizer", f"more {i}"))
        await pilot.pause(0.2)
        assert log.scroll_y == 0  # the user's place is kept
        log.scroll_end(animate=False)
        await pilot.pause(0.1)
        log.add_event(Event(LOG, "optimizer", "tail again"))
        await pilot.pause(0.2)
        assert log.is_vertical_scroll_end


async def test_import_a_kernelbench_file(backend: FakeBackend, workspace: Path) -> None:
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.rows)
        await pilot.press("i")
        await pilot.press(*"/tmp/level1_23_softmax.py", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        await wait_for(pilot, lambda: any("imported level1_23_softmax" in n.message
                                          for n in app._notifications))
