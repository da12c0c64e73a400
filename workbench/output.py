"""Printing for the CLI: Rich tables for people, one JSON last line for machines."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class StepClock:
    """The live line under the progress lines: a spinner, the step in progress and its
    elapsed seconds, shown once a step has taken more than a second."""

    def __init__(self) -> None:
        self.label = ""
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="cyan")

    def restart(self, label: str) -> None:
        self.label, self.started = label, time.monotonic()

    def __rich__(self) -> Any:
        elapsed = time.monotonic() - self.started
        if elapsed < 1.0 or not self.label:
            return Text("")
        self.spinner.update(text=Text.assemble((self.label, "dim"), f"  {elapsed:.0f} s"))
        return self.spinner


@contextmanager
def working(label: str, *, out: Console | None = None) -> Iterator[StepClock]:
    """A live line (spinner, `label`, elapsed seconds) while the block runs, on a terminal
    only; `clock.restart(label)` names the next step."""
    clock = StepClock()
    clock.restart(label)
    target = out or err_console
    live = Live(clock, console=target, refresh_per_second=4, transient=True)
    if target.is_terminal:
        live.start()
    try:
        yield clock
    finally:
        live.stop()


def print_json_line(obj: dict[str, Any]) -> None:
    """The `--json` contract: one JSON object, alone on the last line of stdout."""
    sys.stdout.flush()
    console.file.flush()
    print(json.dumps(obj, default=str, separators=(",", ":")), flush=True)


_DIFF_COLOURS = (("+++", "1"), ("---", "1"), ("@@", "36"), ("+", "32"), ("-", "31"))


def colour_diff(text: str) -> str:
    """A unified diff with git's colours (ANSI), every line kept whole."""
    out = []
    for line in text.splitlines():
        code = next((c for prefix, c in _DIFF_COLOURS if line.startswith(prefix)), None)
        out.append(f"\x1b[{code}m{line}\x1b[0m" if code else line)
    return "\n".join(out) + "\n"


def page(text: str, *, no_pager: bool = False) -> None:
    """Show `text` as git does: through a pager on a terminal (`$KOPT_PAGER`, `$PAGER`, else
    `less -R -F -X`, which exits at once when the text fits), printed as is otherwise. Lines
    are never cut at the terminal's width: what is on screen is what is committed."""
    import os
    import shlex
    import subprocess

    if no_pager or not sys.stdout.isatty():
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    command = os.environ.get("KOPT_PAGER") or os.environ.get("PAGER") or "less -R -F -X"
    try:
        subprocess.run(shlex.split(command), input=text, text=True, check=False)
    except (OSError, ValueError):
        sys.stdout.write(text)
        sys.stdout.flush()
