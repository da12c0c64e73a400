"""The phase strip: architect -> optimizer -> accelerator -> integrator, each with its state."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kopt.phases import events as ev
from rich.text import Text
from textual.widgets import Static

PHASES = ("architect", "optimizer", "accelerator", "integrator")

SHORT = {"architect": "arch", "optimizer": "opt", "accelerator": "accel",
         "integrator": "integ"}
"""Names on a narrow terminal, where the full strip does not fit."""

MARKS = {"pending": ("○", "dim"), "running": ("●", "bold yellow"),
         "verified": ("✓", "bold green"), "failed": ("✗", "bold red"),
         "cancelled": ("■", "magenta")}


@dataclass
class PhaseState:
    """Where one phase stands."""

    state: str = "pending"
    """pending | running | verified | failed | cancelled."""
    started: float | None = None
    """Event time of phase_started."""
    finished: float | None = None
    """Event time of phase_finished/phase_failed."""
    received: float | None = None
    """Local clock when phase_started arrived (a running phase counts from here)."""

    def elapsed(self, now: float) -> float | None:
        if self.started is None:
            return None
        if self.finished is not None:
            return self.finished - self.started
        return now - (self.received if self.received is not None else self.started)


class PhaseStrip(Static):
    """One line showing every phase's state and elapsed time."""

    DEFAULT_CSS = """
    PhaseStrip { height: 1; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.phases: dict[str, PhaseState] = {p: PhaseState() for p in PHASES}
        self.progress: tuple[int, int] | None = None

    def on_mount(self) -> None:
        self.set_interval(0.5, self._tick)

    def _tick(self) -> None:
        if any(p.state == "running" for p in self.phases.values()):
            self.refresh()

    def reset(self) -> None:
        self.phases = {p: PhaseState() for p in PHASES}
        self.progress = None
        self.refresh()

    def set_done(self, phases: list[str]) -> None:
        """Mark phases verified (a finished run opened from history; no times known)."""
        for name in phases:
            if name in self.phases:
                self.phases[name].state = "verified"
        self.refresh()

    def apply(self, event: ev.Event) -> None:
        """Update from one pipeline event."""
        state = self.phases.get(event.phase)
        if event.kind == ev.PROGRESS:
            self.progress = (int(event.data.get("done", 0)), int(event.data.get("total", 0)))
        elif state is None:
            return
        elif event.kind == ev.PHASE_STARTED:
            state.state, state.started, state.finished = "running", event.time, None
            state.received = time.time()
            self.progress = None
        elif event.kind == ev.PHASE_FINISHED:
            status = str(event.data.get("status", "verified"))
            state.state = "verified" if status == "verified" else "failed"
            state.finished = event.time
        elif event.kind == ev.PHASE_FAILED:
            state.state, state.finished = "failed", event.time
        self.refresh()

    def cancel_running(self) -> None:
        now = time.time()
        for state in self.phases.values():
            if state.state == "running":
                state.state = "cancelled"
                state.finished = (state.started or now) + (now - (state.received or now))
        self.refresh()

    def render(self) -> Text:
        text = self._line(short=False)
        if text.cell_len > self.size.width - 2 > 0:
            text = self._line(short=True)  # e.g. `✓ arch 1.2s → ● opt 3.4s [2/3] → ...`
        return text

    def _line(self, *, short: bool) -> Text:
        now = time.time()
        text = Text()
        for i, name in enumerate(PHASES):
            state = self.phases[name]
            mark, style = MARKS.get(state.state, MARKS["pending"])
            if i:
                text.append(" → " if not short else "→", style="dim")
            text.append(f"{mark} {SHORT[name] if short else name}", style=style)
            elapsed = state.elapsed(now)
            if elapsed is not None:
                text.append(f" {elapsed:.1f}s", style="dim")
            if state.state == "running" and self.progress and self.progress[1]:
                text.append(f" [{self.progress[0]}/{self.progress[1]}]", style="yellow")
        return text
