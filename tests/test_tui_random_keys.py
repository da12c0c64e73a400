"""Random key sequences on every screen must never crash the workbench (issue 24).

Hypothesis drives the real app headless over the fake backend (tests/test_tui_fakes.py: no
git, no torch, a pipeline of a few milliseconds) from each screen with a bounded list of
keys drawn from every key the app binds plus navigation and typing keys, and fails on any
unhandled exception (Textual re-raises it when the app closes) or on an app that stops
answering, at 80x24 and 120x40. A crash it finds gets its own regression test (the filter
crash of issue 24 is tests/test_tui_home.py's; 90 examples found no other, 2026-11-25).

Budget: `KOPT_RANDOM_KEYS_EXAMPLES` examples (default 24) of at most 20 keys; under two
minutes on 2 CPU cores (see the report in the module's commit).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tui_fakes import FakeBackend, wait_for

from kopt.workbench.app import KoptApp
from kopt.workbench.config import TuiConfig, TuiSettings

EXAMPLES = int(os.environ.get("KOPT_RANDOM_KEYS_EXAMPLES", "24"))
MAX_KEYS = 20
EXAMPLE_TIMEOUT_S = 60.0

KEYS = (
    # every key a screen, a dialog or a widget binds
    "a", "b", "c", "d", "e", "g", "h", "i", "j", "k", "l", "n", "o", "q", "r", "v", "w",
    "y", "z", "Q", "1", "2", "3", "4", "5", "6", "slash", "question_mark", "space", "enter",
    "escape", "ctrl+r", "ctrl+p",
    # navigation and typing
    "tab", "shift+tab", "up", "down", "left", "right", "home", "end", "pageup", "pagedown",
    "backspace", "x", "0",
)

# Where each example starts: the keys that lead there from the home screen.
STARTS = {
    "home": (),
    "run": ("enter",),  # layernorm_gelu: its latest run (three iterations, approved)
    "running": ("j", "j", "n", "enter"),  # rmsnorm_mul: a new run, in progress
    "new_run": ("n",),
    "branches": ("g",),
    "filter": ("slash",),
    "help": ("question_mark",),
    "reject": ("enter", "r"),
}


async def drive(root: Path, start: str, keys: list[str], size: tuple[int, int]) -> None:
    backend = FakeBackend(root, phase_delay=0.05)
    config = TuiConfig(tui=TuiSettings(editor="true"))
    app = KoptApp(backend=backend, config=config)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: bool(getattr(app.screen, "rows", None)), timeout=30)
        for key in (*STARTS[start], *keys):
            if app._exit or app._exception is not None:
                break  # quit (Q, q on home) or crashed: run_test re-raises a crash on exit
            await pilot.press(key)
        await pilot.pause(0.05)


@pytest.mark.timeout(900)  # a failure is shrunk (Hypothesis stops shrinking after 5 min)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=False, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(start=st.sampled_from(sorted(STARTS)),
       keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=MAX_KEYS),
       size=st.sampled_from([(80, 24), (120, 40)]))
def test_random_keys_never_crash_the_app(workspace: Path, start: str, keys: list[str],
                                         size: tuple[int, int]) -> None:
    with tempfile.TemporaryDirectory(dir=workspace) as root:
        asyncio.run(asyncio.wait_for(drive(Path(root), start, keys, size), EXAMPLE_TIMEOUT_S))
