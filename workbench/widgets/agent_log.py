"""The streamed agent log: engineer text, tool calls and phase messages.

It follows the tail while the user is at the bottom; once they scroll up it stays put until
they scroll back down (or press `end`).
"""

from __future__ import annotations

import json

from kopt.phases import events as ev
from kopt.workbench.backend import format_speedup
from rich.text import Text
from textual.binding import Binding
from textual.widgets import RichLog


class AgentLog(RichLog):
    """Renders pipeline events as log lines."""

    DEFAULT_CSS = """
    AgentLog { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=True, markup=False, highlight=False, auto_scroll=False,
                         max_lines=5000)
        self._partial = ""

    @property
    def following(self) -> bool:
        """True while the view sits at the bottom (new lines scroll it)."""
        return self.is_vertical_scroll_end or self.max_scroll_y == 0

    def add(self, text: Text | str) -> None:
        self.write(text, scroll_end=self.following)

    def flush_partial(self) -> None:
        if self._partial:
            self.add(Text(self._partial))
            self._partial = ""

    def add_event(self, event: ev.Event) -> None:
        phase = f"[{event.phase}] " if event.phase else ""
        if event.kind == ev.TEXT_DELTA:
            self._partial += event.message
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self.add(Text(line))
            return
        self.flush_partial()
        if event.kind == ev.LOG:
            self.add(Text(phase + event.message))
        elif event.kind == ev.TOOL_CALL:
            args = json.dumps(event.data.get("input", {}), default=str)
            if len(args) > 160:
                args = args[:157] + "..."
            self.add(Text.assemble((phase, "dim"), ("→ ", "cyan"),
                                   (str(event.data.get("name", "?")), "bold cyan"), f" {args}"))
        elif event.kind == ev.TOOL_RESULT:
            bad = bool(event.data.get("is_error"))
            first = (event.message.splitlines() or [""])[0][:160]
            self.add(Text.assemble((phase, "dim"), ("← ", "red" if bad else "green"),
                                   (str(event.data.get("name", "")), "bold"), f" {first}"))
        elif event.kind == ev.PHASE_STARTED:
            self.add(Text(f"── {event.message or event.phase + ' started'}", style="bold"))
        elif event.kind == ev.PHASE_FINISHED:
            status = event.data.get("status", "finished")
            self.add(Text(f"── {event.message or f'{event.phase}: {status}'}",
                          style="bold green" if status == "verified" else "bold red"))
        elif event.kind == ev.PHASE_FAILED:
            self.add(Text(f"── {event.phase} failed: {event.data.get('error', event.message)}",
                          style="bold red"))
        elif event.kind == ev.ITERATION:
            d = event.data
            speedup = d.get("speedup")
            self.add(Text(f"{phase}iteration {d.get('iteration')} by {d.get('author')}: "
                          f"{d.get('verdict', '')}"
                          + (f", {format_speedup(speedup)}" if isinstance(speedup, int | float) else ""),
                          style="magenta"))
        elif event.kind == ev.USAGE:
            d = event.data
            cost = d.get("cost_usd")
            self.add(Text(f"{phase}tokens in {d.get('input_tokens', 0)} out "
                          f"{d.get('output_tokens', 0)}"
                          + (f" (${cost:.4f})" if isinstance(cost, int | float) else ""),
                          style="dim"))
        elif event.kind == ev.VERIFICATION:
            ok = event.data.get("accepted")
            self.add(Text(f"{phase}verification: {'accepted' if ok else 'rejected'}",
                          style="green" if ok else "red"))
        elif event.message:
            self.add(Text(phase + event.message))
