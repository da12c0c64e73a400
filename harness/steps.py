"""Seconds per named step inside one worker job, carried home in the job's response (`steps`).

A run's breakdown (phases.breakdown) sums them per job kind, so that a slow kind of job says
which of its steps is slow (drawing inputs, CUDA's start, the first call with its Triton
compiles, the timed loop, the profiler, the supervisor's reference) instead of one total.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Steps:
    """`with steps("timing"): ...` adds the block's wall seconds under that name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def merge(self, other: dict[str, float] | None) -> None:
        """Add another clock's figures (a child process's, sent over its link)."""
        for name, seconds in (other or {}).items():
            if isinstance(seconds, int | float):
                self.add(str(name), float(seconds))

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.seconds.items()}
