"""A local worker started ahead of its job, so that the next job skips Python's start-up.

Importing torch and triton is most of a worker's fixed cost: on the H100 machine
(2026-11-23, benchmarks/overhead_gpu.py) 4.3-4.9 s of a 14 s candidate job and of a 13 s
reference job; 1.5 s on a 2-core CPU. When a local job ends, one `python -m kopt.harness.worker
--standby` is started with the same environment; it imports torch and triton and waits for a
job directory on stdin. The next job with that environment takes it (kopt's own `KOPT_*`
settings may differ: they travel with the job directory); any other starts cold. The standby
also imports torch._dynamo (1.8 s on a 2-core CPU), which every candidate job's launch counter
and dispatch modes load. The verifier prepares one, and the reference's isolated one, before it
draws its inputs (`LocalTarget.prepare`), so that both workers' imports overlap with the draws
and the candidate's with the reference run: a small `kopt verify` on the 2-core CPU went from
8.5-10.6 s to 5.7-6.1 s (2026-11-26, the candidate's standby), then from 7.7-8.1 s to 6.9-7.3 s
for layernorm_gelu (2026-11-27, both before the draws).

What a standby has done before its job: imported torch, dynamo and triton (and, for GPU jobs,
the modules the verifier's torch.compile draw loads: `worker.COMPILE_MODULES`) and forked the
candidate job's child ahead (`harness.jobs.early`: its imports, and on a GPU its CUDA
context and a first harness launch, made while it waits; ended unused by any other job),
nothing else; it has run no job, no candidate code, and has not initialised CUDA itself (one
that finds CUDA initialised leaves: `worker.fork_safe`). It is still a fresh process for the
job it runs. The verifier's reference job (`COLD_JOBS`) never takes this one: it runs in an
isolated interpreter (`python -I -S`, `local.isolated_worker_command`), taken from a second
standby of that kind (`local.ISOLATED`), prepared before the draws and again when a candidate
job ends (or started cold when none is ready): the same imports, and no candidate code run in
it, as `isolated_reference` says. `KOPT_WORKER_STANDBY=0`
turns standbys off; `KOPT_WORKER_STANDBY=N` keeps up to N waiting (the workbench keeps 2: a
saved edit's check runs a verification and then a timing job, and each finds one ready).

Inside the sandbox (harness.sandbox, bubblewrap) a process sees only the folders mounted when it
started, and the job directory does not exist yet then. So a sandboxed standby is started with
an empty folder reserved beside the last job's (`standby-*`) mounted as its job directory; the
job that takes it moves its staged files into that folder and the folder to the job's path (two
renames on one filesystem), and the standby is told the path it sees. What else the sandbox
mounts (the caches, the Python environment) must cover the job's, as the environment must match.

The process is started from one long-lived thread: a worker's death signal (PR_SET_PDEATHSIG)
fires when the *thread* that started it ends, and the job that takes a standby may run on
another thread long after the one that finished the previous job is gone.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kopt.harness import sandbox
from kopt.harness.worker import PARENT_ENV

COLD_JOBS = frozenset({"reference"})
"""Jobs that run in an isolated interpreter, never in the ordinary standby."""

ENV_SWITCH = "KOPT_WORKER_STANDBY"
READY_MARK = ".standby-ready"
READY_WAIT_S = 2.0
"""How long a job waits for a sandboxed standby started moments ago to be set up (it takes
milliseconds; a job arriving sooner would otherwise move its files before the mount)."""


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def depth() -> int:
    """How many standbys may wait at once: `KOPT_WORKER_STANDBY=N` (N >= 1), else 1."""
    value = os.environ.get(ENV_SWITCH, "1").strip()
    return max(1, int(value)) if value.isdigit() else 1


def standby_command() -> list[str]:
    return [sys.executable, "-m", "kopt.harness.worker", "--standby"]


_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kopt-standby-spawner")
"""The one long-lived thread that starts standby processes (see the module docstring)."""


def _fixed(env: dict[str, str]) -> dict[str, str]:
    """The part of a job's environment a standby must have been started with: everything but
    kopt's own settings (`KOPT_*`, read by harness code at job time, handed over with the job
    directory), except the parent's pid, which its death signal was set up for."""
    return {k: v for k, v in env.items() if not k.startswith("KOPT_") or k == PARENT_ENV}


