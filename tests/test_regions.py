"""Issue 20: the architect reads a whole model: summary, region/module profile, region plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kopt.harness.case import load_case
from kopt.harness.summary import model_summary
from kopt.phases.manifest import plan_errors, schema_errors
from kopt.phases.plan import OfflineAnalyst
from kopt.phases.regions import profile_regions, ranked, run_regions


def test_summary_counts_each_layer_and_the_attention_between_them() -> None:
    s = model_summary(load_case("gpt2_block"), "main")
    layers = {layer["name"]: layer for layer in s["layers"]}
    c_attn = layers["c_attn"]
    assert c_attn["output_shape"] == [8, 1024, 2304]
    assert c_attn["flops"] == 2 * 8 * 1024 * 768 * 2304
    # bf16 weight + bias read once, output written once
    assert c_attn["bytes"] == 2 * (768 * 2304 + 2304) + 2 * 8 * 1024 * 2304
    linear = sum(layer["flops"] for layer in s["layers"] if layer["type"] == "Linear")
    assert s["flops"] > linear  # SDPA runs in forward, outside any leaf module
    assert s["total_params"] == layers["(output)"]["params"] == 7_087_872
    assert s["param_bytes"] == 2 * s["total_params"]


@pytest.fixture(scope="module")
def resnet_regions() -> dict:
    return profile_regions(load_case("resnet_block"), "smoke", "cpu")


def test_regions_cut_the_graph_at_library_calls(resnet_regions: dict) -> None:
    regions = resnet_regions["regions"]
    assert [r["kind"] for r in regions] == ["convolution", "fusable", "convolution", "fusable"]
    conv, bn_relu = regions[0], regions[1]
    assert conv["engine"] == "library" and conv["modules"] == ["conv1"] and conv["flops"] > 0
    assert bn_relu["engine"] == "yes" and "relu" in bn_relu["ops"]
    assert bn_relu["modules"] == ["bn1", "relu"]
    assert all(r["floor_ms"] is None and r["above_floor_ms"] is None for r in regions)
    assert resnet_regions["timing_label"] == "cpu-eager"
    assert abs(sum(r["pct"] for r in regions) - 100.0) < 0.5
    assert {m["module"] for m in resnet_regions["modules"]} >= {"conv1", "bn1", "conv2", "bn2"}
    times = [r["time_ms"] for r in ranked(resnet_regions)]
    assert times == sorted(times, reverse=True)


def test_region_plan_targets_only_what_the_engine_takes(resnet_regions: dict) -> None:
    inputs = {"case": "resnet_block", "baseline": {"median_ms": 2.0, "timing_label": "cpu-interpreter"},
              "profile": {"top_kernels": []}, "model_summary": {"layers": []},
              "roofline": {"floor_ms": None}, "regions": resnet_regions}
    plan = OfflineAnalyst().plan(inputs)
    assert not plan_errors(plan)
    assert len(plan["targets"]) == 2
    fusable = {r["region"] for r in resnet_regions["regions"] if r["engine"] == "yes"}
    assert {t["region"] for t in plan["targets"]} == fusable
    assert [t["rank"] for t in plan["targets"]] == [1, 2]


def test_region_profile_fits_the_architect_schema_and_reads_back(resnet_regions: dict,
                                                                 workspace: Path) -> None:
    details_schema_errors = schema_errors(
        {"device": "cpu", "input_set": "smoke",
         "baseline": {"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0,
                      "timing_label": "cpu-interpreter", "metrics": "m.json"},
         "profile": {"by": "cpu", "top_kernels": []},
         "model_summary": model_summary(load_case("resnet_block"), "main"),
         "roofline": {"bytes": 1, "flops": 0.0, "floor_ms": None, "regions": []},
         "plan": {"targets": [{"rank": 1, "region": "r", "fusion": "f", "expected_gain_ms": 0}]},
         "regions": resnet_regions}, "architect")
    assert details_schema_errors == []
    run_dir = workspace / "manifests" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "architect.json").write_text(json.dumps({"details": {"regions": resnet_regions}}))
    assert run_regions(run_dir)["regions"][0]["kind"] == "convolution"
    assert run_regions(workspace / "missing") is None


def test_a_region_profile_of_the_unchanged_case_is_kept_ten_minutes(
        workspace: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A second run's architect reuses the workspace's region profile of the same case files,
    device and input set (saying how old it is); a changed case or an old one is profiled."""
    import shutil
    import types

    import kopt.phases.regions as regions
    from kopt.phases import architect
    from kopt.phases.breakdown import TimingBreakdown

    made: list[str] = []

    def fake(case, input_set, device):  # type: ignore[no-untyped-def]
        made.append(input_set)
        return {"timing_label": "cpu-eager", "input_set": input_set, "total_ms": 1.0,
                "regions": [], "modules": []}

    monkeypatch.setattr(regions, "profile_regions", fake)
    case_dir = tmp_path / "ln"
    shutil.copytree(load_case("layernorm_gelu").directory, case_dir)
    ctx = types.SimpleNamespace(case=load_case(str(case_dir)), device="cpu", input_set="smoke",
                                breakdown=TimingBreakdown())
    seen: list[str] = []
    first = architect.region_profile(ctx, lambda e: seen.append(e.message))
    assert made == ["smoke"] and "profiled_s_ago" not in first
    second = architect.region_profile(ctx, lambda e: seen.append(e.message))
    assert made == ["smoke"] and second["profiled_s_ago"] >= 0
    assert any("region profile kept from this workspace's profile" in s for s in seen)

    (case_dir / "model.py").write_text((case_dir / "model.py").read_text() + "\n# edited\n")
    ctx.case = load_case(str(case_dir))
    architect.region_profile(ctx, lambda e: None)
    assert made == ["smoke", "smoke"]  # the case changed
    kept = architect._kept_regions_file(ctx)
    data = json.loads(kept.read_text())
    kept.write_text(json.dumps({**data, "profiled_at": data["profiled_at"] - 601}))
    architect.region_profile(ctx, lambda e: None)
    assert len(made) == 3  # ten minutes old
