"""Reject an iteration: the reason goes to the engineer's next iteration."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Label


@dataclass(frozen=True)
class Rejection:
    """What the user said when rejecting."""

    reason: str
    next_iteration: bool
    """Start the next run of the case right away; its engineer is given the reason."""


class FeedbackScreen(ModalScreen[Rejection | None]):
    """A one-line reason (required) and whether to ask for the next iteration."""

    DEFAULT_CSS = """
    FeedbackScreen { align: center middle; }
    FeedbackScreen > Vertical {
        width: 90; max-width: 96%; height: auto; border: thick $error; background: $surface; padding: 1 2;
    }
    FeedbackScreen #title { text-style: bold; }
    FeedbackScreen .hint { color: $text-muted; }
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="cancel"),
    ]

    def __init__(self, *, iteration: str) -> None:
        super().__init__()
        self.iteration = iteration

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Reject {self.iteration}: what should the engineer change?", id="title")
            yield Input(placeholder="e.g. keep the row reduction in fp32", id="reason")
            yield Checkbox("start the next run now (its engineer gets this reason)", True,
                           id="next")
            yield Label("enter rejects · esc cancels", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        reason = event.value.strip()
        if not reason:
            self.notify("say why, so the engineer can do better", severity="error")
            return
        self.dismiss(Rejection(reason, self.query_one("#next", Checkbox).value))

    def action_cancel(self) -> None:
        self.dismiss(None)