SET_ON_IMPORT = frozenset({"TORCHINDUCTOR_CACHE_DIR"})
"""Variables that torch sets in a process's own environment to their default when it imports
dynamo (the parent does too, mid-verification; the standby did before its job): one side
without it runs with the same value as the side that has it."""


def _same_env(started: dict[str, str], job: dict[str, str]) -> bool:
    """Whether a standby started with `started` may run a job that needs `job`."""
    a, b = _fixed(started), _fixed(job)
    for key in SET_ON_IMPORT:
        if (key in a) != (key in b):
            a.pop(key, None)
            b.pop(key, None)
    return a == b


def _late(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("KOPT_") and k != PARENT_ENV}


@dataclass
class _Waiting:
    """One started standby: its process and what it was started with."""

    proc: subprocess.Popen[str]
    env: dict[str, str]
    mounts: tuple[object, ...]
    how: str
    """The sandbox mechanism it was started in (harness.sandbox.wrap)."""
    reserved: Path | None
    """The empty folder a sandboxed standby sees as its job directory (None unsandboxed)."""


class Standby:
    """Waiting worker processes of one kopt process, keyed by their environment: at most
    `depth()` of them (`KOPT_WORKER_STANDBY=N`, default 1; the workbench keeps 2, so that a
    saved edit's verification and its timing each find one ready), or `most`; `command` makes
    their argv (`standby_command`, or an isolated interpreter's)."""

    def __init__(self, command: Callable[[], list[str]] = standby_command, *,
                 most: int | None = None) -> None:
        self._command = command
        self._most = most
        """At most this many waiting, whatever `depth()` says (None: `depth()`)."""
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []

    def _depth(self) -> int:
        return self._most if self._most is not None else depth()

    def keep(self, most: int) -> None:
        """Keep up to `most` waiting from now on, whatever `depth()` says (`kopt serve`: two
        reference interpreters, so that a verification typed right after another finds one
        that has finished its imports)."""
        self._most = max(1, most)

    def waiting(self) -> list[subprocess.Popen[str]]:
        """The waiting processes, oldest first."""
        with self._lock:
            return [w.proc for w in self._waiting]

    def take(self, env: dict[str, str], job_dir: Path | None = None) -> subprocess.Popen[str] | None:
        """The oldest waiting process, handed `job_dir` if given, when it was started with `env`
        (kopt's own settings aside) and sandbox mounts covering the job's and is alive; else None.
        Mismatched or dead ones met on the way are discarded."""
        while True:
            with self._lock:
                if not self._waiting:
                    return None
                w = self._waiting.pop(0)
            if (not _same_env(w.env, env) or w.proc.poll() is not None
                    or not sandbox.covers(w.mounts, sandbox.mounts_key(env))):
                discard(w.proc, w.reserved)
                continue
            if job_dir is None:
                return w.proc
            seen = str(Path(job_dir).resolve())
            if w.reserved is not None:
                if not _wait_ready(w.reserved) or not adopt(w.reserved, Path(job_dir)):
                    discard(w.proc, w.reserved)
                    return None
                seen = str(w.reserved)  # where the sandbox mounted it
            given = env
            if w.how in ("bwrap", "unshare"):  # the worker resets KOPT_* to the job's: say it again
                given = {**env, sandbox.ACTIVE_ENV: w.how}
            return w.proc if hand_over(w.proc, seen, given) else None

    def prepare(self, env: dict[str, str], jobs_root: Path | None = None) -> None:
        """Start one standby for `env` unless as many as it keeps are waiting already (errors are
        ignored: the next job starts cold). `jobs_root`: where the next job directory will
        likely be (a sandboxed standby's reserved folder goes there: it must be on the same
        filesystem)."""
        if not enabled():
            return
        with self._lock:
            alive = [w for w in self._waiting if w.proc.poll() is None]
            gone = [w for w in self._waiting if w not in alive]
            self._waiting = alive
            full = len(alive) >= self._depth()
        for w in gone:
            discard(w.proc, w.reserved)
        if full:
            return
        reserved: Path | None = None
        argv = self._command()
        proc_env = env
        how = "off"
        try:
            if sandbox.mounts_key(env)[0] == "bwrap":
                root = Path(jobs_root) if jobs_root is not None else Path(tempfile.gettempdir())
                reserved = Path(tempfile.mkdtemp(prefix="standby-", dir=root))
                # the mark says the sandbox is set up (its reserved folder mounted): only then
                # may a job's files be moved in
                argv = ["/bin/sh", "-c", f': > {READY_MARK} && exec "$@"', "sh", *argv]
                argv, proc_env, how = sandbox.wrap(argv, env, reserved)
            elif sandbox.enabled(env):
                argv, proc_env, how = sandbox.wrap(argv, env, tempfile.gettempdir())
            proc = _SPAWNER.submit(
                subprocess.Popen, argv, cwd=tempfile.gettempdir(), env=proc_env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, errors="replace", start_new_session=True).result()
        except (OSError, RuntimeError):  # RuntimeError: the spawner is shut down (exiting)
            _remove(reserved)
            return
        with self._lock:
            self._waiting.append(_Waiting(proc, dict(env), sandbox.mounts_key(env), how, reserved))
            keep = self._depth()
            extra = self._waiting[:-keep] if len(self._waiting) > keep else []
            self._waiting = self._waiting[len(extra):]
        for w in extra:  # two threads prepared at once: the oldest go
            discard(w.proc, w.reserved)

    def clear(self) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for w in waiting:
            discard(w.proc, w.reserved)


