"""The home screen's filter (issue 24: a filter that matched nothing crashed the app)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kopt.workbench.app import KoptApp
from kopt.workbench.screens.home import HomeScreen
from kopt.workbench.screens.new_run import NewRunScreen
from test_tui_fakes import FakeBackend, wait_for
from textual.widgets import DataTable, Input

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def cells(home: HomeScreen) -> list[str]:
    table = home.query_one("#cases", DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


async def open_home(pilot, app: KoptApp) -> HomeScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and bool(app.screen.rows))
    return app.screen


async def test_filter_that_matches(workspace: Path) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(120, 40)) as pilot:
        home = await open_home(pilot, app)
        await pilot.press("slash", *"soft")
        assert cells(home) == ["softmax_row"]
        assert home.selected_case.name == "softmax_row"
        await pilot.press("enter", "n")  # the table has the focus again; n acts on the match
        assert isinstance(app.screen, NewRunScreen) and app.screen.case == "softmax_row"


async def test_filter_that_matches_nothing_says_so(workspace: Path) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(120, 40)) as pilot:
        home = await open_home(pilot, app)
        await pilot.press("slash", *"zzz")
        assert cells(home) == ["no case matches 'zzz'"]
        assert home.selected_case is None
        await pilot.press("enter", "enter", "n")  # nothing to open or run: no crash
        assert app.screen is home
        await pilot.press("slash", "backspace", "backspace", "backspace", *"rms")
        assert cells(home) == ["rmsnorm_mul"]


async def test_esc_clears_the_filter(workspace: Path) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(120, 40)) as pilot:
        home = await open_home(pilot, app)
        await pilot.press("slash", *"zzz", "escape")
        assert not home.query_one("#filter", Input).has_class("visible")
        assert len(cells(home)) == 4 and home.selected_case.name == "layernorm_gelu"
        await pilot.press("slash", *"row", "escape")
        assert len(cells(home)) == 4


async def test_cursor_below_the_filtered_rows_moves_to_the_first_match(workspace: Path) -> None:
    app = KoptApp(backend=FakeBackend(workspace))
    async with app.run_test(size=(120, 40)) as pilot:
        home = await open_home(pilot, app)
        await pilot.press("j", "j", "j")  # broken_case, the last row
        assert home.selected_case.name == "broken_case"
        await pilot.press("slash", *"norm")  # layernorm_gelu, rmsnorm_mul
        assert cells(home) == ["layernorm_gelu", "rmsnorm_mul"]
        assert home.selected_case.name == "layernorm_gelu"
        await pilot.press("enter", "j")
        assert home.selected_case.name == "rmsnorm_mul"
        await pilot.press("slash", *["backspace"] * 4)  # the cursor's case survives the change
        assert len(cells(home)) == 4 and home.selected_case.name == "rmsnorm_mul"
