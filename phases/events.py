"""How phases report progress: a stream of `Event`s that the CLI and the TUI both consume.

Phases never print and never import the UI. They call `events(Event(...))`; the CLI renders
events as lines, the TUI posts them as messages to its screens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Event kinds (stable identifiers; the TUI and tests match on them):
PHASE_STARTED = "phase_started"      # data: {}
PHASE_FINISHED = "phase_finished"    # data: {"manifest": path, "status": ...}
PHASE_FAILED = "phase_failed"        # data: {"error": str}
PROGRESS = "progress"                # data: {"done": int, "total": int}
LOG = "log"                          # message: a line for the log pane
TEXT_DELTA = "text_delta"            # message: streamed engineer text (no newline added)
TOOL_CALL = "tool_call"              # data: {"name": str, "input": dict}
TOOL_RESULT = "tool_result"          # data: {"name": str, "is_error": bool}, message: text
ITERATION = "iteration"              # data: {"iteration", "commit", "author", "speedup",
                                     #        "pct_of_floor", "verdict", "candidate"}
VERIFICATION = "verification"        # data: the verifier's report dict
USAGE = "usage"                      # data: {"input_tokens", "output_tokens", "cost_usd", ...}


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run."""

    kind: str
    """One of the kind constants above."""
    phase: str = ""
    """architect | optimizer | accelerator | integrator | "" (the pipeline itself)."""
    message: str = ""
    """Human-readable text."""
    data: dict[str, Any] = field(default_factory=dict)
    """Kind-specific payload (JSON-serialisable)."""
    time: float = field(default_factory=time.time)


EventSink = Callable[[Event], None]


def null_sink(event: Event) -> None:
    """An `EventSink` that drops everything."""
