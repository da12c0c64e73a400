"""The new-run dialog: engineer, analyst, phases, iterations; enter accepts the defaults."""

from __future__ import annotations

from kopt.workbench.backend import PHASES, RunRequest, default_engineer
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Select

ENGINEERS = [("offline (no network)", "offline"), ("anthropic (Claude)", "anthropic")]
ANALYSTS = [("none (rule-based plan)", ""), ("offline", "offline"), ("anthropic", "anthropic")]


class NewRunScreen(ModalScreen[RunRequest | None]):
    """Asks how to run the phases on one case; dismisses with a `RunRequest` or None."""

    DEFAULT_CSS = """
    NewRunScreen { align: center middle; }
    NewRunScreen > Vertical {
        width: 72; max-width: 96%; height: auto; border: thick $accent; background: $surface; padding: 1 2;
    }
    NewRunScreen Grid { grid-size: 2; grid-columns: 14 1fr; grid-rows: 3; height: auto; }
    NewRunScreen Label { padding: 1 0 0 0; }
    NewRunScreen #title { text-style: bold; padding: 0; }
    NewRunScreen #hint { color: $text-muted; padding: 1 0 0 0; }
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="cancel"),
        Binding("enter", "accept", "Start", id="accept", priority=True),
    ]

    def __init__(self, *, case: str, engineer: str | None = None) -> None:
        super().__init__()
        self.case = case
        self.engineer = engineer or default_engineer()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"New run of {self.case}", id="title")
            with Grid():
                yield Label("engineer")
                yield Select(ENGINEERS, value=self.engineer, allow_blank=False, id="engineer")
                yield Label("analyst")
                yield Select(ANALYSTS, value="", allow_blank=False, id="analyst")
                yield Label("phases")
                yield Input(",".join(PHASES), id="phases")
                yield Label("iterations")
                yield Input("3", id="iterations", type="integer")
            yield Label("enter starts · esc cancels · tab moves between fields", id="hint")
            yield Button("Start", variant="primary", id="start")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_accept()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_accept(self) -> None:
        # `enter` is a priority binding (it starts the run from any field), so it reaches us
        # before an open dropdown: there it picks the highlighted option, as it would without
        # this binding, and does not start the run with the option shown before.
        for select in self.query(Select):
            if select.expanded:
                select.query_one(OptionList).action_select()  # its overlay
                return
        phases = [p.strip() for p in self.query_one("#phases", Input).value.split(",") if p.strip()]
        bad = [p for p in phases if p not in PHASES]
        if bad or not phases:
            self.notify(f"unknown phase {bad[0]!r}; expected {', '.join(PHASES)}" if bad else
                        "name at least one phase", severity="error")
            return
        text = self.query_one("#iterations", Input).value.strip() or "3"
        iterations = int(text) if text.isdigit() else 0
        if iterations < 1:
            self.notify(f"iterations must be a positive integer (not {text!r})",
                        severity="error")
            return
        analyst = str(self.query_one("#analyst", Select).value or "") or None
        self.dismiss(RunRequest(case=self.case,
                                engineer=str(self.query_one("#engineer", Select).value),
                                analyst=analyst,
                                phases=None if phases == list(PHASES) else phases,
                                iterations=iterations))
