"""The `local` target: a worker subprocess on this machine."""

from __future__ import annotations

import atexit
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from kopt.harness import sandbox
from kopt.harness.targets import standby
from kopt.harness.targets.base import LineSink, WorkerOutcome, read_response
from kopt.harness.worker import PARENT_ENV, STANDBY_FLAG


def _job_kind(job_dir: Path) -> str:
    try:
        return str(json.loads((Path(job_dir) / "request.json").read_text()).get("job", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def worker_command(job_dir: Path) -> list[str]:
    return [sys.executable, "-m", "kopt.harness.worker", str(job_dir)]


def isolated_worker_command(job_dir: Path | str) -> list[str]:
    """A worker in a clean interpreter (the verifier's reference): `-I` ignores PYTHON*
    variables, the user's site-packages and the current directory; `-S` skips `site`, so no
    `.pth` file runs. The package and the folders kopt itself imports from (its own
    `sys.path`: site-packages, the user's PYTHONPATH, folders that `.pth` files added when kopt
    started) are put on `sys.path` by hand, so nothing a `.pth` file planted since then runs,
    and the working directory is left out. `job_dir` may be the worker's `--standby` flag."""
    import site

    from kopt.harness.paths import import_root

    cwd = os.getcwd()
    paths = list(dict.fromkeys(
        [str(import_root())]
        + [p for p in [*sys.path, *site.getsitepackages()] if p and p != cwd and os.path.isdir(p)]))
    boot = (f"import sys; sys.path[:0] = {paths!r}; "
            "from kopt.harness.worker import main; raise SystemExit(main())")
    return [sys.executable, "-I", "-S", "-c", boot, str(job_dir)]


ISOLATED = standby.Standby(lambda: isolated_worker_command(STANDBY_FLAG), most=1)
"""The reference job's standby: an isolated interpreter that has imported torch and triton and
waits (prepared before a verification draws its inputs, and when its candidate job ends for the
process's next one: its reference finds the imports done, 1.5 s on a 2-core CPU, 4-5 s on an
H100 machine)."""
atexit.register(ISOLATED.clear)


HEAP_REUSE = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
"""glibc's malloc in a worker: blocks under 1 GiB from the heap, and freed heap kept. A job
moves each input and output (134 MB for a 16384x4096 bf16 tensor) through several fresh
buffers (the link's frames, safetensors' bytes, the device-to-host copy); by default each is a
fresh mmap whose pages fault in one by one. Kept heap pages are reused: a round trip of 2x134 MB
through the supervisor's link went from 0.39 s to 0.14 s on a 2-core CPU (2026-11-28). A
worker is one job long, so what the heap keeps is returned when it exits. The user's own
settings win."""


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: ours, with the package importable, no API key, and glibc's
    heap reused for the large buffers of a job (`HEAP_REUSE`)."""
    env = dict(os.environ)
    for secret in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        env.pop(secret, None)
    for key, value in HEAP_REUSE.items():
        env.setdefault(key, value)
    from kopt.harness.paths import import_root

    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(import_root()), env.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class LocalTarget:
    """Runs each job in a fresh `python -m kopt.harness.worker` process, in its own session so
    that a timeout kills the whole process group (threads, children, everything). The process
    may have been started ahead of the job with torch and triton imported and nothing else
    done (harness.targets.standby); the verifier's reference job runs in an isolated
    interpreter, cold or from `ISOLATED`. Every worker, standby or cold, runs inside the sandbox
    (harness.sandbox) unless it is off."""

    name = "local"
    use_standby = True
    """False inside a Ray task: its worker process is shared between tasks and may be killed
    to re-queue one; a standby there would only hold memory on a cluster node. A class
    default too, so that subclasses that set up their own state without calling
    `__init__` (tests' flaky and gated targets) keep working."""

    def __init__(self, *, standby: bool = True) -> None:
        self.use_standby = standby

    def prepare(self, env: dict[str, str] | None = None, jobs_root: Path | None = None) -> None:
        """Start the standbys for a verification's jobs with `env` now (harness.targets.standby),
        so that their imports overlap with work the caller does first: the verifier calls this
        before it draws its inputs, so the reference job's isolated interpreter (`ISOLATED`) and
        the candidate job's worker import torch, dynamo and triton side by side while the draws
        are made, instead of one after the other (a single `kopt verify` process otherwise paid
        the reference's imports after its draws). A no-op when standbys are off."""
        if self.use_standby:
            full_env = {**worker_env(env), PARENT_ENV: str(os.getpid())}
            ISOLATED.prepare(full_env, jobs_root)
            standby.STANDBY.prepare(full_env, jobs_root)

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: LineSink | None = None) -> WorkerOutcome:
        tail: deque[str] = deque(maxlen=60)
        start = time.monotonic()
        start_wall = time.time()
        full_env = {**worker_env(env), PARENT_ENV: str(os.getpid())}
        job_dir = Path(job_dir).resolve()
        kind = _job_kind(job_dir)
        isolated = kind in standby.COLD_JOBS
        proc = None
        if self.use_standby:
            pool = ISOLATED if isolated else standby.STANDBY
            proc = pool.take(full_env, job_dir)
            if full_env.get("TRITON_INTERPRET") != "1":
                # On a GPU host the next job's worker (and, from a run's first job on, the
                # reference's isolated one) imports now, beside this job: started after it,
                # an H100 run waited ~20 s for them (2026-11-28, `waiting for the worker`).
                # Under the CPU interpreter the cores are the job's: a standby starts after it.
                pool.prepare(full_env, job_dir.parent)
                if not isolated:
                    ISOLATED.prepare(full_env, job_dir.parent)
        if proc is None:
            command = isolated_worker_command(job_dir) if isolated else worker_command(job_dir)
            argv, proc_env, _how = sandbox.wrap(command, full_env, job_dir)
            proc = subprocess.Popen(
                argv, cwd=str(job_dir), env=proc_env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                text=True, errors="replace", start_new_session=True,
            )

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip("\n"))
                if on_line is not None:
                    on_line(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = answered = False
        try:
            if isolated:
                answered = _wait_for_response(proc, job_dir, timeout)
            else:
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # Ctrl-C in the parent: take the worker down with us
            standby.kill_group(proc)
            raise
        finally:
            # also reaps anything the job left running; a reference that has answered is
            # reaped in the background (its CUDA context's release: 0.13-0.17 s on an H200)
            standby.kill_group(proc, reap=not answered)
        exited_wall = time.time()
        if not answered:
            reader.join(timeout=5)
        if self.use_standby and not timed_out:  # the next job skips the imports (standby.py)
            standby.STANDBY.prepare(full_env, job_dir.parent)
            if kind == "candidate":  # a verification ended: another may follow
                ISOLATED.prepare(full_env, job_dir.parent)
        returncode = 0 if answered else proc.returncode  # answered: its exit is its own
        if returncode is not None and returncode > 128 and sandbox.mounts_key(full_env)[0] == "bwrap":
            returncode = 128 - returncode  # bwrap exits 128+N for a worker killed by signal N
        response = read_response(job_dir)
        _clock_the_edges(response, start_wall, exited_wall)
        return WorkerOutcome(
            returncode=None if timed_out else returncode,
            timed_out=timed_out,
            response=response,
            output_tail="\n".join(tail),
            host=platform.node() or "local",
            elapsed_s=time.monotonic() - start,
        )

    def describe(self) -> dict[str, Any]:
        from kopt.harness.environment import describe_environment

        return describe_environment()


def _wait_for_response(proc: subprocess.Popen[str], job_dir: Path, timeout: float) -> bool:
    """Until the worker exits (False) or its response is in place (True: written last, by
    rename, after its outputs), within `timeout` (else `TimeoutExpired`). Only for the
    reference's isolated worker, which runs no candidate code: what it does after answering
    is its own exit, which need not hold up the candidate's job. A candidate's worker is
    always waited for to its end (work left running after its answer is refused)."""
    response = job_dir / "out" / "response.json"
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(timeout=0.01)
            return False
        except subprocess.TimeoutExpired:
            if response.is_file():
                return True
            if time.monotonic() > deadline:
                raise


def _clock_the_edges(response: dict[str, Any] | None, start_wall: float,
                     exited_wall: float) -> None:
    """Two steps no job can clock itself, added to its `steps` (harness.steps): the wait for
    a worker to take the job (a standby still importing, or a cold start), and the time from
    its response to its process's end (the kernel releasing a CUDA context)."""
    if not isinstance(response, dict) or not isinstance(response.get("steps"), dict):
        return
    given, responded = response.get("given_at"), response.get("responded_at")
    if isinstance(given, int | float):
        response["steps"]["waiting for the worker"] = round(max(0.0, given - start_wall), 4)
    if isinstance(responded, int | float):
        response["steps"]["process exit"] = round(max(0.0, exited_wall - responded), 4)
