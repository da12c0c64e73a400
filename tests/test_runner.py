"""The variant runner: in-worker metrics, and the parent side's containment of bad variants."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from kopt.harness.errors import BadInputError
from kopt.harness.runner import (
    execute_variant,
    make_case_forward,
    measure_variant,
    reference_outputs,
)

METRICS_KEYS = {"label", "case", "variant", "input_set", "device", "timing_label", "latency_ms",
                "samples", "throughput", "peak_memory_bytes", "roofline", "correctness",
                "environment", "timestamp"}
FAST = {"min_iters": 3, "max_iters": 5, "max_seconds": 2.0}

HONEST = """
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return F.gelu(F.layer_norm(x, x.shape[-1:], self.norm.weight.to(x.dtype),
                                   self.norm.bias.to(x.dtype)))
"""
WRONG = HONEST.replace("F.gelu(", "(1.5 * ")  # forgets the GELU, scales instead
HANGS = HONEST.replace("    def forward(self, x):\n", "    def forward(self, x):\n        while True:\n            pass\n")
CRASHES = HONEST.replace("    def forward(self, x):\n",
                         "    def forward(self, x):\n        import os\n        os.abort()\n")
BAD_WEIGHTS = HONEST.replace("self.norm = nn.LayerNorm(hidden)", "self.ln = nn.LayerNorm(hidden)")


def _write(tmp: Path, name: str, source: str) -> Path:
    f = tmp / f"{name}.py"
    f.write_text(source)
    return f


def test_case_forward_runs_the_smoke_inputs_on_cpu(workspace: Path) -> None:
    fwd = make_case_forward("layernorm_gelu", device="cpu")
    assert fwd.device == "cpu" and fwd.input_set == "smoke" and fwd.case.name == "layernorm_gelu"
    out = fwd()
    assert out.shape == (64, 256) and out.dtype == torch.bfloat16
    assert fwd.attach_buffer_sets(3) == 3
    fwd.rotate(1)
    assert fwd.inputs.args[0].data_ptr() != fwd.buffer_sets[0].args[0].data_ptr()
    # buffer set i holds seed i's values: a timed call's output cannot pass for another set's
    from kopt.harness.data import agent_provide_inputs

    assert torch.equal(fwd.inputs.args[0], agent_provide_inputs(fwd.case, "smoke", 1).args[0])
    assert not torch.equal(fwd(), out)
    fwd.rotate(3)
    assert torch.equal(fwd(), out)


def test_execute_variant_writes_metrics(workspace: Path) -> None:
    fwd = make_case_forward("layernorm_gelu", device="cpu")
    ref = reference_outputs(fwd)
    metrics = execute_variant("lg-eager", fwd, artifacts_dir=workspace / "art", reference=ref,
                              variant="eager", timing_options=FAST)
    on_disk = json.loads((workspace / "art" / "lg-eager" / "metrics.json").read_text())
    assert METRICS_KEYS <= set(on_disk)
    assert on_disk["timing_label"] == "cpu-interpreter"
    assert on_disk["input_set"] == "smoke" and on_disk["variant"] == "eager"
    lat = on_disk["latency_ms"]
    assert 0 < lat["p20"] <= lat["median"] <= lat["p80"]
    assert 3 <= on_disk["samples"] <= 5
    assert on_disk["roofline"]["bytes"] == 66560
    assert on_disk["roofline"]["floor_ms"] is None  # no GPU figures on the CPU
    assert on_disk["throughput"]["gbps"] == pytest.approx(66560 / (lat["median"] * 1e-3) / 1e9)
    assert on_disk["correctness"] == {**on_disk["correctness"], "checked": True, "passed": True,
                                      "max_abs_err": 0.0}
    assert on_disk["environment"]["torch"] == torch.__version__
    assert metrics["latency_ms"] == lat
    # inputs, weights and output at least; layer_norm and gelu each make one more 32 KB tensor
    assert 66560 <= on_disk["peak_memory_bytes"] < 66560 + 3 * 32768


def test_execute_variant_reports_a_mismatch(workspace: Path) -> None:
    fwd = make_case_forward("layernorm_gelu", device="cpu")
    wrong_ref = [t + 1.0 for t in reference_outputs(fwd)]
    metrics = execute_variant("lg-off", fwd, artifacts_dir=workspace / "art", reference=wrong_ref,
                              timing_options=FAST)
    assert metrics["correctness"]["checked"] and not metrics["correctness"]["passed"]
    assert metrics["correctness"]["max_abs_err"] == pytest.approx(1.0, abs=0.02)
    assert metrics["correctness"]["detail"]  # the comparison's text says what differs


def test_measure_candidate_in_a_worker_copies_artifacts(workspace: Path) -> None:
    honest = _write(workspace, "honest", HONEST)
    wrong = _write(workspace, "wrong", WRONG)
    m = measure_variant("layernorm_gelu", honest, timing_options=FAST, profile=True)
    assert m["ok"], m.get("error")
    assert m["variant"] == "honest" and m["label"] == "layernorm_gelu-honest"
    assert m["correctness"]["passed"] is True
    dest = workspace / ".kopt" / "artifacts" / "layernorm_gelu-honest"
    assert (dest / "metrics.json").is_file()
    assert (dest / "profiler" / "trace.json").is_file()
    assert m["profile"]["kernels"], "profile lists the top ops"
    bad = measure_variant("layernorm_gelu", wrong, timing_options=FAST,
                          artifacts_root=workspace / "run-artifacts")
    assert bad["ok"] and bad["correctness"]["passed"] is False
    assert (workspace / "run-artifacts" / "layernorm_gelu-wrong" / "metrics.json").is_file()


def test_a_clocked_run_says_which_step_of_a_measure_job_took_its_seconds(workspace: Path) -> None:
    from kopt.harness.targets.resolve import resolve_target
    from kopt.phases.breakdown import ClockedTarget, TimingBreakdown

    breakdown = TimingBreakdown()
    target = ClockedTarget(resolve_target(None), breakdown)
    honest = _write(workspace, "honest", HONEST)
    m = measure_variant("layernorm_gelu", honest, timing_options=FAST, profile=True, target=target)
    assert m["ok"], m.get("error")
    measure_variant("layernorm_gelu", "eager", timing_options=FAST, target=target)
    jobs = breakdown.to_dict()["jobs"]["measure"]
    assert jobs["count"] == 2
    steps = jobs["steps"]
    # the candidate's own steps, its supervisor's reference and the baseline's
    assert {"candidate import", "model and inputs", "first call", "timing", "profile",
            "supervisor reference", "reference"} <= set(steps)
    assert all(v >= 0 for v in steps.values())
    # the steps account for the job, not for more than it
    assert sum(steps.values()) <= jobs["seconds"]
    assert m["steps"]["timing"] > 0


def test_hanging_candidate_is_killed_at_the_timeout(workspace: Path) -> None:
    start = time.monotonic()
    m = measure_variant("layernorm_gelu", _write(workspace, "hangs", HANGS), timeout=12)
    assert not m["ok"]
    assert m["error_kind"] == "timeout" and "timed out" in m["error"]
    assert time.monotonic() - start < 40


def test_crashing_and_unloadable_candidates_are_contained(workspace: Path) -> None:
    crash = measure_variant("layernorm_gelu", _write(workspace, "crashes", CRASHES), timeout=60)
    assert not crash["ok"] and "SIGABRT" in crash["error"]
    strict = measure_variant("layernorm_gelu", _write(workspace, "renamed", BAD_WEIGHTS),
                             timeout=60)
    assert not strict["ok"] and strict["error_kind"] == "candidate"
    assert "state_dict" in strict["error"] or "Missing key" in strict["error"]


def test_missing_candidate_file_is_bad_input(workspace: Path) -> None:
    with pytest.raises(BadInputError, match="no candidate file"):
        measure_variant("layernorm_gelu", workspace / "nope.py")


@pytest.mark.gpu
def test_gpu_metrics_have_a_floor_and_peak_memory(workspace: Path) -> None:
    m = measure_variant("layernorm_gelu", "eager", device="cuda")
    assert m["ok"], m.get("error")
    assert m["timing_label"] == "cuda-events" and m["input_set"] == "main"
    roof = m["roofline"]
    assert roof["floor_ms"] > 0 and roof["bound"] == "memory"
    assert 0 < roof["pct_of_floor"] <= 100  # nothing beats the floor
    assert m["peak_memory_bytes"] >= roof["bytes"]
    assert m["deferred_work_suspected"] is None


def test_a_runs_breakdown_keeps_the_work_done_in_kopts_own_process(tmp_path: Path) -> None:
    """Seconds outside any worker job (the verifier's draws and judge, the architect's region
    profile) are kept by name, survive a resume's reload, and show in `kopt run`'s line."""
    from types import SimpleNamespace

    from kopt.phases.breakdown import TimingBreakdown
    from kopt.workbench.commands.run import breakdown_line

    b = TimingBreakdown()
    b.add_verification(SimpleNamespace(steps={"draws": 1.5, "draws: staged files": 0.5,
                                              "reference": 3.0, "candidate": 4.0, "judge": 0.5}))
    b.add_verification(SimpleNamespace(steps={"draws": 1.0, "judge": 0.25, "truth": 2.0}))
    with b.clocked("architect region profile"):
        time.sleep(0.05)
    b.phases["optimizer"] = 10.0
    b.save(tmp_path)
    again = TimingBreakdown.load(tmp_path).to_dict()
    # the jobs' own seconds (reference, candidate) are clocked as jobs, not here
    assert {k: v for k, v in again["parent"].items() if k.startswith("verify")} == {
        "verify draws": 2.5, "verify judge": 0.75, "verify truth": 2.0}
    assert again["parent"]["architect region profile"] >= 0.05
    line = breakdown_line(again)
    assert "in this process: verify draws 2.5, verify judge 0.8, verify truth 2.0" in line


def test_a_phase_says_how_many_of_its_seconds_no_clock_covered(tmp_path: Path) -> None:
    """`unclocked`: a phase's seconds outside every job, engineer and named parent work;
    overlapping jobs (a verification's reference and candidate side by side) count once."""
    from kopt.phases.breakdown import TimingBreakdown, _union_length

    assert _union_length([(1.0, 3.0), (2.0, 4.0), (6.0, 7.0), (0.0, 0.5)], 0.5, 6.5) == 3.5
    assert _union_length([], 0.0, 2.0) == 0.0
    b = TimingBreakdown()
    with b.phase("optimizer"):
        with b.clocked("verify draws"):
            time.sleep(0.2)
        time.sleep(0.3)  # nothing clocked
    b.save(tmp_path)
    again = TimingBreakdown.load(tmp_path).to_dict()
    assert 0.25 <= again["unclocked"]["optimizer"] <= again["phases"]["optimizer"] - 0.19
