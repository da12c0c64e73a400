"""The GPU gate (harness.gpu_gate): timed calls never overlap a verification, a waiting timing
goes before verifications that arrive after it, and a bench worker's timed loop (a trusted
baseline's and a candidate's, through its supervisor) waits at the gate."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kopt.harness import gpu_gate
from kopt.harness.gpu_gate import GpuGate

CORPUS = Path(__file__).parent / "corpus"


def test_a_timing_never_overlaps_a_verification(tmp_path: Path) -> None:
    gate, log = GpuGate(tmp_path / "gate").create(), []

    def verify(i: int) -> None:
        with gate.shared():
            log.append(("verify", i, "start"))
            time.sleep(0.2)
            log.append(("verify", i, "end"))

    def timing() -> None:
        time.sleep(0.05)
        with gate.exclusive():
            log.append(("time", 0, "start"))
            time.sleep(0.1)
            log.append(("time", 0, "end"))

    threads = [threading.Thread(target=verify, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=timing)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    late = threading.Thread(target=verify, args=(2,))  # arrives while the timing waits
    late.start()
    for t in [*threads, late]:
        t.join()
    start, end = log.index(("time", 0, "start")), log.index(("time", 0, "end"))
    assert end == start + 1  # nothing ran while it timed
    assert all(e in log[:start] for e in [("verify", 0, "end"), ("verify", 1, "end")])
    assert log.index(("verify", 2, "start")) > end  # a waiting timing goes first


def test_verifications_overlap_each_other(tmp_path: Path) -> None:
    gate, inside, most = GpuGate(tmp_path / "gate").create(), [0], [0]
    lock = threading.Lock()

    def verify() -> None:
        with gate.shared():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=verify) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 3


def test_another_process_waits_for_the_gate(tmp_path: Path) -> None:
    gate = GpuGate(tmp_path / "gate").create()
    code = ("import time, sys; from kopt.harness import gpu_gate; t = time.monotonic(); "
            "w = gpu_gate.timing_window(); w.__enter__(); print(time.monotonic() - t)")
    env = {**os.environ, gpu_gate.ENV: str(gate.folder)}
    with gate.shared():
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                text=True)
        time.sleep(1.5)
        assert proc.poll() is None  # still waiting while a verification holds the GPU
    out, _ = proc.communicate(timeout=60)
    assert float(out) >= 1.0


def test_without_a_gate_every_window_is_free(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.delenv(gpu_gate.ENV, raising=False)
    assert gpu_gate.from_env() is None
    with gpu_gate.timing_window(), gpu_gate.shared_window(), gpu_gate.exclusive_window():
        pass
    # a folder that is not a gate (no lock file) is no gate either
    monkeypatch.setenv(gpu_gate.ENV, str(tmp_path))
    assert gpu_gate.from_env() is None and gpu_gate.visible_paths(dict(os.environ)) == []


def _waiters(path: Path) -> int:
    """Blocked flock requests on `path` (Linux /proc/locks: "N: -> FLOCK ... MAJ:MIN:INODE")."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return sum(1 for line in f if "->" in line and f":{inode} " in line)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_bench_workers_take_the_gate_around_their_timed_calls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate held elsewhere: the eager worker, then the candidate's supervisor, wait at it
    (the test sees each blocked request), and both rows are timed once it is let go."""
    from kopt.harness.bench import bench_case

    gate = GpuGate(tmp_path / "gate").create()
    monkeypatch.setenv("KOPT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "home" / "cache"))
    monkeypatch.setenv(gpu_gate.ENV, str(gate.folder))
    waited: list[int] = []
    rows: list[dict] = []

    def bench() -> None:
        rows.extend(bench_case(CORPUS / "cases" / "ln_gelu_small",
                               [CORPUS / "honest" / "layernorm_gelu.py"], device="cpu",
                               unverified=True, baselines=("eager",), timeout=240,
                               timing_options={"max_iters": 3, "max_seconds": 0.5}))

    worker = threading.Thread(target=bench)
    for _ in range(2):  # the eager job, then the candidate's
        with gate.exclusive():
            if not worker.is_alive() and not rows:
                worker.start()
            deadline = time.monotonic() + 200
            while not _waiters(gate.folder / "turn") and time.monotonic() < deadline:
                time.sleep(0.1)
            waited.append(_waiters(gate.folder / "turn"))
        time.sleep(0.5)  # the waiting job takes the gate before this loop asks again
    worker.join(timeout=240)
    assert waited == [1, 1]
    assert [r["variant"] for r in rows] == ["eager", "layernorm_gelu"]
    assert all(r["median_ms"] for r in rows), rows
