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

    # the server logs a command after it has sent the client its exit: on a loaded machine
    # the client can be back before the last line is written
    deadline = time.monotonic() + 20
    while True:
        served = [line for line in log.read_text().splitlines() if line.startswith("verify ")]
        if len(served) >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
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


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The serve module's temporary folder, short (a socket's path is limited to about 100
    bytes; xdist's tmp_path alone can be 60)."""
    import shutil
    import tempfile

    from kopt.workbench import serve

    folder = tempfile.mkdtemp(prefix="ks", dir="/tmp")
    monkeypatch.setattr(serve.tempfile, "gettempdir", lambda: folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _fake_server(path: Path, replies: list[dict], *, close_early: bool = False):  # type: ignore[no-untyped-def]
    """A socket at `path` that reads one request, sends `replies` (one JSON line each) and
    closes; the request it read is put in the returned list."""
    import json as _json
    import socket
    import threading

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    seen: list[dict] = []

    def serve_one() -> None:
        conn, _ = sock.accept()
        with conn:
            buf = b""
            while b"\n" not in buf:
                buf += conn.recv(65536)
            seen.append(_json.loads(buf.split(b"\n", 1)[0]))
            for reply in replies:
                conn.sendall((_json.dumps(reply) + "\n").encode())
        sock.close()

    threading.Thread(target=serve_one, daemon=True).start()
    return seen


def test_the_client_relays_frames_and_the_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], short_tmp: str) -> None:
    from kopt.workbench import serve

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    path = serve.socket_path(tmp_path.resolve())
    seen = _fake_server(path, [{"accept": True}, {"out": "checks\n"}, {"err": "warned\n"},
                               {"out": '{"accepted": false}\n'}, {"exit": 1}])
    assert serve.relay(["verify", "c", "k.py", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == 'checks\n{"accepted": false}\n' and err == "warned\n"
    assert seen[0]["argv"] == ["verify", "c", "k.py", "--json"] and seen[0]["cwd"] == os.getcwd()
    assert seen[0]["identity"] == serve.identity()


def test_a_busy_server_leaves_the_command_to_the_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         short_tmp: str) -> None:
    from kopt.workbench import serve

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    _fake_server(serve.socket_path(tmp_path.resolve()), [{"accept": False, "why": "busy"}])
    assert serve.relay(["verify", "c", "k.py"]) is None


def test_a_server_gone_mid_command_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], short_tmp: str) -> None:
    from kopt.workbench import serve

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    _fake_server(serve.socket_path(tmp_path.resolve()), [{"accept": True}, {"out": "half\n"}])
    assert serve.relay(["bench", "c"]) == 1
    out, err = capsys.readouterr()
    assert out == "half\n"
    assert err.startswith("kopt: error: the kopt server ended in the middle of the command")


def test_a_socket_in_a_folder_others_can_open_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          short_tmp: str) -> None:
    """Someone else's server where this workspace's would be is never asked: the folder must
    be this user's alone."""
    from kopt.workbench import serve

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    path = serve.socket_path(tmp_path.resolve())
    seen = _fake_server(path, [{"accept": True}, {"out": "forged\n"}, {"exit": 0}])
    path.parent.chmod(0o777)
    assert serve.relay(["verify", "c", "k.py"]) is None and seen == []
