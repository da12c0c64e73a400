"""The GPU gate: a timing has the GPU to itself while everything else shares it.

A suite runs several problems at once on one GPU. Their verifications may overlap (their
kernels only need to be right), but a timed call must not overlap another process's kernels,
or the figures are not believable. The gate is a readers-writer lock between processes, two
files locked with `flock` in a folder named by `KOPT_GPU_GATE`:

- a *shared* holder (a verification, held by the suite's thread for the whole
  `verify_candidate`) locks `lock` shared;
- an *exclusive* holder (the timed loop of a bench, tune or ceilings measurement, held by the
  worker only around `time_callable`, never around imports, compiles or the first call) locks
  `lock` exclusively.

Both first take `turn` exclusively (the turnstile): a timing waiting for the GPU holds it, so
no new verification starts until the timing has had its turn (no writer starvation), and
waiting timings take turns. Without `KOPT_GPU_GATE` (`kopt bench`, `kopt run`: one job at a
time) every window is a no-op.

Why: before the gate the suite held the GPU exclusively for a problem's whole region choice
and timing (worker start-up, torch.compile, Triton compiles: 40-100 s per problem on a 4x H200
host, 2026-11-27), and every other problem's verification waited behind it.

A candidate's own process never touches the gate: its supervisor takes the window on the
child's request (`harness.jobs.bench`; once at a time), and the sandbox shows the folder
read-only. A child that asks and never says it is done holds the GPU until its job ends (the
job's timeout): it can delay other problems, not change their figures.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

ENV = "KOPT_GPU_GATE"
"""The gate's folder; unset or empty: no gate."""
_LOCK, _TURN = "lock", "turn"


class GpuGate:
    """The gate in `folder` (created with its two files when missing)."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)

    def create(self) -> GpuGate:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in (_LOCK, _TURN):
            (self.folder / name).touch()
        return self

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        # read-only descriptors: flock needs no write access, and the sandbox shows the
        # folder read-only to workers
        turn = os.open(self.folder / _TURN, os.O_RDONLY | os.O_CLOEXEC)
        lock = os.open(self.folder / _LOCK, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)
            try:
                fcntl.flock(lock, mode)
            finally:
                if mode == fcntl.LOCK_SH:  # a reader lets the next one in at once
                    fcntl.flock(turn, fcntl.LOCK_UN)
            yield
        finally:
            os.close(lock)  # closing releases the locks
            os.close(turn)

    def shared(self) -> AbstractContextManager[None]:
        """Work that may overlap other shared work but no timing (a verification)."""
        return self._locked(fcntl.LOCK_SH)

    def exclusive(self) -> AbstractContextManager[None]:
        """The GPU alone: waits for the shared holders in flight; new ones wait for it."""
        return self._locked(fcntl.LOCK_EX)


def from_env(env: dict[str, str] | None = None) -> GpuGate | None:
    folder = (os.environ if env is None else env).get(ENV, "")
    return GpuGate(folder) if folder and (Path(folder) / _LOCK).exists() else None


def timing_window() -> AbstractContextManager[None]:
    """Around a timed loop in a trusted process: the GPU alone when a gate is set."""
    gate = from_env()
    return gate.exclusive() if gate else nullcontext()


def shared_window() -> AbstractContextManager[None]:
    """Around work that may share the GPU with other such work (a verification)."""
    gate = from_env()
    return gate.shared() if gate else nullcontext()


def exclusive_window() -> AbstractContextManager[None]:
    """The GPU alone from a trusted process (a verification re-run after running out of
    memory beside others); the workers it starts must not take the gate themselves."""
    gate = from_env()
    return gate.exclusive() if gate else nullcontext()


def visible_paths(env: dict[str, str]) -> list[str]:
    """What a sandboxed worker started with `env` must see (read-only) to use the gate."""
    gate = from_env(env)
    return [str(gate.folder.resolve())] if gate else []
