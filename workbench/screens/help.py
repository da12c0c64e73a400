"""`?`: the keys of the screen the user is on, with their binding ids for remapping."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    """A table of key, what it does, and the id to use under `keys:` in .kopt/config.yaml."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 84; max-width: 96%; height: 80%; border: thick $accent; background: $surface; padding: 0 1;
    }
    """

    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close", id="close"),
    ]

    def __init__(self, *, title: str, rows: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table(title=f"{self.title_text}: keys", title_justify="left", box=None,
                      expand=True, header_style="bold")
        table.add_column("key", style="bold cyan", no_wrap=True)
        table.add_column("does", ratio=1)
        table.add_column("id (.kopt/config.yaml keys:)", style="dim", no_wrap=True)
        for key, description, binding_id in self.rows:
            table.add_row(key, description, binding_id)
        with VerticalScroll():
            yield Static(table)
            yield Static(Text("ctrl+p opens the command palette with every action · "
                              "esc closes", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
