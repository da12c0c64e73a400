"""A kernel diff, unified or side by side, syntax highlighted.

Side by side needs room: below `SPLIT_MIN_WIDTH` columns the view shows unified whatever the
chosen mode, and switches back when the terminal grows.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

# Two ~38-column halves are the least that keeps a typical Triton line readable (with wrap).
SPLIT_MIN_WIDTH = 76
THEME = "ansi_dark"


@dataclass
class SplitLine:
    """One row of a side-by-side diff: the old line, the new line, and what happened."""

    old: str | None
    new: str | None
    kind: str
    """same | changed | removed | added | hunk."""


def has_removals(diff: str) -> bool:
    """Whether a unified diff removes any line (headers aside)."""
    return any(line.startswith("-") and not line.startswith("---")
               for line in diff.splitlines())


def split_rows(diff: str) -> list[SplitLine]:
    """Pair a unified diff's removed and added lines into side-by-side rows."""
    rows: list[SplitLine] = []
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        for i in range(max(len(removed), len(added))):
            old = removed[i] if i < len(removed) else None
            new = added[i] if i < len(added) else None
            kind = "changed" if old is not None and new is not None else (
                "removed" if new is None else "added")
            rows.append(SplitLine(old, new, kind))
        removed.clear()
        added.clear()

    for line in diff.splitlines():
        if line.startswith(("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file")):
            continue
        if line.startswith("@@"):
            flush()
            rows.append(SplitLine(line, line, "hunk"))
        elif line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        else:
            flush()
            body = line[1:] if line.startswith(" ") else line
            rows.append(SplitLine(body, body, "same"))
    flush()
    return rows


class DiffView(VerticalScroll):
    """Shows one diff; `mode` is the user's choice, narrow terminals force unified."""

    DEFAULT_CSS = """
    DiffView { height: 1fr; }
    DiffView > Static { width: 100%; }
    """

    BINDINGS = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    mode: reactive[str] = reactive("split")
    """unified | split: what the user asked for (`d` toggles)."""
    title: reactive[str] = reactive("")
    """What is compared, e.g. 'iteration 3 vs 2'."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.diff = ""
        self._body = Static("", id="diff-body")

    def compose(self):  # type: ignore[override]
        yield self._body

    def watch_mode(self) -> None:
        self._render_diff()

    def watch_title(self) -> None:
        self._render_diff()

    def on_resize(self) -> None:
        self._render_diff()

    def show(self, diff: str, *, title: str = "") -> None:
        self.diff = diff
        self.title = title
        self._render_diff()

    @property
    def effective_mode(self) -> str:
        """unified on narrow panes, and for a diff that only adds (a new file: the old side
        would be empty), else the user's choice."""
        width = self.size.width or self.app.size.width - 44
        if width < SPLIT_MIN_WIDTH or not has_removals(self.diff):
            return "unified"
        return self.mode

    def _render_diff(self) -> None:
        if not self.is_mounted:
            return
        header = Text(f"{self.title}  [{self.effective_mode}]" if self.title else "",
                      style="bold")
        if not self.diff.strip():
            body: RenderableType = Text("no differences" if self.title else
                                        "select an iteration to see its diff", style="dim")
        elif self.effective_mode == "unified":
            # Long lines wrap: the cropped end of a line is often the edit itself.
            body = Syntax(self.diff, "diff", theme=THEME, word_wrap=True)
        else:
            body = self._split_table()
        self._body.update(Group(header, body))

    def _split_table(self) -> Table:
        table = Table.grid(expand=True, padding=(0, 1))
        table.add_column(ratio=1)
        table.add_column(ratio=1)
        highlighter = Syntax("", "python", theme=THEME)
        styles = {"removed": "on #3a1010", "added": "on #103a10", "changed": None}
        for row in split_rows(self.diff):
            if row.kind == "hunk":
                table.add_row(Text(row.old or "", style="cyan"), Text(""))
                continue
            cells = []
            for side, text in (("old", row.old), ("new", row.new)):
                if text is None:
                    cells.append(Text(""))
                    continue
                cell = highlighter.highlight(text)
                cell.rstrip()
                cell.no_wrap, cell.overflow = False, "fold"
                if row.kind == "changed":
                    cell.stylize("on #3a1010" if side == "old" else "on #103a10")
                elif styles.get(row.kind):
                    cell.stylize(styles[row.kind])
                cells.append(cell)
            table.add_row(*cells)
        return table
