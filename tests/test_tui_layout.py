"""80x24 must be usable (issue 24): no footer key, tab or verdict cropped off the screen."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_tui_fakes import FakeBackend, wait_for
from textual.widgets import Tab
from textual.widgets._footer import FooterKey

from kopt.workbench.app import KoptApp
from kopt.workbench.screens.branches import BranchesScreen
from kopt.workbench.screens.home import HomeScreen
from kopt.workbench.screens.run import RunScreen
from kopt.workbench.widgets.diff_view import DiffView
from kopt.workbench.widgets.iteration_table import IterationTable
from kopt.workbench.widgets.key_footer import fit_keys, item_width

pytestmark = pytest.mark.anyio

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_fit_keys_keeps_help_and_the_first_keys_that_fit() -> None:
    items = [("a", "Approve", "approve"), ("r", "Reject", "reject"), ("v", "Verify", "verify"),
             ("?", "Help", "help")]
    assert fit_keys(items, 1000) == [0, 1, 2, 3]
    width = item_width("?", "Help") + item_width("a", "Approve") + item_width("r", "Reject")
    assert fit_keys(items, width) == [0, 1, 3]
    assert fit_keys(items, item_width("?", "Help")) == [3]
    assert fit_keys(items, 3) == []


def footer_keys(app: KoptApp) -> list[FooterKey]:
    return list(app.screen.query(FooterKey))


async def settled_footer(pilot, app: KoptApp) -> list[FooterKey]:
    """The footer's keys once it has been laid out (it recomposes after a resize)."""
    await wait_for(pilot, lambda: "question_mark" in {k.key for k in footer_keys(app)}
                   and all(k.region.width for k in footer_keys(app)))
    return footer_keys(app)


def assert_on_screen(app: KoptApp, widgets: list) -> None:
    width = app.size.width
    for widget in widgets:
        region = widget.region
        assert region.width > 0 and region.right <= width, (widget, region, width)


@pytest.mark.parametrize("size", SIZES)
async def test_run_screen_fits(workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace), case="layernorm_gelu")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen)
                       and app.screen.run is not None
                       and bool(app.screen.query_one(DiffView).diff))
        keys = await settled_footer(pilot, app)
        assert_on_screen(app, keys)
        shown = {k.key for k in keys}
        assert {"question_mark", "a", "r", "escape", "v", "q"} <= shown
        if size[0] >= 120:
            assert {"g", "w", "d", "z"} <= shown
        assert_on_screen(app, list(app.screen.query(Tab)))
        table = app.screen.query_one(IterationTable)
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[-1] == "verdict" and "speedup" in labels
        left = app.screen.query_one("#left").region
        assert table.region.right <= left.right
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert str(table.get_row_at(2)[-1]) == "approved"


@pytest.mark.parametrize("size", SIZES)
async def test_home_and_branches_fit(workspace: Path, size: tuple[int, int]) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.rows)
        keys = await settled_footer(pilot, app)
        assert_on_screen(app, keys)
        assert {"question_mark", "q", "n", "slash"} <= {k.key for k in keys}
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, BranchesScreen)
                       and len(app.screen.rows) == 6)
        keys = await settled_footer(pilot, app)
        assert_on_screen(app, keys)
        assert {"question_mark", "space", "escape"} <= {k.key for k in keys}
        table = app.screen.query_one("#branch-table")
        assert table.virtual_size.width <= table.scrollable_content_region.width
