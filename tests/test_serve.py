"""`kopt serve`: `kopt verify` and `kopt bench` run in a warm server when one serves the
workspace with the client's identity, and print, exit and judge exactly as in their own
process; anything else (another environment, another kopt source) runs where it was typed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
CASE = str(CORPUS / "cases" / "softmax_small")


def _env(workspace: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KOPT_SERVE"}
    return {**env, "KOPT_HOME": str(workspace), **extra}


def _kopt(args: list[str], workspace: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kopt", *args], cwd=workspace,
                          env=_env(workspace, **extra), capture_output=True, text=True, timeout=300)


@pytest.fixture
def server(workspace: Path):  # type: ignore[no-untyped-def]
    (workspace / ".kopt").mkdir(exist_ok=True)
    log = workspace / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kopt", "serve", "--device", "cpu",
                                 "--idle-minutes", "10"], cwd=workspace, env=_env(workspace),
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while "serving `kopt" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    yield proc, log
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_served_verify_prints_and_exits_as_its_own_process_would(workspace: Path, server) -> None:  # type: ignore[no-untyped-def]
    proc, log = server
    accepted = _kopt(["verify", CASE, str(CORPUS / "honest" / "softmax.py"), "--device", "cpu",
                      "--json"], workspace)
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    report = json.loads(accepted.stdout.strip().splitlines()[-1])
    assert report["accepted"] is True and report["device"] == "cpu"
    assert "accepted on cpu" in accepted.stdout
    rejected = _kopt(["verify", CASE, str(CORPUS / "cheats" / "c17_same_output_every_call.py"),
                      "--device", "cpu", "--json"], workspace)
    assert rejected.returncode == 1, rejected.stderr[-2000:]
    assert json.loads(rejected.stdout.strip().splitlines()[-1])["accepted"] is False
    missing = _kopt(["verify", CASE, "no_such_file.py", "--device", "cpu"], workspace)
    assert missing.returncode == 2 and "kopt: error:" in missing.stderr, missing.stderr
    usage = _kopt(["verify", CASE], workspace)  # argparse's own exit
    assert usage.returncode == 2 and "the following arguments are required" in usage.stderr

    served = [line for line in log.read_text().splitlines() if line.startswith("verify ")]
    assert [line.split(": ")[-1].split(" in ")[0] for line in served] == \
        ["exit 0", "exit 1", "exit 2", "exit 2"], log.read_text()

    # another environment: the command runs in its own process, with the same verdict
    elsewhere = _kopt(["verify", CASE, "no_such_file.py", "--device", "cpu"], workspace,
                      KOPT_SOMETHING_ELSE="1")
    assert elsewhere.returncode == 2 and "kopt: error:" in elsewhere.stderr
    assert "refused verify" in log.read_text()
    bypass = _kopt(["verify", CASE, "no_such_file.py"], workspace, KOPT_SERVE="0")
    assert bypass.returncode == 2
    assert len([ln for ln in log.read_text().splitlines() if ln.startswith("verify ")]) == 4

    status = _kopt(["serve", "--status", "--json"], workspace)
    answer = json.loads(status.stdout.strip().splitlines()[-1])
    assert answer["serving"] is True and answer["pid"] == proc.pid and answer["served"] == 4
    again = _kopt(["serve", "--device", "cpu"], workspace)
    assert again.returncode == 2 and "already serves" in again.stderr, again.stderr

    stop = _kopt(["serve", "--stop"], workspace)
    assert stop.returncode == 0 and "stopping" in stop.stdout
    assert proc.wait(timeout=60) == 0
    assert "stopped by `kopt serve --stop`" in log.read_text()
    after = _kopt(["serve", "--status", "--json"], workspace)
    assert json.loads(after.stdout.strip().splitlines()[-1])["serving"] is False


def test_an_edited_source_file_changes_the_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started before an edit (or an upgrade) does not serve the edited code."""
    from kopt.harness import paths
    from kopt.workbench import serve

    (tmp_path / "harness").mkdir()
    module = tmp_path / "harness" / "x.py"
    module.write_text("A = 1\n")
    monkeypatch.setattr(paths, "PACKAGE_ROOT", tmp_path)
    before = serve.identity({"KOPT_X": "1", "UNRELATED": "a"})
    assert before == serve.identity({"KOPT_X": "1", "UNRELATED": "b"})  # not a setting of kopt's
    assert before != serve.identity({"KOPT_X": "2", "UNRELATED": "a"})
    module.write_text("A = 22\n")
    assert serve.identity({"KOPT_X": "1", "UNRELATED": "a"}) != before


def test_without_a_server_the_client_runs_the_command_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.workbench import serve

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    assert serve.relay(["verify", "a", "b"]) is None  # no socket
    assert serve.relay(["run", "a"]) is None  # not a served command
    assert serve.relay(["verify", "--help"]) is None
