"""kopt.harness.parallel.evaluate_many: slots, task order, re-queue of lost targets only."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kopt.harness.errors import TargetLost
from kopt.harness.parallel import Slot, evaluate_many
from kopt.harness.targets.base import WorkerOutcome


class FakeTarget:
    """A target with `gpus` slots that records what ran where and can be made to drop."""

    def __init__(self, name: str, gpus: int = 1, *, lose_after: int | None = None) -> None:
        self.name = name
        self.gpus = gpus
        self.lose_after = lose_after
        self.ran: list[int] = []
        self.busy: dict[str, int] = {}
        self.max_busy: dict[str, int] = {}
        self.lock = threading.Lock()

    def parallel_slots(self) -> list[Slot]:
        return [Slot(self, {"CUDA_VISIBLE_DEVICES": str(i)}, gpu=f"fake #{i}")
                for i in range(self.gpus)]

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: Any = None) -> WorkerOutcome:
        gpu = (env or {}).get("CUDA_VISIBLE_DEVICES", "-")
        task = int(job_dir.name)
        with self.lock:
            self.busy[gpu] = self.busy.get(gpu, 0) + 1
            self.max_busy[gpu] = max(self.max_busy.get(gpu, 0), self.busy[gpu])
            lost = self.lose_after is not None and len(self.ran) >= self.lose_after
            self.ran.append(task)
        try:
            time.sleep(0.02 * (task % 3))
            if lost:
                raise TargetLost(f"{self.name} dropped")
            return WorkerOutcome(0, False, {"ok": True, "task": task, "gpu_env": gpu},
                                 host=self.name)
        finally:
            with self.lock:
                self.busy[gpu] -= 1

    def describe(self) -> dict[str, Any]:
        return {"reachable": True}


def job(task: int) -> Any:
    def evaluate(target: Any) -> dict[str, Any]:
        outcome = target.run(Path(str(task)), timeout=10)
        return dict(outcome.response)
    return evaluate


def test_results_come_back_in_task_order_one_job_per_gpu() -> None:
    a, b = FakeTarget("a", gpus=2), FakeTarget("b", gpus=1)
    results = evaluate_many([job(i) for i in range(12)], [a, b])
    assert [r["task"] for r in results] == list(range(12))
    assert sorted(a.ran + b.ran) == list(range(12))
    assert max(a.max_busy.values()) == 1 and max(b.max_busy.values()) == 1
    assert set(a.max_busy) == {"0", "1"}  # both GPUs of `a` were used
    # provenance: which host and GPU produced each result
    for r in results:
        assert r["host"] in ("a", "b") and r["gpu"] == f"fake #{r['gpu_env']}"


def test_lost_target_work_is_requeued_elsewhere() -> None:
    flaky, steady = FakeTarget("flaky", gpus=2, lose_after=1), FakeTarget("steady")
    results = evaluate_many([job(i) for i in range(8)], [flaky, steady])
    assert [r["task"] for r in results] == list(range(8))
    assert all(r["host"] == "steady" or r["task"] == flaky.ran[0] for r in results)
    # the dropped one stopped taking work after it was lost
    assert len(flaky.ran) <= 3


def test_candidate_failure_is_not_requeued() -> None:
    target = FakeTarget("a", gpus=2)
    calls: list[int] = []

    def broken(t: Any) -> Any:
        calls.append(1)
        raise ValueError("candidate raised")

    other = FakeTarget("b")
    tasks = [job(0), broken, job(2)]
    with pytest.raises(ValueError, match="candidate raised"):
        evaluate_many(tasks, [target, other])
    assert len(calls) == 1
    assert sorted(target.ran + other.ran) == [0, 2]  # the others still ran, once each


def test_every_target_lost_is_one_error_naming_the_count() -> None:
    with pytest.raises(TargetLost, match="3 of 3 evaluations could not run"):
        evaluate_many([job(i) for i in range(3)], [FakeTarget("x", lose_after=0)])


def test_max_parallel_caps_concurrency_across_targets() -> None:
    a, b = FakeTarget("a", gpus=4), FakeTarget("b", gpus=4)
    seen: list[str] = []

    def tracking(i: int) -> Any:
        def evaluate(t: Slot) -> dict[str, Any]:
            seen.append(f"{t.name}:{t.env['CUDA_VISIBLE_DEVICES']}")
            return job(i)(t)
        return evaluate

    evaluate_many([tracking(i) for i in range(10)], [a, b], max_parallel=2)
    assert set(seen) == {"a:0", "b:0"}  # two slots, one per target (round-robin)


def test_slots_are_taken_as_they_are() -> None:
    a = FakeTarget("a", gpus=3)
    one = a.parallel_slots()[2]
    results = evaluate_many([job(i) for i in range(4)], [one])
    assert [r["task"] for r in results] == list(range(4))
    assert set(a.max_busy) == {"2"}  # only the slot given, not all of its target's GPUs
