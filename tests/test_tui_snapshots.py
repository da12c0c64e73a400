"""Snapshots of every screen at 120x40 and 80x24 (fixed fake data, no clocks shown).

Update after an intended UI change with `pytest tests/test_tui_snapshots.py --snapshot-update`
and review the SVGs under tests/__snapshots__/.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kopt.workbench.app import KoptApp
from kopt.workbench.screens.run import RunScreen
from test_tui_fakes import FakeBackend
from textual.widgets._footer import FooterKey

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


async def settle(pilot, condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for `condition`, and for the footer (it recomposes once focus and size settle)."""
    deadline = time.monotonic() + timeout

    def footer_ready() -> bool:
        keys = list(pilot.app.screen.query(FooterKey))
        return any(k.key == "question_mark" for k in keys) and all(k.region.width for k in keys)

    while not (condition() and footer_ready()):
        assert time.monotonic() < deadline, "timed out waiting for the UI"
        await pilot.pause(0.02)
    await pilot.pause(0.1)


def loaded_run(app: KoptApp) -> bool:
    screen = app.screen
    return isinstance(screen, RunScreen) and screen.run is not None \
        and bool(screen.query_one("DiffView").diff) and not screen.jobs


@pytest.mark.parametrize("size", SIZES)
def test_home(snap_compare, workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace))

    async def ready(pilot) -> None:
        await settle(pilot, lambda: bool(getattr(app.screen, "rows", None)))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize(("size", "pane"), [
    pytest.param((120, 40), "1", id="diff-120x40"), pytest.param((80, 24), "1", id="diff-80x24"),
    pytest.param((120, 40), "2", id="verification-120x40"),
    pytest.param((80, 24), "2", id="verification-80x24"),
    pytest.param((120, 40), "3", id="profile-120x40"),
    pytest.param((120, 40), "4", id="metrics-120x40"),
    pytest.param((120, 40), "6", id="manifest-120x40"),
])
def test_run_panes(snap_compare, workspace: Path, size: tuple[int, int], pane: str) -> None:
    app = KoptApp(backend=FakeBackend(workspace), case="layernorm_gelu")

    async def ready(pilot) -> None:
        await settle(pilot, lambda: loaded_run(app))
        await pilot.press(pane)
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_branches(snap_compare, workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace))

    async def ready(pilot) -> None:
        await settle(pilot, lambda: bool(getattr(app.screen, "rows", None)))
        await pilot.press("g")
        await settle(pilot, lambda: len(getattr(app.screen, "rows", [])) == 6)
        await pilot.press("down", "space", "down", "down", "down", "down", "space", "enter")
        await settle(pilot, lambda: bool(app.screen.query_one("DiffView").diff))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare, workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace), case="layernorm_gelu")

    async def ready(pilot) -> None:
        await settle(pilot, lambda: loaded_run(app))
        await pilot.press("question_mark")

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_new_run_dialog(snap_compare, workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace))

    async def ready(pilot) -> None:
        await settle(pilot, lambda: bool(getattr(app.screen, "rows", None)))
        await pilot.press("n")

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_reject_dialog(snap_compare, workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace), case="layernorm_gelu")

    async def ready(pilot) -> None:
        await settle(pilot, lambda: loaded_run(app))
        await pilot.press("r", *"keep the mean in fp32")

    assert snap_compare(app, terminal_size=size, run_before=ready)
