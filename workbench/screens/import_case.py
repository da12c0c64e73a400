"""Import a KernelBench file (Model, get_inputs, get_init_inputs) as a case."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class ImportScreen(ModalScreen[tuple[Path, str | None] | None]):
    """Asks for a file path and an optional case name."""

    DEFAULT_CSS = """
    ImportScreen { align: center middle; }
    ImportScreen > Vertical {
        width: 80; max-width: 96%; height: auto; border: thick $accent; background: $surface; padding: 1 2;
    }
    ImportScreen #title { text-style: bold; }
    ImportScreen .hint { color: $text-muted; }
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="cancel"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Import a KernelBench file as a case", id="title")
            yield Input(placeholder="path/to/level1_42_model.py", id="path")
            yield Input(placeholder="case name (default: the file name)", id="name")
            yield Label("enter imports · esc cancels", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = self.query_one("#path", Input).value.strip()
        if not path:
            self.notify("give the path of a KernelBench .py file", severity="error")
            return
        name = self.query_one("#name", Input).value.strip() or None
        self.dismiss((Path(path).expanduser(), name))

    def action_cancel(self) -> None:
        self.dismiss(None)
