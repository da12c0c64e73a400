"""The iterations of a run: one row per commit, and an "uncommitted" row for an edit.

Like lazygit's unstaged changes, a kernel file in the run's worktree that differs from the
last iteration's is listed after the commits as its own row (`WorktreeEdit`): its diff is the
edit, `v`/`b` check the file, `e` edits it, and a verified one can be committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kopt.workbench.backend import format_speedup
from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import DataTable

# (label, width, dropped when narrow): fixed widths, so the list does not jump as iterations
# stream in. On a narrow terminal the author and % of floor go first (the Metrics pane shows
# them); the number, the speedup and the verdict always stay.
COLUMNS = (("#", 2, False), ("by", 9, True), ("speedup", 8, False), ("floor", 5, True),
           ("verdict", 11, False))
UNCOMMITTED = "uncommitted"


@dataclass(frozen=True)
class WorktreeEdit:
    """The worktree's kernel file when it differs from the last iteration's (not committed)."""

    commit: str = "worktree"
    """Row key; never a git commit."""
    iteration: str = "~"
    phase: str = "edit"
    author: str = "you"
    speedup: float | None = None
    pct_of_floor: float | None = None
    verified: bool = False


def verdict_text(iteration: Any, approval: str, approved_commit: str | None) -> Text:
    if isinstance(iteration, WorktreeEdit):
        return Text(UNCOMMITTED, style="bold yellow")
    if approved_commit and iteration.commit == approved_commit:
        return Text(approval, style="bold green" if approval == "approved" else "bold red")
    return Text("verified", style="green") if iteration.verified else Text("failed", style="red")


def table_width(narrow: bool) -> int:
    """Cells the table needs: its columns with their padding, and the scrollbar."""
    return sum(w + 2 for _label, w, drop in COLUMNS if not (narrow and drop)) + 1


class IterationTable(DataTable):
    """Iteration, author (agent or user), speedup, % of the roofline floor, verdict."""

    DEFAULT_CSS = """
    IterationTable { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    narrow: reactive[bool] = reactive(False)
    """Show only #, speedup and verdict (a terminal under 100 columns)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.iterations: list[Any] = []
        """The run's iteration commits, oldest first."""
        self.edit: WorktreeEdit | None = None
        """The uncommitted edit listed after them, if any."""
        self._approval: tuple[str, str | None] = ("pending", None)

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for label, width, drop in COLUMNS:
            if not (self.narrow and drop):
                self.add_column(label, width=width, key=label)

    def watch_narrow(self) -> None:
        if not self.is_mounted:
            return
        self.clear(columns=True)
        self._add_columns()
        self.set_iterations(self.iterations, approval=self._approval[0],
                            approved_commit=self._approval[1], edited=self.edit is not None)

    @property
    def rows_shown(self) -> list[Any]:
        """Iterations, then the uncommitted edit: the table's rows in order."""
        return self.iterations + ([self.edit] if self.edit is not None else [])

    def set_iterations(self, iterations: list[Any], *, approval: str = "pending",
                       approved_commit: str | None = None, edited: bool = False) -> None:
        """Replace the rows. The cursor stays on its commit, or follows the newest row when
        it was on the last one (like a log that follows its tail)."""
        selected = self.selected
        if selected is not None and self.rows_shown and selected is self.rows_shown[-1]:
            selected = None
        self.iterations = list(iterations)
        self.edit = WorktreeEdit() if edited else None
        self._approval = (approval, approved_commit)
        self.clear()
        for it in self.rows_shown:
            speedup = format_speedup(it.speedup)
            floor = f"{it.pct_of_floor:.0f}%" if it.pct_of_floor is not None else "—"
            cells = {"#": str(it.iteration), "by": it.author, "speedup": speedup,
                     "floor": floor, "verdict": verdict_text(it, approval, approved_commit)}
            self.add_row(*(cells[label] for label, _w, drop in COLUMNS
                           if not (self.narrow and drop)), key=it.commit)
        rows = self.rows_shown
        if selected is not None:
            for row, it in enumerate(rows):
                if it.commit == selected.commit:
                    self.move_cursor(row=row)
                    return
        if rows:
            self.move_cursor(row=len(rows) - 1)

    @property
    def selected(self) -> Any | None:
        """The highlighted iteration, the `WorktreeEdit`, or None."""
        rows = self.rows_shown
        if not rows or not 0 <= self.cursor_row < len(rows):
            return None
        return rows[self.cursor_row]

    @property
    def latest(self) -> Any | None:
        """The newest iteration commit (what an uncommitted edit is compared with)."""
        return self.iterations[-1] if self.iterations else None