def _wait_ready(reserved: Path, wait_s: float = READY_WAIT_S) -> bool:
    """Whether a sandboxed standby has mounted `reserved` (its mark is there; removed now)."""
    import time

    deadline = time.monotonic() + wait_s
    mark = reserved / READY_MARK
    while not mark.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    mark.unlink(missing_ok=True)
    return True


def adopt(reserved: Path, job_dir: Path) -> bool:
    """Move a staged job directory's files into `reserved` (the folder a sandboxed standby
    sees), then `reserved` to `job_dir`'s path, so the caller finds `out/` where it staged the
    job. False (with everything put back) when a rename fails, e.g. across filesystems."""
    moved: list[str] = []
    try:
        for entry in sorted(job_dir.iterdir()):
            entry.rename(reserved / entry.name)
            moved.append(entry.name)
        reserved.rename(job_dir)  # replaces the now empty job directory
        return True
    except OSError:
        for name in moved:
            try:
                (reserved / name).rename(job_dir / name)
            except OSError:
                pass
        return False


def _remove(folder: Path | None) -> None:
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def hand_over(proc: subprocess.Popen[str], job_dir: str, env: dict[str, str]) -> bool:
    """Give a waiting standby its job directory and the job's `KOPT_*` settings; False if it
    is gone."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"job_dir": job_dir, "env": _late(env)}) + "\n")
        proc.stdin.close()
        return True
    except (OSError, ValueError):
        discard(proc)
        return False


def kill_group(proc: subprocess.Popen[str], *, reap: bool = True) -> None:
    """SIGKILL a worker's whole session (it and anything it started) and reap it (`reap`
    False: reaped on a daemon thread, for a caller that need not wait for the exit)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not reap:
        threading.Thread(target=_reap, args=(proc,), daemon=True,
                         name="kopt-reap").start()
        return
    _reap(proc)


def _reap(proc: subprocess.Popen[str]) -> None:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def discard(proc: subprocess.Popen[str], reserved: Path | None = None) -> None:
    kill_group(proc)
    _remove(reserved)
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


STANDBY = Standby()
atexit.register(STANDBY.clear)  # no reserved folder left behind in .kopt/jobs
