"""A local worker dies with the kopt process that started it (it runs in its own session so
that a timeout kills its whole group; without this a killed kopt left it running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_killed_parent_takes_its_local_worker_with_it(workspace: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    parent = textwrap.dedent(f"""
        import os, sys
        from harness.job import stage_job
        from harness.targets.local import LocalTarget
        # one line, then 30 s of silence (a printing worker would die of SIGPIPE anyway)
        job = stage_job("echo", {{"message": "x", "repeat": 2, "interval_s": 30}})
        def on_line(line):
            if not os.path.exists({str(pid_file)!r}):
                import subprocess
                out = subprocess.run(["pgrep", "-f", "harness.worker " + str(job)],
                                     capture_output=True, text=True).stdout.split()
                if out:
                    open({str(pid_file)!r}, "w").write(out[0])
        LocalTarget().run(job, timeout=120, on_line=on_line)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], env={**os.environ})
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), "the worker never started"
    worker = int(pid_file.read_text())
    assert _alive(worker)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived the kopt process that started it"
