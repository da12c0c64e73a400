"""A local worker dies with the kopt process that started it (it runs in its own session so
that a timeout kills its whole group; without this a killed kopt left it running), and so
does a standby worker waiting for the next job."""

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


def _assert_dies_with(parent: str, pid_file: Path, what: str) -> None:
    """Start `parent` (Python code that writes a child's pid to `pid_file`), SIGKILL it, and
    check that the child goes too."""
    proc = subprocess.Popen([sys.executable, "-c", parent], env={**os.environ})
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), f"the {what} never started"
    child = int(pid_file.read_text())
    assert _alive(child)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), f"the {what} outlived the kopt process that started it"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_killed_parent_takes_its_local_worker_with_it(workspace: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    parent = textwrap.dedent(f"""
        import os, sys
        from kopt.harness.job import stage_job
        from kopt.harness.targets.local import LocalTarget
        # one line, then 30 s of silence (a printing worker would die of SIGPIPE anyway)
        job = stage_job("echo", {{"message": "x", "repeat": 2, "interval_s": 30}})
        def on_line(line):
            if not os.path.exists({str(pid_file)!r}):
                import subprocess
                out = subprocess.run(["pgrep", "-f", "kopt.harness.worker " + str(job)],
                                     capture_output=True, text=True).stdout.split()
                if out:
                    open({str(pid_file)!r}, "w").write(out[0])
        LocalTarget().run(job, timeout=120, on_line=on_line)
    """)
    _assert_dies_with(parent, pid_file, "worker")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_waiting_standby_dies_with_its_kopt_process(workspace: Path, tmp_path: Path) -> None:
    """kopt.harness.targets.standby: the worker started ahead of the next job."""
    pid_file = tmp_path / "standby.pid"
    parent = textwrap.dedent(f"""
        import time
        from kopt.harness.job import stage_job
        from kopt.harness.targets import standby
        from kopt.harness.targets.local import LocalTarget
        LocalTarget().run(stage_job("echo", {{"message": "x"}}), timeout=120)
        open({str(pid_file)!r}, "w").write(str(standby.STANDBY.waiting()[0].pid))
        time.sleep(120)
    """)
    _assert_dies_with(parent, pid_file, "standby")


def test_an_answered_reference_is_not_waited_for_to_its_end(tmp_path: Path) -> None:
    """The reference's isolated worker counts as done once its response is in place (its exit,
    a CUDA context's release, goes on in the background); one that exits without answering,
    or does neither within the timeout, is seen as such."""
    from kopt.harness.targets.local import _wait_for_response
    from kopt.harness.targets.standby import kill_group

    def start(code: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, text=True,
                                start_new_session=True)

    (tmp_path / "out").mkdir()
    answers = start("import pathlib, time; p = pathlib.Path('out');"
                    "(p / 'r.tmp').write_text('{}'); (p / 'r.tmp').rename(p / 'response.json');"
                    "time.sleep(60)")
    t0 = time.monotonic()
    assert _wait_for_response(answers, tmp_path, timeout=30) is True
    kill_group(answers, reap=False)
    assert time.monotonic() - t0 < 20
    deadline = time.monotonic() + 10
    while _alive(answers.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(answers.pid)  # killed, and reaped in the background

    (tmp_path / "out" / "response.json").unlink()
    assert _wait_for_response(start("pass"), tmp_path, timeout=30) is False
    silent = start("import time; time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):
        _wait_for_response(silent, tmp_path, timeout=0.5)
    kill_group(silent)
