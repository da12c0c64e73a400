"""`kopt run` as a real subprocess (harness and engineer faked inside it): Ctrl-C (exit 130)
then resume, and kill -9 mid-optimizer then `kopt run --resume --json`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_pipeline_fakes import DRIVER, fakes

from kopt.phases import history
from kopt.phases.manifest import read_manifest
from kopt.phases.pipeline import resume_pipeline

ROOT = Path(__file__).resolve().parent.parent


def kopt(workspace: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {**os.environ, "KOPT_HOME": str(workspace), "PYTHONPATH": str(ROOT),
                **(env or {})}
    # kopt as started from a terminal: Ctrl-C delivered. A test run launched in the background
    # by a non-interactive shell inherits SIGINT ignored, and Python then installs no handler.
    return subprocess.Popen([sys.executable, "-c", DRIVER, *args], cwd=workspace, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"kopt exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.1)


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_ctrl_c_stops_cleanly_and_resume_finishes(workspace: Path) -> None:
    history.init_workspace(workspace)
    proc = kopt(workspace, "run", "layernorm_gelu", "--iterations", "3", "--run-id", "r1",
                env={"KOPT_TEST_HANG": "2"})
    wait_for(workspace / "manifests/r1/hang-marker", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "iter 1 - rejected (every_element_written)" in out  # progress lines
    assert "resume with `kopt run --resume r1`" in err
    assert not (workspace / "manifests/r1/optimizer.json").exists()

    # resumed in-process (the CLI's --resume runs in the kill -9 test below)
    result = resume_pipeline("r1", fakes=fakes())
    assert result.verified
    assert [i.iteration for i in history.get_run("r1").iterations] == [1, 2, 3]


def test_killed_mid_optimizer_resumes_and_finishes(workspace: Path) -> None:
    history.init_workspace(workspace)
    proc = kopt(workspace, "run", "layernorm_gelu", "--iterations", "3", "--run-id", "r1",
                env={"KOPT_TEST_HANG": "3"})
    wait_for(workspace / "manifests/r1/hang-marker", proc)
    # leave the worktree as a crash would: a half-written kernel and a stray file
    wt = workspace / ".kopt/worktrees/r1"
    (wt / "kernels/layernorm_gelu.py").write_text("half a kern")
    (wt / "stray.tmp").write_text("x")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (workspace / "manifests/r1/architect.json").is_file()
    assert not (workspace / "manifests/r1/optimizer.json").exists()
    assert [i.iteration for i in history.get_run("r1").iterations] == [1, 2]

    proc = kopt(workspace, "run", "--resume", "r1", "--json")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = last_json(out)
    assert list(result) == ["run_id", "case", "branch", "manifests", "archive",
                            "speedup_vs_eager", "speedup_vs_compile", "verified", "outcome",
                            "timing_label", "timing_breakdown"]
    assert result["verified"] is True and len(result["manifests"]) == 4
    # the fakes time like the CPU interpreter: no speedup figure, the outcome says so
    assert result["speedup_vs_eager"] is None and result["timing_label"] == "cpu-interpreter"
    assert result["outcome"]["verdict"] == "cpu-verified"
    assert "verified (CPU interpreter: no speed measured)" in err
    assert set(result["timing_breakdown"]["phases"]) >= {"optimizer", "accelerator",
                                                         "integrator"}
    run = history.get_run("r1")
    assert [i.iteration for i in run.iterations] == [1, 2, 3]  # no round repeated
    opt = read_manifest(workspace / "manifests/r1/optimizer.json")
    assert opt.details["best"]["iteration"] == 3
    assert opt.details["budget"] == {"rounds": 3, "rounds_run": 3}
    assert not (wt / "stray.tmp").exists()
