"""The ssh:// target against a real OpenSSH server on 127.0.0.1 (skipped without sshd)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd import Sshd, find_sshd, keygen, start_sshd

from kopt.harness.errors import BadInputError, TargetError
from kopt.harness.job import stage_job
from kopt.harness.targets import jobs as job_records
from kopt.harness.targets.resolve import resolve_target
from kopt.harness.targets.ssh import SshTarget, parse_spec
from kopt.workbench.cli import main as kopt

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def loopback() -> Iterator[Sshd]:
    if find_sshd() is None:
        pytest.skip("sshd is not installed (.ci/run installs openssh-server; apt-get install "
                    "openssh-server)")
    import tempfile

    # a short path: ssh's ControlPath socket names must stay under ~100 bytes
    directory = Path(tempfile.mkdtemp(prefix="kopt-sshd-"))
    try:
        server = start_sshd(directory)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as err:
        pytest.skip(f"could not start sshd: {err}")
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def spec(loopback: Sshd, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """ssh://kopt-loopback/<remote workspace>?python=<this interpreter>."""
    monkeypatch.setenv("KOPT_SSH_CONFIG", str(loopback.client_config))
    remote = loopback.directory / "remote"
    return f"ssh://kopt-loopback{remote}?python={sys.executable}"


def test_parse_spec() -> None:
    parsed = parse_spec("ssh://me@gpu-box:2222/scratch/kopt?python=/opt/py/bin/python")
    assert (parsed.user, parsed.host, parsed.port, parsed.workspace, parsed.python) == (
        "me", "gpu-box", 2222, "/scratch/kopt", "/opt/py/bin/python")
    assert parse_spec("ssh://gpu-box/~/kopt").workspace == "~/kopt"
    assert parse_spec("ssh://gpu-box").workspace == "~/.kopt-remote"
    assert not parse_spec("ssh://gpu-box?source=installed").push_source
    with pytest.raises(BadInputError, match="unknown option"):
        parse_spec("ssh://gpu-box?pyhton=x")


def test_job_streams_lines_and_pushes_only_changes(spec: str, workspace: Path) -> None:
    target = resolve_target(spec)
    assert isinstance(target, SshTarget)
    lines: list[tuple[float, str]] = []
    payload = os.urandom(2 * 2**20)
    first = stage_job("echo", {"message": "hello", "repeat": 2, "interval_s": 1.5})
    (first / "inputs").mkdir()
    (first / "inputs" / "blob.bin").write_bytes(payload)
    outcome = target.run(first, timeout=60, on_line=lambda line: lines.append((time.time(), line)))
    assert outcome.ok, outcome.output_tail
    assert [line for _, line in lines] == ["echo: hello"] * 2
    # streamed as they happened (1.5 s apart on the remote), not all at the end
    assert lines[-1][0] - lines[0][0] > 1.0
    assert outcome.response["message"] == "hello"
    assert outcome.response["environment"]["python"] == sys.version.split()[0]
    assert outcome.host == "ssh://kopt-loopback"
    assert target.last_push["bytes"] >= len(payload)

    # content already on the remote is not sent again: the 2 MB payload travels once
    again = stage_job("echo", {"message": "again"})
    (again / "inputs").mkdir()
    (again / "inputs" / "blob.bin").write_bytes(payload)
    outcome = target.run(again, timeout=60)
    assert outcome.ok and outcome.response["message"] == "again"
    assert 0 < target.last_push["bytes"] < len(payload) // 4  # request.json (+ edited source)
    record = job_records.load(outcome.extra["job_id"])
    assert record.state == "fetched" and record.returncode == 0


def test_dropped_connection_is_reattached_without_losing_lines(spec: str, workspace: Path) -> None:
    target = resolve_target(spec)
    assert isinstance(target, SshTarget)
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if len(lines) == 1 and target.follow_process is not None:
            target.follow_process.kill()  # the link drops mid-job

    job = stage_job("echo", {"message": "tick", "repeat": 5, "interval_s": 0.3})
    outcome = target.run(job, timeout=60, on_line=on_line)
    assert outcome.ok, outcome.output_tail
    assert lines == ["echo: tick"] * 5  # nothing lost, nothing repeated


