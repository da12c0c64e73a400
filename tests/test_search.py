"""The accelerator's coordinate search (phases/search.py) on a synthetic timing model."""

from __future__ import annotations

import math
from typing import Any

from kopt.phases.search import CoordinateSearch

SPACE = {f"_k{i}/{p}": list(v) for i in range(3) for p, v in
         (("BLOCK_SIZE", [256, 512, 1024, 2048, 4096]), ("num_warps", [1, 2, 4, 8, 16, 32]))}
BEST = {"_k0": (1024, 4), "_k1": (4096, 8), "_k2": (256, 32)}


def model_ms(config: dict[str, Any]) -> float:
    """Independent kernels: each costs more the further (in log2) it is from its best."""
    total = 0.0
    for k, (block, warps) in BEST.items():
        total += 1.0 + 0.2 * abs(math.log2(config[f"{k}/BLOCK_SIZE"] / block)) \
            + 0.1 * abs(math.log2(config[f"{k}/num_warps"] / warps))
    return total


def rows(configs: list[dict[str, Any]], what: str, calls: list[tuple[str, int]]
         ) -> list[dict[str, Any]]:
    calls.append((what, len(configs)))
    return [{"checked": True, "median_ms": model_ms(c), "p20_ms": model_ms(c) * 0.995,
             "p80_ms": model_ms(c) * 1.005, "detail": "output matches"} for c in configs]


def test_each_kernel_is_tuned_on_its_own_and_the_search_finds_every_best() -> None:
    calls: list[tuple[str, int]] = []
    logs: list[str] = []
    search = CoordinateSearch(SPACE, lambda c, w: rows(c, w, calls), max_trials=60,
                              log=logs.append)
    default = {k: v[0] for k, v in SPACE.items()}
    start, row = search.start([("default", default)])
    best, _ = search.run(start, row)
    keep, keep_row = search.joint_check(default, best)
    assert keep == best and keep_row is not None
    for k, (block, warps) in BEST.items():
        assert (best[f"{k}/BLOCK_SIZE"], best[f"{k}/num_warps"]) == (block, warps)
    product = math.prod(len(v) for v in SPACE.values())
    assert product == 27000 and len(search.trials) < 40
    # progress lines name the kernel and the dimension being tuned
    assert any(line.startswith("tuning _k1 BLOCK_SIZE: from 256") for line in logs)
    assert {(s["kernel"], s["param"]) for s in search.steps} >= {
        (k, p) for k in BEST for p in ("BLOCK_SIZE", "num_warps")}
    assert calls[-1] == ("joint check", 2)


def test_first_steps_of_every_dimension_share_one_job() -> None:
    """Six dimensions already at their best: one sweep job times every first step and the
    pass costs no further job; where one dimension gains, only its walk adds jobs."""
    best = {k: v for k, v in zip(("_k0", "_k1", "_k2"), ((512, 4), (512, 4), (512, 4)), strict=True)}

    def at(config: dict[str, Any], better: dict[str, Any]) -> float:
        return sum(1.0 + 0.2 * abs(math.log2(config[f"{k}/BLOCK_SIZE"] / b))
                   + 0.1 * abs(math.log2(config[f"{k}/num_warps"] / w)) for k, (b, w) in better.items())

    # one dimension gains: its walk times 2048 and 4096 in a job each (1024 was swept), and
    # the second pass (the first moved) is one more sweep that finds nothing
    for target, jobs in ((best, 2), ({**best, "_k1": (2048, 4)}, 5)):
        calls: list[tuple[str, int]] = []

        def timer(configs: list[dict[str, Any]], what: str, calls=calls, target=target):
            calls.append((what, len(configs)))
            return [{"checked": True, "median_ms": at(c, target), "p20_ms": at(c, target),
                     "p80_ms": at(c, target)} for c in configs]

        search = CoordinateSearch(SPACE, timer, max_trials=40)
        start = {f"{k}/BLOCK_SIZE": 512 for k in BEST} | {f"{k}/num_warps": 4 for k in BEST}
        first, row = search.start([("default", start)])
        found, _ = search.run(first, row)
        assert calls[1] == ("sweep", 12)  # two neighbours of each of six dimensions
        assert len(calls) == jobs, calls
        assert (found["_k1/BLOCK_SIZE"], found["_k1/num_warps"]) == target["_k1"]


def test_a_dimension_stops_when_a_step_gains_under_the_noise() -> None:
    space = {"BLOCK": [1, 2, 4, 8, 16]}
    ms = {1: 1.0, 2: 0.8, 4: 0.795, 8: 0.5, 16: 0.4}  # 2 -> 4 gains 0.6%: under the 2% noise
    calls: list[tuple[str, int]] = []

    def timer(configs: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        calls.append((what, len(configs)))
        return [{"checked": True, "median_ms": ms[c["BLOCK"]], "p20_ms": ms[c["BLOCK"]],
                 "p80_ms": ms[c["BLOCK"]]} for c in configs]

    search = CoordinateSearch(space, timer, max_trials=20)
    start, row = search.start([("default", {"BLOCK": 1})])
    best, _ = search.run(start, row)
    assert best == {"BLOCK": 2}  # never reaches 8 and 16: the walk stopped at 4
    assert search.steps[0]["stopped"] == "4 gains under the timer's noise"
    assert {c["config"]["BLOCK"] for c in search.trials} == {1, 2, 4}


def test_a_stale_remembered_start_loses_to_the_default_when_it_is_slower() -> None:
    space = {"BLOCK": [1, 2, 4]}
    ms = {1: 1.0, 2: 1.5, 4: 2.0}

    def timer(configs: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        return [{"checked": True, "median_ms": ms[c["BLOCK"]]} for c in configs]

    search = CoordinateSearch(space, timer, max_trials=20)
    start, row = search.start([("default", {"BLOCK": 1}), ("remembered", {"BLOCK": 4})])
    assert start == {"BLOCK": 1} and row["median_ms"] == 1.0
    assert [t["config"]["BLOCK"] for t in search.trials] == [1, 4]  # both re-timed


def test_kopt_memory_lists_and_clears(workspace, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from kopt.phases import tuning_memory

    source = "import triton\n@triton.jit\ndef _g3_k(x_ptr, N: 'tl.constexpr'):\n    pass\n"
    renamed = source.replace("_g3_k", "_g0_other")
    pattern = tuning_memory.kernel_pattern(source, "_g3_k")
    assert pattern == tuning_memory.kernel_pattern(renamed, "_g0_other")  # not its name
    assert pattern != tuning_memory.kernel_pattern(source.replace("pass", "return"), "_g3_k")
    assert tuning_memory.shape_bucket([[37, 123], [123]]) == "64x128,128"
    tuning_memory.remember("NVIDIA H100 80GB HBM3", pattern, "64x128", {
        "config": {"BLOCK_SIZE": 128, "num_warps": 4}, "median_ms": 0.012, "commit": "a" * 40,
        "case": "c", "kernel": "_g3_k"})
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "KOPT_HOME": str(workspace), "PYTHONPATH": str(root)}

    def kopt(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "kopt", "memory", *args, "--json"],
                             cwd=workspace, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    [entry] = kopt()["entries"]
    assert entry["config"] == {"BLOCK_SIZE": 128, "num_warps": 4}
    assert entry["gpu"] == "NVIDIA H100 80GB HBM3" and entry["bucket"] == "64x128"
    assert (workspace / ".kopt/tuning/NVIDIA_H100_80GB_HBM3.json").is_file()
    assert kopt("--clear")["cleared"] == 1
    assert kopt()["entries"] == []
