"""The iterations of a run: one row per commit."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from kopt.workbench.backend import format_speedup

# (label, width): fixed widths, so the list does not jump as iterations stream in.
COLUMNS = (("#", 2), ("by", 9), ("speedup", 7), ("floor", 5), ("verdict", 8))


def verdict_text(iteration: Any, approval: str, approved_commit: str | None) -> Text:
    if approved_commit and iteration.commit == approved_commit:
        return Text(approval, style="bold green" if approval == "approved" else "bold red")
    return Text("verified", style="green") if iteration.verified else Text("failed", style="red")


class IterationTable(DataTable):
    """Iteration, author (agent or user), speedup, % of the roofline floor, verdict."""

    DEFAULT_CSS = """
    IterationTable { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.iterations: list[Any] = []

    def on_mount(self) -> None:
        for label, width in COLUMNS:
            self.add_column(label, width=width)

    def set_iterations(self, iterations: list[Any], *, approval: str = "pending",
                       approved_commit: str | None = None) -> None:
        """Replace the rows. The cursor stays on its commit, or follows the newest row when
        it was on the last one (like a log that follows its tail)."""
        selected = self.selected
        if selected is not None and self.iterations and selected is self.iterations[-1]:
            selected = None
        self.iterations = list(iterations)
        self.clear()
        for it in self.iterations:
            speedup = format_speedup(it.speedup)
            floor = f"{it.pct_of_floor:.0f}%" if it.pct_of_floor is not None else "—"
            self.add_row(str(it.iteration), it.author, speedup, floor,
                         verdict_text(it, approval, approved_commit), key=it.commit)
        if selected is not None:
            for row, it in enumerate(self.iterations):
                if it.commit == selected.commit:
                    self.move_cursor(row=row)
                    return
        if self.iterations:
            self.move_cursor(row=len(self.iterations) - 1)

    @property
    def selected(self) -> Any | None:
        if not self.iterations or self.cursor_row < 0 or self.cursor_row >= len(self.iterations):
            return None
        return self.iterations[self.cursor_row]
