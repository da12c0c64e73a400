"""`kopt` run as a process ends without the interpreter's teardown (workbench.cli._leave), but
only after what an ordinary exit does first: its output flushed, its exit code kept, its
atexit hooks run (the standby workers ended, their reserved job folders removed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"


def _kopt(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KOPT_HOME": str(cwd)}
    return subprocess.run([sys.executable, "-m", "kopt", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_command_process_flushes_its_output_keeps_its_code_and_runs_its_exit_hooks(
        workspace: Path) -> None:
    (workspace / ".kopt").mkdir()  # a used workspace: the command starts early standbys
    done = _kopt(["verify", str(CORPUS / "cases" / "softmax_small"),
                  str(CORPUS / "honest" / "softmax.py"), "--device", "cpu", "--json"], workspace)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["accepted"] is True
    jobs = workspace / ".kopt" / "jobs"
    left = sorted(p.name for p in jobs.iterdir()) if jobs.is_dir() else []
    assert left == [], left  # the standbys' atexit hook removed their reserved folders

    bad = _kopt(["verify", "no_such_case", "x.py"], workspace)
    assert bad.returncode == 2 and "kopt: error: unknown case 'no_such_case'" in bad.stderr


def test_main_called_in_process_returns_instead_of_exiting(capsys) -> None:  # type: ignore[no-untyped-def]
    from kopt.workbench.cli import main

    assert main(["cases", "--json"]) == 0  # a test (or a caller) gets the code back
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])