def test_detached_job_survives_a_dropped_attach(spec: str, workspace: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # 11 s of beats: on a loaded 2-core CI machine, 3 s (8 beats of 0.4 s) ran out before the
    # listing below and it read `done`
    assert kopt(["jobs", "submit", "--target", spec, "--echo", "beat", "--repeat", "12",
                 "--interval", "1.0", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["id"]

    # attach from another process, then drop it after the first line
    attach = subprocess.Popen([sys.executable, "-m", "kopt.workbench.cli", "jobs", "attach", job_id],
                              stdout=subprocess.PIPE, text=True, cwd=str(workspace),
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert attach.stdout is not None
    assert attach.stdout.readline().strip() == "echo: beat"
    attach.kill()
    attach.wait()

    assert kopt(["jobs", "--json"]) == 0
    listed = {j["id"]: j for j in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["jobs"]}
    assert listed[job_id]["state"] == "running"

    assert kopt(["jobs", "attach", job_id]) == 0
    out = capsys.readouterr().out
    assert out.count("echo: beat") == 12
    record = job_records.load(job_id)
    assert record.state == "fetched"
    response = json.loads((Path(record.local_dir) / "out" / "response.json").read_text())
    assert response["ok"] and response["message"] == "beat"


def test_cancel_stops_a_running_job(spec: str, workspace: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert kopt(["jobs", "submit", "--target", spec, "--echo", "slow", "--repeat", "100",
                 "--interval", "0.5", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["id"]
    assert kopt(["jobs", "cancel", job_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cancelled"] is True
    target = resolve_target(spec)
    assert target.status(job_records.load(job_id))["state"] == "cancelled"


def test_remote_timeout_kills_the_job(spec: str, workspace: Path) -> None:
    target = resolve_target(spec)
    job = stage_job("echo", {"message": "x", "repeat": 100, "interval_s": 0.5})
    outcome = target.run(job, timeout=3, on_line=None)
    assert outcome.timed_out and not outcome.ok
    assert "timed out" in outcome.failure_reason()


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = kopt(argv)
    # the error is one line; a machine without bubblewrap also gets the sandbox's warning
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines()
             if not ln.startswith("kopt: warning: sandbox incomplete")]
    err = "\n".join(lines)
    assert code != 0
    assert len(lines) == 1, err
    assert err.startswith("kopt: error: ")
    return err


def test_unreachable_host_is_one_line(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sshd import free_port

    err = _one_line_error(capsys, ["jobs", "submit", "--target",
                                   f"ssh://127.0.0.1:{free_port()}", "--echo", "x"])
    assert "unreachable" in err and "Connection refused" in err and "ssh -p" in err


def _targets_yaml(workspace: Path, **entry: str) -> None:
    lines = ["targets:", "  box:"] + [f"    {k}: {v}" for k, v in entry.items()]
    (workspace / "targets.yaml").write_text("\n".join(lines) + "\n")


def test_wrong_key_is_one_line(loopback: Sshd, workspace: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    wrong = workspace / "wrong_key"
    keygen(wrong)
    _targets_yaml(workspace, spec=f"ssh://127.0.0.1:{loopback.port}", ssh_config="/dev/null",
                  identity_file=str(wrong), known_hosts=str(loopback.known_hosts))
    err = _one_line_error(capsys, ["jobs", "submit", "--target", "box", "--echo", "x"])
    assert "authentication failed" in err and "authorized_keys" in err


def test_unknown_host_key_is_one_line(loopback: Sshd, workspace: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    empty = workspace / "known_hosts"
    empty.write_text("")
    _targets_yaml(workspace, spec=f"ssh://127.0.0.1:{loopback.port}", ssh_config="/dev/null",
                  identity_file=str(loopback.client_key), known_hosts=str(empty))
    err = _one_line_error(capsys, ["jobs", "submit", "--target", "box", "--echo", "x"])
    assert "unknown host key" in err and "fingerprint" in err


def test_missing_torch_on_the_remote_is_one_line(loopback: Sshd, spec: str, workspace: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0 or not os.access(bare, os.X_OK):
        pytest.skip(f"{bare} is missing or has torch: no bare interpreter to test with")
    err = _one_line_error(capsys, ["jobs", "submit", "--target", spec.split("?")[0] +
                                   f"?python={bare}", "--echo", "x"])
    assert "torch is missing" in err and "pip install torch" in err


def test_missing_python_on_the_remote_is_one_line(spec: str, workspace: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["jobs", "submit", "--target", spec.split("?")[0] +
                                   "?python=/nonexistent/python3", "--echo", "x"])
    assert "no Python at '/nonexistent/python3'" in err


def test_kopt_targets_checks_local_and_loopback(loopback: Sshd, spec: str, workspace: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (workspace / "targets.yaml").write_text(f"targets:\n  loopback: {spec}\n")
    assert kopt(["targets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["targets"]}
    assert set(rows) == {"local", "loopback"}
    assert rows["loopback"]["reachable"] and rows["loopback"]["torch"] == rows["local"]["torch"]
    assert rows["loopback"]["triton"] and "disk_free_bytes" in rows["loopback"]
    assert kopt(["targets", "local", "--no-ceilings"]) == 0
    table = capsys.readouterr().out
    # (a long version such as 2.14.1+cu130 wraps in an 80-column table: its release part)
    assert "local" in table and rows["local"]["torch"].split("+")[0] in table


def test_verify_and_bench_through_the_ssh_target(spec: str, workspace: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    corpus = ROOT / "tests" / "corpus"
    case, candidate = str(corpus / "cases" / "softmax_small"), str(corpus / "honest" / "softmax.py")
    code = kopt(["verify", case, candidate, "--device", "cpu", "--target", spec, "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and report["accepted"], report
    # the remote agent starts the reference as the local target does: python -I -S
    isolated = next(c for c in report["checks"] if c["name"] == "isolated_reference")
    assert "an isolated interpreter (python -I -S" in isolated["detail"], isolated
    assert kopt(["bench", case, candidate, "--device", "cpu", "--no-compile", "--unverified",
                 "--target", spec, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["variant"] for r in rows] == ["eager", "softmax"]
    # the workers ran on the remote: each job is recorded there and came back
    ran = [r for r in job_records.list_records() if r.target == spec]
    assert len(ran) >= 3 and all(r.state == "fetched" for r in ran)


TINY_SOFTMAX = """\
name: softmax_tiny
description: Test-only row softmax, small enough for a whole run through the interpreter.
model: {module: model.py, class: Model}
inputs:
  args:
    - {shape: [8, 128], dtype: float32, init: normal, std: 3.0}
device: auto
precision: strict
shapes:
  - args: [{shape: [3, 100]}]
smoke:
  args: [{shape: [4, 128]}]
"""


@pytest.mark.slow
def test_full_run_through_the_ssh_target(spec: str, workspace: Path) -> None:
    """All four phases with every worker on the remote (~50 s on 2 CPU cores: a dozen worker
    start-ups; the bundled softmax's (64, 256) smoke set took ~130 s in the interpreter)."""
    case = workspace / "cases-src" / "softmax_tiny"
    case.mkdir(parents=True)
    shutil.copyfile(ROOT / "cases" / "softmax" / "model.py", case / "model.py")
    (case / "manifest.yaml").write_text(TINY_SOFTMAX)
    proc = subprocess.run([sys.executable, "-m", "kopt.workbench.cli", "run", str(case),
                           "--iterations", "1", "--yes", "--json", "--device", "cpu",
                           "--target", spec],
                          cwd=str(workspace), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["verified"] and len(result["manifests"]) == 4
    ran = [r for r in job_records.list_records() if r.target == spec]
    assert {r.job for r in ran} >= {"measure", "reference", "candidate", "bench"}
    assert all(r.state == "fetched" for r in ran)
    # provenance: the metrics of the accepted kernel were written by the remote's worker
    metrics = json.loads((workspace / ".kopt" / "worktrees" / result["run_id"] / "kernels" /
                          "softmax_tiny.metrics.json").read_text())
    assert metrics["environment"]["host"] and metrics["environment"]["python"]


def test_remote_disk_full_is_one_line(spec: str, workspace: Path) -> None:
    target = resolve_target(spec)
    assert isinstance(target, SshTarget)
    target._probe = {**target.probe(), "disk_free_bytes": 10 * 2**20}  # as if 10 MiB were left
    job = stage_job("echo", {"message": "x"})
    (job / "inputs").mkdir()
    (job / "inputs" / "big.bin").write_bytes(os.urandom(2**20))
    with pytest.raises(TargetError) as caught:
        target.run(job, timeout=30)
    line = caught.value.one_line()
    assert "remote disk full" in line and "10 MiB free" in line and "\n" not in line


def test_metrics_through_ssh_record_the_remote_host(spec: str, workspace: Path) -> None:
    """Provenance: the metrics' environment is the remote worker's, not this machine's (the
    loopback "remote" pretends to be another host through a sitecustomize)."""
    import platform

    from kopt.harness.runner import measure_variant

    site = workspace / "remote-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import platform\n"
                                           "platform.node = lambda: 'gpu-node-7'\n")
    python = workspace / "remote-python"
    python.write_text(f'#!/bin/sh\nexport PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    assert platform.node() != "gpu-node-7"
    corpus = ROOT / "tests" / "corpus"
    metrics = measure_variant(corpus / "cases" / "softmax_small", corpus / "honest" / "softmax.py",
                              device="cpu", target=spec.split("?")[0] + f"?python={python}",
                              timing_options={"max_seconds": 0.5, "max_iters": 3,
                                              "min_iters": 1})
    assert metrics["ok"], metrics.get("error")
    env = metrics["environment"]
    assert env["host"] == "gpu-node-7" and env["torch"] and env["triton"]
    assert "gpu" in env  # the remote's GPU (None here: a CPU-only remote)
    written = json.loads((Path(metrics["artifacts_dir"]) / "metrics.json").read_text())
    assert written["environment"]["host"] == "gpu-node-7"


def test_slots_of_one_remote_run_jobs_at_once(spec: str, workspace: Path) -> None:
    """Two slots of one ssh target on a fresh remote workspace (as a 2-GPU host gives): the
    first pushes race for the same source tree; every job still runs, results in task order."""
    from kopt.harness.parallel import Slot, evaluate_many

    target = resolve_target(spec.replace("/remote?", "/remote-parallel?"))
    assert isinstance(target, SshTarget)

    def echo(i: int) -> Any:
        def evaluate(slot: Any) -> dict[str, Any]:
            outcome = slot.run(stage_job("echo", {"message": f"job{i}", "repeat": 2,
                                                  "interval_s": 0.5}), timeout=60)
            return {"ok": outcome.ok, "message": (outcome.response or {}).get("message"),
                    "tail": outcome.output_tail}
        return evaluate

    results = evaluate_many([echo(i) for i in range(4)], [Slot(target), Slot(target)])
    assert [r["message"] for r in results] == ["job0", "job1", "job2", "job3"]
    assert all(r["ok"] and r["tail"].count("echo: job") == 2 for r in results), results
