"""`kopt run` on a terminal: a live line says which step is running and for how long."""

from __future__ import annotations

import io
import time

from rich.console import Console

from kopt.phases.events import LOG, PHASE_STARTED, Event
from kopt.workbench.commands import run as run_cmd
from kopt.workbench.output import StepClock


def test_a_step_longer_than_a_second_shows_its_elapsed_time() -> None:
    buf = io.StringIO()
    printer = run_cmd.ProgressPrinter(to_stderr=False)
    printer.out = Console(file=buf, force_terminal=True, width=100, color_system=None)
    printer.live = run_cmd.Live(printer.clock, console=printer.out, refresh_per_second=20,
                                transient=True)
    with printer:
        printer(Event(PHASE_STARTED, "architect", "started"))
        printer(Event(LOG, "architect", "timing the eager baseline on smoke"))
        printer.clock.started -= 3.0  # as if the step had run for 3 s
        time.sleep(0.3)
    text = buf.getvalue()
    assert "architect   timing the eager baseline on smoke" in text  # the progress line
    assert "architect: timing the eager baseline on smoke  3 s" in text  # the live line


def test_the_live_line_is_silent_during_the_first_second() -> None:
    clock = StepClock()
    clock.restart("optimizer: verifying 1 candidate")
    assert str(clock.__rich__()) == ""
    clock.started -= 12.0
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(clock)
    assert "optimizer: verifying 1 candidate  12 s" in console.file.getvalue()
