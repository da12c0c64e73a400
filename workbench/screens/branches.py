"""Branch review (`g`): every kopt/* run branch and its iterations; diff any two of them.

Rows are runs (bold) followed by their iterations. `space` marks an iteration (at most two,
across runs too); `enter` diffs the two marked iterations, or a single highlighted one
against its parent; `o` opens the run on the run screen.
"""

from __future__ import annotations

from typing import Any

from kopt.harness.errors import KoptError
from kopt.workbench.backend import approval_word, format_speedup
from kopt.workbench.widgets.diff_view import DiffView
from kopt.workbench.widgets.key_footer import KeyFooter
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static
from textual.worker import get_current_worker


class BranchesScreen(Screen[None]):
    """Runs and iterations on the left, the diff of the picked pair on the right."""

    DEFAULT_CSS = """
    BranchesScreen #branch-body { height: 1fr; }
    BranchesScreen #branch-table { width: 62; border-right: solid $panel-lighten-2; }
    /* Narrow terminals stack the diff under the table, both full width (lazygit-style). */
    BranchesScreen.narrow #branch-body { layout: vertical; }
    BranchesScreen.narrow #branch-table { width: 100%; height: 45%; border-right: none;
                                          border-bottom: solid $panel-lighten-2; }
    BranchesScreen #branch-status { height: 1; padding: 0 1; background: $boost; }
    """

    BINDINGS = [
        Binding("space", "mark", "Mark", id="mark"),
        Binding("enter", "diff", "Diff", id="diff"),
        Binding("o", "open_run", "Open run", id="open_run"),
        Binding("d", "toggle_diff_mode", "Diff mode", id="diff_mode"),
        Binding("j", "cursor_down", "Down", show=False, id="down"),
        Binding("k", "cursor_up", "Up", show=False, id="up"),
        Binding("escape,q", "back", "Back", id="back"),
    ]

    class Loaded(Message):
        """All runs, from git."""

        def __init__(self, runs: list[Any]) -> None:
            super().__init__()
            self.runs = runs

    class DiffLoaded(Message):
        """The diff of the picked pair."""

        def __init__(self, diff: str, title: str) -> None:
            super().__init__()
            self.diff = diff
            self.title = title

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Any] = []
        self.rows: list[tuple[Any, Any | None]] = []
        """(run, iteration or None for the run's own row), in table order."""
        self.marked: list[tuple[Any, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="branch-body"):
            yield DataTable(id="branch-table", cursor_type="row")
            yield DiffView(id="branch-diff")
        yield Static("loading branches…", id="branch-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "branches"
        table = self.query_one(DataTable)
        table.add_columns(" ", "case / run", "iters", "best", "approval")
        self.query_one(DiffView).mode = self.app.config.tui.diff_mode
        table.focus()
        self.load()

    def on_resize(self) -> None:
        self.set_class(self.app.size.width < 100, "narrow")

    @work(thread=True, exclusive=True, group="branches")
    def load(self) -> None:
        runs = self.app.backend.runs(None)
        if not get_current_worker().is_cancelled:
            self.post_message(self.Loaded(runs))

    def on_branches_screen_loaded(self, message: Loaded) -> None:
        self.runs = message.runs
        self._fill()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        row_before = table.cursor_row
        table.clear()
        self.rows = []
        marked = {it.commit: i for i, (_run, it) in enumerate(self.marked)}
        for run in self.runs:
            best = format_speedup(run.best_speedup)
            approval = approval_word(run.approval)
            table.add_row("", Text(f"{run.case} · {run.run_id}", style="bold"),
                          str(len(run.iterations)), best,
                          Text(approval, style={"approved": "green",
                                                "rejected": "red"}.get(approval, "yellow")))
            self.rows.append((run, None))
            for it in run.iterations:
                mark = "AB"[marked[it.commit]] if it.commit in marked else ""
                speed = format_speedup(it.speedup)
                table.add_row(Text(mark, style="bold reverse"),
                              f"  iter {it.iteration} · {it.author} · {it.commit[:8]}",
                              "", speed, "verified" if it.verified else "failed")
                self.rows.append((run, it))
        if self.rows:
            table.move_cursor(row=min(max(row_before, 0), len(self.rows) - 1))
        self._status()

    def _status(self) -> None:
        picked = " vs ".join(f"{run.run_id}#{it.iteration}" for run, it in self.marked)
        text = f"{len(self.runs)} runs · space marks two iterations · enter diffs"
        if picked:
            text += f" · marked: {picked}"
        self.query_one("#branch-status", Static).update(text)

    def _current(self) -> tuple[Any, Any | None] | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_diff()

    def action_mark(self) -> None:
        current = self._current()
        if current is None or current[1] is None:
            self.notify("mark an iteration row, not a run", severity="warning")
            return
        run, it = current
        existing = [m for m in self.marked if m[1].commit == it.commit]
        if existing:
            self.marked.remove(existing[0])
        else:
            self.marked = (self.marked + [(run, it)])[-2:]
        self._fill()

    def action_diff(self) -> None:
        if len(self.marked) == 2:
            (run_a, a), (run_b, b) = self.marked
            title = f"{run_a.run_id}#{a.iteration} vs {run_b.run_id}#{b.iteration}"
            self._diff_worker(run_a, a.commit, run_b, b.commit, title)
            return
        current = self._current()
        if current is None or current[1] is None:
            self.notify("mark two iterations with space, or highlight one", severity="warning")
            return
        run, it = current
        self._diff_worker(run, None, run, it.commit,
                          f"{run.run_id}#{it.iteration} vs the iteration before")

    @work(thread=True, exclusive=True, group="branch-diff")
    def _diff_worker(self, run_a: Any, a: str | None, run_b: Any, b: str, title: str) -> None:
        try:
            if a is None:
                diff = self.app.backend.diff(run_b.run_id, None, b)
            else:
                diff = self.app.backend.diff_across(run_a, a, run_b, b)
        except KoptError as err:
            diff = f"# diff unavailable: {err.one_line()}"
        if not get_current_worker().is_cancelled:
            self.post_message(self.DiffLoaded(diff, title))

    def on_branches_screen_diff_loaded(self, message: DiffLoaded) -> None:
        self.query_one(DiffView).show(message.diff, title=message.title)

    def action_open_run(self) -> None:
        current = self._current()
        if current is not None:
            self.app.open_run(current[0].case, current[0].run_id)

    def action_toggle_diff_mode(self) -> None:
        view = self.query_one(DiffView)
        view.mode = "unified" if view.mode == "split" else "split"

    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()

    def action_back(self) -> None:
        self.app.pop_screen()
