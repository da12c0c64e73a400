"""ray:// targets on a local Ray runtime: parallel jobs, and a killed task's work re-queued."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kopt.harness.job import stage_job
from kopt.harness.parallel import Slot, evaluate_many
from kopt.harness.targets.resolve import resolve_target
from kopt.harness.targets.local import LocalTarget

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'kopt[ray]')")

from kopt.harness.targets.ray import RayTarget  # noqa: E402


@pytest.fixture(scope="module")
def runtime() -> Iterator[RayTarget]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    target = RayTarget("ray://local", num_cpus=2)
    target.connect()  # ~10-20 s once for the module
    yield target
    ray.shutdown()


def echo_task(message: str, repeat: int = 2, interval_s: float = 0.5) -> Any:
    def evaluate(slot: Any) -> dict[str, Any]:
        job = stage_job("echo", {"message": message, "repeat": repeat, "interval_s": interval_s})
        outcome = slot.run(job, timeout=120)
        return {"ok": outcome.ok, "message": (outcome.response or {}).get("message"),
                "tail": outcome.output_tail, "worker_host": outcome.host, **outcome.extra}
    return evaluate


def test_resolve_and_describe_say_cpu_only(runtime: RayTarget) -> None:
    assert isinstance(resolve_target("ray://local"), RayTarget)
    info = runtime.describe()
    assert info["reachable"] and info["nodes"] == 1
    assert info["task_resources"] == {"num_cpus": 1}  # no GPUs on CI: one CPU per task
    assert "1 CPU" in info["resources_note"]


def test_local_runtime_runs_jobs_in_parallel(runtime: RayTarget, workspace: Path) -> None:
    results = evaluate_many([echo_task(f"job{i}") for i in range(3)], [runtime])
    assert [r["message"] for r in results] == ["job0", "job1", "job2"]
    assert all(r["ok"] and r["tail"].count(f"echo: job{i}") == 2 for i, r in enumerate(results))
    # two Ray workers ran at the same time (2 CPUs -> 2 slots)
    assert len({r["ray_pid"] for r in results}) == 2
    spans = sorted((r["started_at"], r["ended_at"]) for r in results)
    assert spans[1][0] < spans[0][1]
    assert all(r["host"] == "ray://local" for r in results)


def _worker_processes() -> list[tuple[int, int]]:
    """(pid, parent pid) of worker subprocesses started inside Ray tasks."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if b"kopt.harness.worker" in cmd and b"kopt-ray-" in cmd:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                found.append((int(entry.name), ppid))
        except (OSError, ValueError, IndexError):
            continue
    return found


class GatedLocal(LocalTarget):
    """The local target, held back until `open` is set (so Ray gets the first job)."""

    name = "local"

    def __init__(self) -> None:
        self.open = threading.Event()

    def parallel_slots(self) -> list[Slot]:
        return [Slot(self)]

    def run(self, job_dir: Path, **kwargs: Any) -> Any:
        assert self.open.wait(timeout=120)
        return super().run(job_dir, **kwargs)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray's worker processes in /proc")
def test_killed_ray_task_is_requeued_elsewhere(runtime: RayTarget, workspace: Path) -> None:
    no_retry = RayTarget("ray://local", max_retries=0)
    local = GatedLocal()
    killed: list[int] = []

    def kill_ray_worker() -> None:
        deadline = time.time() + 90
        while time.time() < deadline and not killed:
            for _pid, ray_worker in _worker_processes():
                os.kill(ray_worker, signal.SIGKILL)  # the Ray worker dies mid-evaluation
                killed.append(ray_worker)
                break
            time.sleep(0.1)
        local.open.set()

    killer = threading.Thread(target=kill_ray_worker, daemon=True)
    killer.start()
    results = evaluate_many([echo_task("a", repeat=20, interval_s=0.2), echo_task("b", 1, 0)],
                            [no_retry, local], max_parallel=2)
    killer.join()
    assert killed, "no Ray worker was seen running a job"
    assert [r["message"] for r in results] == ["a", "b"] and all(r["ok"] for r in results)
    # the killed job finished on the local target; nothing was lost
    assert any(r["host"] == "local" for r in results)
    assert killed[0] not in {r.get("ray_pid") for r in results}


def test_output_lines_stream_while_the_task_runs(runtime: RayTarget, workspace: Path) -> None:
    # The task prints its first line, then waits for a file that only this driver creates, and
    # only on receiving that line: if lines came back in one batch at the end, the task would
    # wait out its 60 s and report `acknowledged: False`. No wall-clock bound, so no flakiness
    # on a loaded machine. The echo job is ours, not candidate code: it runs unsandboxed so
    # that it can see the driver's file (the sandbox gives each job a private /tmp).
    ack = workspace / "first-line-arrived"
    arrived: list[str] = []

    def on_line(line: str) -> None:
        arrived.append(line)
        ack.touch()

    job = stage_job("echo", {"message": "tick", "repeat": 3, "interval_s": 0.2,
                             "await_file": str(ack), "await_s": 60})
    outcome = runtime.run(job, timeout=120, env={"KOPT_SANDBOX": "0"}, on_line=on_line)
    assert outcome.ok, outcome.output_tail
    assert arrived == ["echo: tick"] * 3  # each once, in order
    assert outcome.response["acknowledged"] is True
