"""Every user-given name and choice is checked before `kopt run` writes anything: through the
real entry point (`python -m kopt`), in a fresh git workspace, nothing may be left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kopt.phases import history

ROOT = Path(__file__).resolve().parent.parent


def kopt(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KOPT_HOME": str(workspace), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kopt", *args], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=300)


def leftovers(workspace: Path) -> list[str]:
    """What a refused command left: files beside .git, and branches other than the base."""
    files = sorted(p.name for p in workspace.iterdir() if p.name not in (".git", ".gitignore"))
    branches = subprocess.run(["git", "branch", "--list", "kopt/*"], cwd=workspace,
                              capture_output=True, text=True).stdout.split()
    return files + branches


@pytest.mark.parametrize("run_id", ["../../x", "/abs/path", "my run", ".hidden", "a..b"])
def test_bad_run_id_is_refused_before_anything_is_written(workspace: Path, run_id: str) -> None:
    history.init_workspace(workspace)
    before = leftovers(workspace)
    done = kopt(workspace, "run", "softmax", "--run-id", run_id, "--yes")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"kopt: error: run id {run_id!r} is not a valid name (use letters, digits, '.', '_' and "
        f"'-', starting with a letter or digit, up to 100 characters, no '..')"]
    assert leftovers(workspace) == before
    assert not (workspace.parent.parent / "x").exists() and not Path("/abs/path").exists()


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--engineer", "bogus", "unknown engineer 'bogus'"),
    ("--engineer", "replay:/no/such/transcript.jsonl", "no transcript at"),
    ("--target", "bogus", "unknown target 'bogus'"),
    ("--target", "ssh://a b", "bad host 'a b'"),
])
def test_bad_choice_is_refused_before_the_architect_runs(workspace: Path, flag: str, value: str,
                                                         says: str) -> None:
    history.init_workspace(workspace)
    before = leftovers(workspace)
    done = kopt(workspace, "run", "softmax", flag, value, "--yes")
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert "architect" not in done.stdout  # no phase started
    assert leftovers(workspace) == before
    assert "pending" not in kopt(workspace, "history").stdout


def test_resume_of_a_bad_run_id_is_refused(workspace: Path) -> None:
    history.init_workspace(workspace)
    done = kopt(workspace, "run", "--resume", "../elsewhere")
    assert done.returncode == 2 and "is not a valid name" in done.stderr
