"""Evaluate many candidates at once across targets: one evaluation per GPU at a time.

`evaluate_many(tasks, targets)` runs each task (`Callable[[Target], T]`, e.g. a closure over
`measure_variant(..., target=t)`) on a free *slot*: one per GPU of each target (a local or
ssh target with 4 GPUs gives 4 slots, each pinned to its GPU with `CUDA_VISIBLE_DEVICES`;
a Ray target gives one per GPU in the cluster and lets Ray place them; a CPU-only target
gives one). Results come back in task order whatever order they finished in.

A task that raises `TargetLost` (the connection dropped, the node or Ray worker died) was not
the candidate's fault: it is re-queued on another target and the lost target takes no more
work. Any other failure is the task's own result or error and is not retried.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kopt.harness.errors import TargetLost
from kopt.harness.targets.base import LineSink, Target, WorkerOutcome

T = TypeVar("T")


@dataclass
class Slot:
    """One GPU (or one CPU-only target) that runs one evaluation at a time.

    Passed to tasks in place of the target: it runs jobs on that target with the slot's
    environment (`CUDA_VISIBLE_DEVICES`) added."""

    target: Target
    env: dict[str, str] = field(default_factory=dict)
    gpu: str | None = None
    """The GPU's name (and index) where known: results carry it so that timings from
    different GPUs are never read as one series."""

    @property
    def name(self) -> str:
        return self.target.name

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: LineSink | None = None) -> WorkerOutcome:
        return self.target.run(job_dir, timeout=timeout, env={**(env or {}), **self.env},
                               on_line=on_line)

    def describe(self) -> dict[str, Any]:
        return self.target.describe()

    def __getattr__(self, attr: str) -> Any:  # start/attach/cancel of ssh targets, etc.
        if attr.startswith("__") or attr in ("target", "env", "gpu"):
            raise AttributeError(attr)
        return getattr(self.target, attr)


def slots_of(target: Target | Slot) -> list[Slot]:
    """The target's slots: its own `parallel_slots()` if it has one, else one per local GPU
    for the local target, else one. A slot is its own only slot."""
    if isinstance(target, Slot):
        return [target]
    own = getattr(target, "parallel_slots", None)
    if callable(own):
        return list(own())
    if target.name == "local":
        import torch

        if torch.cuda.is_available():
            return [Slot(target, {"CUDA_VISIBLE_DEVICES": str(i)},
                         gpu=f"{torch.cuda.get_device_name(i)} #{i}")
                    for i in range(torch.cuda.device_count())]
    return [Slot(target)]


def gpu_model(slot: Slot) -> str | None:
    """The slot's GPU model without its index (`NVIDIA H100 80GB HBM3 #3` -> `NVIDIA H100 80GB
    HBM3`); None on a CPU-only target. Timings compare only between slots of one model."""
    return slot.gpu.rsplit(" #", 1)[0] if slot.gpu else None


def evaluate_many(tasks: Sequence[Callable[[Any], T]],
                  targets: Sequence[Target | Slot] | Target | Slot, *,
                  max_parallel: int | None = None,
                  max_attempts: int | None = None) -> list[T]:
    """Run every task on some target's free slot; results in task order.

    `targets` may also be slots (as `slots_of` made them): they are used as they are.
    A task's `TargetLost` re-queues it elsewhere (up to `max_attempts`, default: once per
    target); its other exceptions are re-raised after every task has finished. Dict results
    get `host` and `gpu` keys (where the task did not set them)."""
    if not isinstance(targets, Sequence):
        targets = [targets]
    slots = slots_for(targets, max_parallel=max_parallel)
    attempts_allowed = max_attempts or len(targets) + 1
    return _Scheduler(list(tasks), slots, attempts_allowed).run()


def slots_for(targets: Sequence[Target | Slot], *, max_parallel: int | None = None) -> list[Slot]:
    """Every slot of `targets` (at most `max_parallel`, spread over the targets), the first
    target's first."""
    if not targets:
        raise ValueError("evaluate_many needs at least one target")
    slots = [slot for target in targets for slot in slots_of(target)]
    return _spread(slots, max(1, max_parallel)) if max_parallel is not None else slots


def _spread(slots: list[Slot], limit: int) -> list[Slot]:
    """At most `limit` slots, taken round-robin over targets so each target gets work."""
    by_target: dict[int, deque[Slot]] = {}
    for slot in slots:
        by_target.setdefault(id(slot.target), deque()).append(slot)
    chosen: list[Slot] = []
    while len(chosen) < limit and any(by_target.values()):
        for queue in by_target.values():
            if queue and len(chosen) < limit:
                chosen.append(queue.popleft())
    return chosen


class _Scheduler:
    """Slots pull tasks from one queue; a lost target's tasks go back to its front."""

    def __init__(self, tasks: list[Callable[[Any], Any]], slots: list[Slot],
                 attempts_allowed: int) -> None:
        self.tasks, self.slots = tasks, slots
        self.pending: deque[int] = deque(range(len(tasks)))
        self.results: list[Any] = [None] * len(tasks)
        self.errors: dict[int, BaseException] = {}
        self.attempts = [0] * len(tasks)
        self.attempts_allowed = attempts_allowed
        self.in_flight = 0
        self.lost: dict[int, TargetLost] = {}
        self.cond = threading.Condition()

    def run(self) -> list[Any]:
        threads = [threading.Thread(target=self._serve, args=(slot,), daemon=True,
                                    name=f"kopt-slot-{i}") for i, slot in enumerate(self.slots)]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)  # wakes for Ctrl-C
        if self.pending:
            last = next(iter(self.lost.values()), None)
            raise TargetLost(f"{len(self.pending)} of {len(self.tasks)} evaluations could not run: "
                             f"every target was lost ({last.message if last else 'no target'})",
                             fix="check the targets with `kopt targets` and run again")
        for index in sorted(self.errors):
            raise self.errors[index]
        return self.results

    def _next(self, slot: Slot) -> int | None:
        with self.cond:
            while True:
                if id(slot.target) in self.lost:
                    return None
                if self.pending:
                    self.in_flight += 1
                    return self.pending.popleft()
                if self.in_flight == 0:
                    return None  # nothing left and nothing that could come back
                self.cond.wait()

    def _serve(self, slot: Slot) -> None:
        while (index := self._next(slot)) is not None:
            self.attempts[index] += 1
            try:
                result = self.tasks[index](slot)
            except TargetLost as err:
                with self.cond:
                    self.in_flight -= 1
                    self.lost[id(slot.target)] = err
                    if self.attempts[index] >= self.attempts_allowed:
                        self.errors[index] = err
                    else:
                        self.pending.appendleft(index)
                    if all(id(s.target) in self.lost for s in self.slots):
                        # nobody is left to take the re-queued work: stop waiting for it
                        self.cond.notify_all()
                    self.cond.notify_all()
                return
            except BaseException as err:  # the task's own failure: reported, not retried
                self.errors[index] = err
            else:
                if isinstance(result, dict):
                    result.setdefault("host", slot.name)
                    result.setdefault("gpu", slot.gpu)
                self.results[index] = result
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()
