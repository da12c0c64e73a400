"""A yes/no question (e.g. commit a watched edit as a user iteration)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static


class ConfirmScreen(ModalScreen[bool]):
    """`y`/enter answers yes, `n`/esc answers no."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 80; max-width: 96%; height: auto; border: thick $accent; background: $surface; padding: 1 2;
    }
    ConfirmScreen .hint { color: $text-muted; }
    """

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="yes"),
        Binding("n,escape", "answer(False)", "No", id="no"),
    ]

    def __init__(self, *, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, classes="question")
            if self.detail:
                yield Static(self.detail, classes="hint")
            yield Label("y yes · n no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
