"""Key latency of kopt-tui while a real run is in progress (issue 24).

Drives the app headless with Pilot over the real backend (the offline engineer on a bundled
case's smoke inputs, in a throw-away git workspace), starts a run, and while it runs sends
pane keys (`1`..`6`) straight to the driver, as a terminal would, timing each until the
pane has switched. Once with the pipeline in a child process (the default) and once in the
TUI's own process (the old way), so the two can be compared:

    python benchmarks/tui_key_latency.py [--case pointwise_chain] [--keys 90] [--device cpu]

Prints one row per mode: keys timed, median, p95 and max latency, and how many took more than
100 ms. Timing belongs here, never in a unit test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TABS = ("diff", "verification", "profile", "metrics", "log", "manifest")


async def measure(case: str, keys: int, device: str | None, in_process: bool) -> list[float]:
    from textual import events

    from kopt.workbench.app import KoptApp
    from kopt.workbench.backend import Backend, RunRequest
    from kopt.workbench.screens.run import RunScreen

    options = {"device": device} if device else {}
    app = KoptApp(backend=Backend(pipeline_options=options, in_process=in_process))
    durations: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        app.push_screen(RunScreen(case=case, request=RunRequest(case=case, iterations=2)))
        await pilot.pause(0.5)
        screen = app.screen
        tabs = screen.query_one("TabbedContent")
        await pilot.pause(3.0)  # past the child's start and imports
        for i in range(keys):
            if not screen.pipeline_running:
                break
            tab = TABS[(i + 1) % len(TABS)]
            key = str(TABS.index(tab) + 1)
            start = time.perf_counter()
            app._driver.send_message(events.Key(key, key))
            while tabs.active != tab and time.perf_counter() - start < 5:
                await asyncio.sleep(0.0005)
            durations.append(time.perf_counter() - start)
            await asyncio.sleep(0.2)
        screen.cancel_jobs()
        deadline = time.monotonic() + 120
        while screen.pipeline_running and time.monotonic() < deadline:
            await pilot.pause(0.2)
    return durations


def row(mode: str, durations: list[float]) -> str:
    if not durations:
        return f"{mode:<12} {0:>5}  (the run ended before any key was timed)"
    ms = sorted(d * 1000 for d in durations)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    slow = sum(1 for d in ms if d > 100)
    return (f"{mode:<12} {len(ms):>5} {statistics.median(ms):>9.1f} {p95:>9.1f} "
            f"{ms[-1]:>9.1f} {slow:>7}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="pointwise_chain")
    parser.add_argument("--keys", type=int, default=90)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    args = parser.parse_args()
    print(f"{'pipeline':<12} {'keys':>5} {'median ms':>9} {'p95 ms':>9} {'max ms':>9} "
          f"{'>100ms':>7}")
    for mode, in_process in (("subprocess", False), ("in-process", True)):
        with tempfile.TemporaryDirectory() as root:
            subprocess.run(["git", "init", "-q", root], check=True)
            os.environ["KOPT_HOME"] = root
            os.chdir(root)
            durations = asyncio.run(measure(args.case, args.keys, args.device, in_process))
        print(row(mode, durations), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
