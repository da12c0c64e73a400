"""Issue 24's run-screen and dialog items, each driven with Pilot over the fake backend."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from rich.console import Console
from test_tui_fakes import FakeBackend, kernel_source, wait_for
from textual.screen import ModalScreen

from kopt.harness.errors import BadInputError
from kopt.workbench.app import KoptApp
from kopt.workbench.backend import Backend
from kopt.workbench.config import TuiConfig, TuiSettings
from kopt.workbench.screens.confirm import ConfirmScreen
from kopt.workbench.screens.feedback import FeedbackScreen
from kopt.workbench.screens.help import HelpScreen
from kopt.workbench.screens.home import HomeScreen
from kopt.workbench.screens.import_case import ImportScreen
from kopt.workbench.screens.new_run import NewRunScreen
from kopt.workbench.screens.run import RunScreen
from kopt.workbench.widgets.agent_log import AgentLog
from kopt.workbench.widgets.diff_view import DiffView
from kopt.workbench.widgets.iteration_table import IterationTable, WorktreeEdit

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def notes(app: KoptApp) -> str:
    return " | ".join(n.message for n in app._notifications)


async def home_of(pilot, app: KoptApp) -> HomeScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and bool(app.screen.rows))
    return app.screen


async def loaded_run(pilot, app: KoptApp, iterations: int = 3) -> RunScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, RunScreen))
    screen = app.screen
    table = screen.query_one(IterationTable)
    await wait_for(pilot, lambda: screen.run is not None and len(table.iterations) == iterations
                   and not screen.jobs and bool(screen.query_one(DiffView).diff))
    return screen


# -- the new-run dialog -------------------------------------------------------------------

async def test_enter_in_the_open_engineer_dropdown_picks_the_option(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await home_of(pilot, app)
        await pilot.press("j", "j", "n")  # rmsnorm_mul; the engineer field has the focus
        dialog = app.screen
        assert isinstance(dialog, NewRunScreen)
        await pilot.press("down", "down")  # open the dropdown, highlight "anthropic"
        await pilot.press("enter")  # picks it: the dialog stays
        assert app.screen is dialog
        assert dialog.query_one("#engineer").value == "anthropic"
        await pilot.press("enter")  # starts
        await wait_for(pilot, lambda: bool(backend.requests))
        assert backend.requests[-1].engineer == "anthropic"


# -- dialogs show the screen behind them -------------------------------------------------

@pytest.mark.parametrize("dialog", [
    lambda: NewRunScreen(case="layernorm_gelu"), lambda: ConfirmScreen(question="sure?"),
    lambda: FeedbackScreen(iteration="iteration 3"), lambda: ImportScreen(),
    lambda: HelpScreen(title="run", rows=[("a", "Approve", "approve")]),
], ids=["new_run", "confirm", "feedback", "import", "help"])
async def test_dialogs_are_translucent(workspace: Path, dialog) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(80, 24)) as pilot:
        await home_of(pilot, app)
        await app.push_screen(dialog())
        await pilot.pause()
        assert isinstance(app.screen, ModalScreen)
        assert app.screen.styles.background.a < 1.0
        assert app.screen_stack[-2].styles.background.a == 1.0


# -- home: enter and q -------------------------------------------------------------------

async def test_enter_on_a_case_whose_latest_run_is_empty_offers_a_new_run(
        workspace: Path) -> None:
    backend = FakeBackend(workspace)
    backend._new_run("softmax_row")  # cancelled before its first iteration
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        home = await home_of(pilot, app)
        assert [r.latest_empty for r in home.rows[:3]] == [False, True, False]
        await pilot.press("j", "enter")
        assert isinstance(app.screen, NewRunScreen) and app.screen.case == "softmax_row"
        await pilot.press("escape", "j", "enter")  # rmsnorm_mul: no runs at all
        assert isinstance(app.screen, NewRunScreen) and app.screen.case == "rmsnorm_mul"
        await pilot.press("escape", "k", "k", "enter")  # layernorm_gelu: its latest run
        assert isinstance(app.screen, RunScreen) and app.screen.case == "layernorm_gelu"


async def test_q_quits_from_home(workspace: Path) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(120, 40)) as pilot:
        await home_of(pilot, app)
        await pilot.press("slash", "q")  # typed into the filter
        assert not app._exit and app.screen.filter_text == "q"
        await pilot.press("escape", "q")
        assert app._exit


async def test_Q_during_a_run_asks_first(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    backend.gate = threading.Semaphore(0)  # the run holds at its first phase
    app = KoptApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await home_of(pilot, app)
        await pilot.press("j", "j", "n", "enter")
        screen = app.screen
        await wait_for(pilot, lambda: isinstance(screen, RunScreen) and screen.pipeline_running)
        await pilot.press("Q")
        assert isinstance(app.screen, ConfirmScreen) and not app._exit
        await pilot.press("n")
        assert app.screen is screen and screen.pipeline_running and not app._exit
        await pilot.press("Q", "y")
        assert app._exit and screen.cancel_event.is_set()
        for _ in range(4):
            backend.gate.release()


# -- run screen --------------------------------------------------------------------------

async def test_j_and_k_scroll_inside_a_pane(workspace: Path) -> None:
    from kopt.phases.events import LOG, Event

    app = KoptApp(backend=FakeBackend(workspace), case="layernorm_gelu")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await loaded_run(pilot, app)
        log = screen.query_one(AgentLog)
        for i in range(100):
            log.add_event(Event(LOG, "optimizer", f"line {i}"))
        await pilot.press("5", "enter")  # into the log pane
        assert screen.focused is log
        await pilot.pause(0.1)
        bottom = log.scroll_y
        assert bottom > 0
        await pilot.press("k", "k", "k")
        assert log.scroll_y < bottom
        up = log.scroll_y
        await pilot.press("j")
        assert log.scroll_y > up
        await pilot.press("escape", "k")  # back on the iterations: k moves the cursor
        assert screen.query_one(IterationTable).selected.iteration == 2


async def test_z_with_nothing_to_undo_says_so(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    app = KoptApp(backend=backend, case="softmax_row")  # its run has no decision
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded_run(pilot, app, iterations=1)
        await pilot.press("z")
        await pilot.pause(0.2)
        assert "nothing to undo" in notes(app)
        assert not screen.jobs and backend.runs_by_id["run02"].decisions == []


def test_backend_undo_with_nothing_to_undo_writes_no_commit(workspace: Path) -> None:
    from kopt.phases import history

    history.init_workspace(workspace)
    branch, _worktree = history.create_run_branch("layernorm_gelu", "r1")
    with history.open_repo() as repo:
        tip = repo.commit(branch).hexsha
    with pytest.raises(BadInputError, match="nothing to undo"):
        Backend().undo("r1")
    with history.open_repo() as repo:
        assert repo.commit(branch).hexsha == tip


async def test_watch_on_in_the_config_shows_watch_on(workspace: Path) -> None:
    config = TuiConfig(tui=TuiSettings(watch=True))
    app = KoptApp(backend=FakeBackend(workspace), config=config, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded_run(pilot, app)
        assert "watch on" in str(screen.query_one("#job").content)
        await wait_for(pilot, lambda: screen.watcher is not None and screen.watcher.running)


async def test_v_and_b_act_on_the_highlighted_iteration(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded_run(pilot, app)
        first = screen.query_one(IterationTable).iterations[0]
        await pilot.press("k", "k", "v")
        await wait_for(pilot, lambda: bool(backend.verify_calls) and not screen.jobs)
        checked = backend.verify_calls[-1]
        assert first.commit[:12] in str(checked) and checked.read_text() == first.source
        assert checked != Path(screen.run.worktree) / "kernels" / "layernorm_gelu.py"
        await pilot.press("b")
        await wait_for(pilot, lambda: bool(backend.bench_calls) and not screen.jobs)
        assert backend.bench_calls[-1].read_text() == first.source


async def test_e_on_an_older_iteration_starts_from_its_kernel(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    config = TuiConfig(tui=TuiSettings(editor="true"))
    app = KoptApp(backend=backend, config=config, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded_run(pilot, app)
        kernel = Path(screen.run.worktree) / "kernels" / "layernorm_gelu.py"
        await pilot.press("k", "k", "e")
        await wait_for(pilot, lambda: kernel.read_text() == kernel_source(1))
        # Now the worktree differs from iteration 3: listed as an uncommitted edit.
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: table.edit is not None)
        await pilot.press("k", "e")  # iteration 2: refused, the edit would be lost
        await pilot.pause(0.2)
        assert "uncommitted edit" in notes(app) and kernel.read_text() == kernel_source(1)


async def test_an_uncommitted_edit_is_its_own_row(workspace: Path) -> None:
    backend = FakeBackend(workspace)
    kernel = workspace / "worktrees" / "run01" / "kernels" / "layernorm_gelu.py"
    kernel.write_text(kernel_source(3, "by hand"))  # saved, never committed
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await loaded_run(pilot, app)
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: table.edit is not None)
        assert isinstance(table.selected, WorktreeEdit)
        assert str(table.get_row_at(table.row_count - 1)[-1]) == "uncommitted"
        diff = screen.query_one(DiffView)
        await wait_for(pilot, lambda: "uncommitted edit" in diff.title)
        assert "+# feedback applied: by hand" in diff.diff
        await pilot.press("a")  # not an iteration: cannot be approved
        await pilot.pause(0.2)
        assert "not an iteration yet" in notes(app)
        await pilot.press("v")
        await wait_for(pilot, lambda: bool(backend.verify_calls) and not screen.jobs)
        # the edit's bytes, verified as a private copy of the worktree's file
        assert backend.verify_calls[-1].name == kernel.name
        assert backend.verify_sources[-1] == kernel.read_text()


async def test_watch_does_not_offer_to_commit_the_last_iterations_content(
        workspace: Path) -> None:
    backend = FakeBackend(workspace)
    app = KoptApp(backend=backend, case="layernorm_gelu")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded_run(pilot, app)
        await pilot.press("w")
        await wait_for(pilot, lambda: screen.watcher is not None and screen.watcher.running)
        kernel = Path(screen.run.worktree) / "kernels" / "layernorm_gelu.py"
        kernel.write_text(kernel_source(9, "hand-tuned"))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")  # keep it uncommitted
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: table.edit is not None)
        calls = len(backend.verify_calls)
        kernel.write_text(kernel_source(3))  # back to what iteration 3 committed
        await wait_for(pilot, lambda: "nothing to verify or commit" in notes(app))
        await wait_for(pilot, lambda: table.edit is None and not screen.jobs)
        assert not isinstance(app.screen, ConfirmScreen)
        assert len(backend.verify_calls) == calls and len(table.iterations) == 3


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_unified_diffs_wrap_long_lines(workspace: Path, size: tuple[int, int]) -> None:
    backend = FakeBackend(workspace)
    last = backend.runs_by_id["run01"].iterations[-1]
    last.source += "y = x  # " + "long comment " * 20 + "THE-EDIT\n"
    app = KoptApp(backend=backend, config=TuiConfig(tui=TuiSettings(diff_mode="unified")),
                  case="layernorm_gelu")
    async with app.run_test(size=size) as pilot:
        screen = await loaded_run(pilot, app)
        diff = screen.query_one(DiffView)
        await wait_for(pilot, lambda: "THE-EDIT" in diff.diff)
        width = diff.scrollable_content_region.width
        console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        console.print(diff.query_one("#diff-body").content)
        text = console.export_text()
        assert "THE-EDIT" in text
        assert max(len(line) for line in text.splitlines()) <= width
