"""Candidate code cannot touch the user's machine: every candidate in tests/corpus/escapes is
an honest softmax that first tries one way out (write outside its job, read a key planted in a
fake home, read kopt's environment through /proc, connect to a loopback port the test opens,
spawn a shell); with the sandbox on each must fail inside forward and the verdict must name
the failure. The same corpus with the sandbox off shows each escape is real (it succeeds).

Skipped, with the reason, where bubblewrap cannot run (.ci/run installs it when root).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from kopt.harness import sandbox

CORPUS = Path(__file__).parent / "corpus"
CASE = CORPUS / "cases" / "softmax_small"
SECRET_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nkopt-test-not-a-key\n"
API_KEY = "sk-ant-kopt-test-secret"

# escape file -> text the `contained` check's detail must hold (the failure it names)
ESCAPES: dict[str, tuple[str, ...]] = {
    "writes_outside_job.py": ("Read-only file system", "Permission denied", "No such file"),
    "reads_home_secret.py": ("FileNotFoundError", ".ssh/id_ed25519"),
    "reads_parent_environ.py": ("KeyError", "ANTHROPIC_API_KEY"),
    "connects_loopback.py": ("ConnectionRefusedError",),
    "spawns_shell.py": ("CalledProcessError", "non-zero exit status"),
}
# marks the escapes leave in the fake home when they get out
MARKS = ("kopt-escape-was-here", "kopt-shell-was-here")

STATE = sandbox.probe(refresh=True)
needs_bwrap = pytest.mark.skipif(
    STATE.mechanism != "bwrap",
    reason=f"sandbox unavailable here: {STATE.reason or STATE.mechanism}; fix: {STATE.fix}")

VERIFY_ALL = textwrap.dedent("""
    import json, sys
    from kopt.harness.verify import verify_candidates
    files = sys.argv[2:]
    reports = verify_candidates(sys.argv[1], files, device="cpu", max_parallel=2)
    print(json.dumps({f.rsplit("/", 1)[-1]: r.to_dict() for f, r in zip(files, reports)}))
