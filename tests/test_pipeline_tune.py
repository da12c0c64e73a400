"""The accelerator's tune job on the real harness (CPU interpreter, a tiny case): every trial
timed in one worker, a trial with wrong output caught by the cheap check."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from kopt.harness.case import Case, load_case
from kopt.harness.paths import bundled_cases_dir
from kopt.harness.tolerance import default_tolerance
from kopt.harness.tune import _judge, time_trials
from kopt.phases.accelerator import apply_config, search_space
from kopt.phases.engineers.offline import generate_candidate

WRONG = """
class ModelNew(_Right):
    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs) * 1.5
"""
KILLER = """
class ModelNew(_Right):
    def forward(self, *args, **kwargs):
        import os
        os._exit(3)
"""


def _tiny_case(workspace: Path) -> Case:
    case_dir = workspace / "cases" / "lg_tiny"
    shutil.copytree(bundled_cases_dir() / "layernorm_gelu", case_dir)
    text = (case_dir / "manifest.yaml").read_text()
    text = text.replace("name: layernorm_gelu", "name: lg_tiny").replace("4096", "64") \
        .replace("16384", "32").replace("[1000,", "[7,")
    (case_dir / "manifest.yaml").write_text(text)
    return load_case(str(case_dir))


def test_time_trials_times_every_config_in_one_job_and_catches_a_wrong_output(
        workspace: Path) -> None:
    case = _tiny_case(workspace)
    source = generate_candidate(case, input_set="main").source
    style, space, default = search_space(source, None)
    assert style == "config" and space
    files = []
    other = {k: next((v for v in vals if v != default[k]), default[k]) for k, vals in space.items()}
    for i, config in enumerate([default, other]):
        f = workspace / f"trial-{i}.py"
        f.write_text(apply_config(source, style, config))
        files.append(f)
    wrong = workspace / "trial-wrong.py"
    wrong.write_text(source.replace("ModelNew", "_Right") + WRONG)
    files.append(wrong)
    missing = workspace / "trial-broken.py"
    missing.write_text("raise RuntimeError('no kernel here')\n")
    files.append(missing)
    results = time_trials(case, files, device="cpu", input_set="main", budget_s=60,
                          timing_options={"max_seconds": 0.5, "max_iters": 3, "min_iters": 2})
    assert [r["checked"] for r in results] == [True, True, False, False]
    assert all(r["median_ms"] and r["median_ms"] > 0 for r in results[:3])
    assert "wrong output" in results[2]["detail"]
    assert not results[3]["ok"] and "no kernel here" in results[3]["detail"]


def test_a_trial_that_kills_its_worker_fails_alone_and_the_rest_are_timed(
        workspace: Path) -> None:
    """Trials are compiled in one pass and timed in another (the GPU gate's one window): a
    trial that kills the worker while it is compiled is failed by name, and the trials
    before and after it are timed in a fresh worker."""
    case = _tiny_case(workspace)
    source = generate_candidate(case, input_set="main").source
    files = [workspace / f"trial-{i}.py" for i in range(3)]
    files[0].write_text(source)
    files[1].write_text(source.replace("ModelNew", "_Right") + KILLER)
    files[2].write_text(source)
    results = time_trials(case, files, device="cpu", input_set="main", budget_s=60,
                          timing_options={"max_seconds": 0.5, "max_iters": 3, "min_iters": 2})
    assert [r["checked"] for r in results] == [True, False, True]
    assert "the worker died in this trial" in results[1]["detail"]


def _tolerances() -> dict[torch.dtype, Any]:
    return {torch.float32: default_tolerance(torch.float32)}


def test_a_trial_whose_output_cancels_to_near_zero_is_checked_as_the_verifier_would() -> None:
    # the mean of a group norm's output: noise around zero, every element far inside atol,
    # the whole-tensor relative error of order one (the verifier's float64 truth settles it)
    torch.manual_seed(0)
    ref = [torch.randn(128) * 1e-8]
    noise = [torch.randn(128) * 1e-8]
    timed = {"ok": True, "timing": {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1}}
    row = _judge(timed, noise, ref, _tolerances())
    assert row["checked"], row["detail"]
    assert "float64 truth" in row["detail"]
    # a wrong output of the same size misses the element-wise bound too: not checked
    wrong = _judge(timed, [ref[0] + 1e-3], ref, _tolerances())
    assert not wrong["checked"] and wrong["detail"].startswith("wrong output")


def test_a_measure_jobs_parity_takes_the_same_two_allowances_and_no_more() -> None:
    from kopt.harness.runner import _parity

    case = SimpleNamespace(manifest=SimpleNamespace(precision="strict", tolerance=None))
    torch.manual_seed(0)
    near_zero = torch.randn(256) * 1e-8
    assert _parity(case, [torch.randn(256) * 1e-8], [near_zero])["passed"]
    big = torch.randn(4096)
    off_at_one = big.clone()
    off_at_one[7] += 5e-4  # one element outside its bound, the whole tensor within
    assert _parity(case, [off_at_one], [big])["passed"]
    # each output within one allowance but not the same one: refused, as the verifier does
    mixed = _parity(case, [off_at_one, torch.randn(256) * 1e-8], [big, near_zero])
    assert not mixed["passed"]
    assert not _parity(case, [big + 1e-2], [big])["passed"]
