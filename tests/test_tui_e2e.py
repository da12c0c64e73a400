"""kopt-tui over the real backend: the real pipeline, git history and manifests, with the
pipeline tests' fake harness (tests/test_pipeline_fakes.py) so a run takes seconds on a CPU."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kopt.phases import history
from kopt.workbench.app import KoptApp
from kopt.workbench.backend import Backend
from kopt.workbench.cli import main as kopt
from kopt.workbench.screens.home import HomeScreen
from kopt.workbench.screens.run import RunScreen
from kopt.workbench.widgets.diff_view import DiffView
from kopt.workbench.widgets.iteration_table import IterationTable
from kopt.workbench.widgets.phase_strip import PhaseStrip
from test_pipeline_fakes import fakes

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def wait_for(pilot, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the UI"
        await pilot.pause(0.05)


async def test_run_to_an_approved_kernel_in_git(workspace: Path, capsys) -> None:
    history.init_workspace(workspace)
    engineers: list = []
    app = KoptApp(backend=Backend(pipeline_options={"fakes": fakes(engineers)},
                                  in_process=True))  # the fakes are Python objects
    async with app.run_test(size=(120, 40)) as pilot:
        home = app.screen
        assert isinstance(home, HomeScreen)
        await wait_for(pilot, lambda: bool(home.rows))
        names = [r.name for r in home.visible_rows]
        await pilot.press("slash", *"layernorm_gelu", "enter")
        assert [r.name for r in home.visible_rows] == ["layernorm_gelu"], names
        await pilot.press("n", "enter")  # default engineer (offline), 3 iterations
        screen = app.screen
        assert isinstance(screen, RunScreen)
        table = screen.query_one(IterationTable)
        strip = screen.query_one(PhaseStrip)
        # The run's last load (after the pipeline finished) brings the integrator's manifest.
        await wait_for(pilot, lambda: not screen.pipeline_running and screen.run is not None
                       and not screen.jobs and len(screen.manifests) == 4)
        assert [s.state for s in strip.phases.values()] == ["verified"] * 4
        assert [it.verified for it in table.iterations][:3] == [False, True, True]
        assert {m.phase: m.valid for m in screen.manifests} == dict.fromkeys(
            ("architect", "optimizer", "accelerator", "integrator"), True)
        diff = screen.query_one(DiffView)
        await wait_for(pilot, lambda: bool(diff.diff))
        assert "kernels/layernorm_gelu.py" in diff.diff
        first = screen.run_id

        # Reject the best with a reason: the next run's engineer is told.
        await pilot.press("r", *"keep the mean in fp32", "enter")
        await wait_for(pilot, lambda: screen.run_id not in (None, first)
                       and not screen.pipeline_running and screen.run is not None
                       and not screen.jobs)
        assert "keep the mean in fp32" in (engineers[-1].requests[0].feedback or "")
        second = screen.run_id

        # Back to the first run; approve its last iteration there.
        await pilot.press("q")
        await pilot.press("g")
        branches = app.screen
        await wait_for(pilot, lambda: len(getattr(branches, "rows", [])) >= 2)
        await pilot.press("down", "o")
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.run_id == first
        table = screen.query_one(IterationTable)
        await wait_for(pilot, lambda: len(table.iterations) >= 3 and not screen.jobs)
        await pilot.press("a")
        await wait_for(pilot, lambda: screen.run is not None
                       and screen.run.approval.get("state") == "approved" and not screen.jobs)
        approved = screen.run.approval["commit"]
        assert approved == table.iterations[-1].commit

    assert kopt(["history", "layernorm_gelu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    runs = out["runs"] if isinstance(out, dict) else out
    states = {r["run_id"]: r["approval"]["state"] for r in runs}
    assert states == {first: "approved", second: "pending"}


async def test_a_new_folder_is_offered_kopt_init(workspace: Path) -> None:
    from kopt.workbench.screens.confirm import ConfirmScreen

    app = KoptApp(backend=Backend())
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert not (workspace / ".git").exists()
        await pilot.press("y")
        # `.git` appears as `git init` starts, in the screen's worker thread: wait for a whole
        # repository (CI, 2026-11-30: the check ran while git was still writing it)
        await wait_for(pilot, lambda: app.backend.workspace_problem() is None)
        assert (workspace / ".git").is_dir()
        assert isinstance(app.screen, HomeScreen)


@pytest.mark.slow  # a child process imports torch: seconds on an idle 2-core CPU
def test_the_pipeline_runs_in_a_child_process_that_streams_events_and_stops(
        workspace: Path) -> None:
    """Backend's default: `run_pipeline` in workbench/pipeline_process.py, so the pipeline's
    work never holds the TUI's event loop. Cancelled before it starts, the run reports its
    first events and stops at once (resumable), as in the TUI's own process."""
    import threading

    from kopt.harness.errors import KoptError
    from kopt.workbench.backend import RunRequest

    history.init_workspace(workspace)
    seen = []
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(KoptError, match="stopped .*kopt run --resume"):
        Backend().run_pipeline(RunRequest(case="pointwise_chain", iterations=1), events=seen.append,
                               cancel=cancel)
    assert seen and all(e.kind and isinstance(e.data, dict) for e in seen)
    runs = history.list_runs("pointwise_chain")
    assert len(runs) == 1 and runs[0].iterations == []


@pytest.mark.slow
def test_a_failed_pipeline_process_raises_its_error(workspace: Path) -> None:
    import threading

    from kopt.harness.errors import KoptError
    from kopt.workbench.backend import RunRequest

    with pytest.raises(KoptError, match="unknown case 'no_such_case'"):
        Backend().run_pipeline(RunRequest(case="no_such_case"), events=lambda e: None,
                               cancel=threading.Event())