""")


def _verify_escapes(tmp: Path, *, sandbox_on: bool) -> tuple[dict[str, dict], Path]:
    """Verify every escape in a kopt process whose environment holds an API key, with HOME a
    fake home holding a private key, and a loopback port open; its reports and the home."""
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET_KEY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    # accept (and drop) every connection: verification calls forward dozens of times, and an
    # unaccepted backlog fills up, after which a connect times out instead of getting in
    accepting = threading.Thread(target=_accept_all, args=(listener,), daemon=True)
    accepting.start()
    env = {**os.environ, "HOME": str(home), "ANTHROPIC_API_KEY": API_KEY,
           "ESCAPE_TEST_PORT": str(listener.getsockname()[1]), "KOPT_HOME": str(tmp / "ws"),
           "KOPT_CACHE": str(tmp / "cache"), sandbox.ENV_SWITCH: "1" if sandbox_on else "0",
           "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[1]),
                                                     os.environ.get("PYTHONPATH", "")) if p)}
    files = [str(CORPUS / "escapes" / name) for name in sorted(ESCAPES)]
    try:
        done = subprocess.run([sys.executable, "-c", VERIFY_ALL, str(CASE), *files], env=env,
                              capture_output=True, text=True, timeout=1200, cwd=tmp)
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), home


def _accept_all(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed
            return
        conn.close()


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], Path]:
    return _verify_escapes(tmp_path_factory.mktemp("escapes-on"), sandbox_on=True)


@pytest.fixture(scope="module")
def unsandboxed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], Path]:
    return _verify_escapes(tmp_path_factory.mktemp("escapes-off"), sandbox_on=False)


def test_every_escape_is_listed() -> None:
    assert {p.name for p in (CORPUS / "escapes").glob("*.py")} == set(ESCAPES)


@needs_bwrap
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_fails_inside_the_candidate(name: str, sandboxed) -> None:
    reports, home = sandboxed
    report = reports[name]
    assert not report["accepted"], f"{name} was accepted with the sandbox on"
    assert _check(report, "loads")["passed"], "the escape must fail in forward, not at import"
    contained = _check(report, "contained")
    assert not contained["passed"]
    assert any(text in contained["detail"] for text in ESCAPES[name]), contained["detail"]
    assert not any((home / mark).exists() for mark in MARKS)


@needs_bwrap
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_without_the_sandbox_the_escape_gets_out(name: str, unsandboxed) -> None:
    """The corpus is real: with the sandbox off nothing stops the escape in forward."""
    reports, home = unsandboxed
    contained = _check(reports[name], "contained")
    assert contained["passed"], contained["detail"]
    if name == "writes_outside_job.py":
        assert (home / "kopt-escape-was-here").is_file()


@needs_bwrap
def test_self_test_finds_every_layer_blocked() -> None:
    assert sandbox.self_test() == {"network": None, "filesystem": None, "processes": None}


@needs_bwrap
def test_wrapping_keeps_inherited_descriptors(tmp_path: Path) -> None:
    """The wrapper only prefixes the command: a pipe the parent passes (pass_fds) reaches the
    worker, stdout streams as before."""
    read_fd, write_fd = os.pipe()
    code = f"import os; os.write({write_fd}, b'through the pipe'); print('on stdout')"
    argv, env, how = sandbox.wrap([sys.executable, "-S", "-c", code], dict(os.environ), tmp_path)
    assert how == "bwrap" and argv[0].endswith("bwrap")
    done = subprocess.run(argv, env=env, pass_fds=(write_fd,), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        assert pipe.read() == b"through the pipe"
    assert done.stdout.strip() == "on stdout", done.stderr


@needs_bwrap
def test_the_job_directory_is_writable_and_the_workspace_hidden(tmp_path: Path) -> None:
    job = tmp_path / "ws" / ".kopt" / "jobs" / "j1"
    job.mkdir(parents=True)
    (tmp_path / "ws" / "notes.txt").write_text("the user's")
    code = ("import os; open('out.txt', 'w').write('ok'); "
            "print(os.path.exists(os.path.join(os.environ['KOPT_HOME'], 'notes.txt')))")
    env = {**os.environ, "KOPT_HOME": str(tmp_path / "ws")}
    argv, env, _ = sandbox.wrap([sys.executable, "-S", "-c", code], env, job)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=job)
    assert done.stdout.strip() == "False", done.stderr
    assert (job / "out.txt").read_text() == "ok"


@needs_bwrap
def test_a_standby_takes_its_job_inside_the_sandbox(workspace: Path) -> None:
    from kopt.harness.job import stage_job
    from kopt.harness.targets import standby
    from kopt.harness.targets.local import LocalTarget

    standby.STANDBY.clear()
    try:
        target = LocalTarget()
        first = target.run(stage_job("echo", {"message": "one"}), timeout=120)
        assert first.ok and first.response["sandbox"] == "bwrap"
        job = stage_job("echo", {"message": "two"})
        second = target.run(job, timeout=120)
        assert second.ok and second.response["worker_started"] == "standby", second.output_tail
        assert second.response["sandbox"] == "bwrap"
        assert (job / "out" / "response.json").is_file()  # where the caller staged it
        assert not list((job.parent).glob("standby-*/out"))
    finally:
        standby.STANDBY.clear()


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(sandbox.ENV_SWITCH, "0")
    argv = [sys.executable, "-c", "pass"]
    assert sandbox.wrap(argv, dict(os.environ), tmp_path) == (argv, dict(os.environ), "off")
    assert "sandbox off" in (sandbox.warning_line() or "")


def test_no_sandbox_flag_prints_the_warning(tmp_path: Path) -> None:
    env = {**os.environ, "KOPT_HOME": str(tmp_path)}
    env.pop(sandbox.ENV_SWITCH, None)
    done = subprocess.run([sys.executable, "-m", "kopt", "verify", "--no-sandbox",
                           "no_such_case", "no_such_file.py"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert "kopt: warning: sandbox off" in done.stderr


def test_a_missing_mechanism_is_reported_with_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    state = sandbox._probe()
    assert state.mechanism == "none"
    assert "bubblewrap is not installed" in state.reason
    assert "apt-get install bubblewrap" in state.fix
    assert not any(layer.enforced for layer in state.layers if layer.name != "gpu")


def test_the_commands_own_program_is_bound_only_outside_the_shown_folders(tmp_path: Path) -> None:
    """An interpreter named with `ssh://...?python=PATH` may live where the sandbox shows
    nothing: it gets its own read-only bind. One under a shown folder (a venv's `bin/python`,
    a symlink there) must not: binding over a symlink fails every worker."""
    env_dir = tmp_path / "venv" / "bin"
    env_dir.mkdir(parents=True)
    python = env_dir / "python"
    python.write_text("#!/bin/sh\n")
    elsewhere = tmp_path / "wrapper"
    elsewhere.write_text("#!/bin/sh\n")
    shown = [str(tmp_path / "venv")]
    assert not sandbox._needs_own_bind(str(python), shown)
    assert sandbox._needs_own_bind(str(elsewhere), shown)
    assert not sandbox._needs_own_bind("python3", shown)  # found on PATH, not a path
    assert not sandbox._needs_own_bind(str(tmp_path / "missing"), shown)
