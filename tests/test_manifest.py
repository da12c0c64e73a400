"""Manifests: schema validation with JSON-pointer key paths, atomic writes, the hand-off check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kopt.harness.errors import ManifestError
from kopt.phases.manifest import (
    FileRef,
    Manifest,
    check_handoff,
    plan_errors,
    read_manifest,
    validation_errors,
    write_manifest,
)
from kopt.workbench.cli import main

SHA = "a" * 40


def _plan() -> dict:
    return {"targets": [{"rank": 1, "region": "forward", "fusion": "fuse all",
                         "expected_gain_ms": 0.5, "ops": ["aten::gelu"], "floor_ms": None}]}


def _architect(root: Path, status: str = "verified") -> Manifest:
    out = root / "manifests" / "r1" / "architect" / "plan.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_plan()))
    return Manifest(
        phase="architect", run_id="r1", case="layernorm_gelu", status=status,
        branch="kopt/layernorm_gelu/r1", commit=SHA, baseline_ms=1.29,
        timing_label="cpu-interpreter", outputs=[FileRef.of(out, root)],
        details={"device": "cpu", "input_set": "smoke",
                 "baseline": {"median_ms": 1.29, "p20_ms": 1.2, "p80_ms": 1.3,
                              "timing_label": "cpu-interpreter", "metrics": "m.json"},
                 "profile": {"by": "cpu", "top_kernels": [
                     {"name": "aten::gelu", "calls": 5, "total_ms": 1.0, "pct": 100.0}]},
                 "model_summary": {"total_params": 512, "trainable_params": 512, "flops": 0.0,
                                   "layers": [{"name": "norm", "type": "LayerNorm",
                                               "output_shape": [64, 256]}]},
                 "roofline": {"bytes": 1000, "flops": 0.0, "floor_ms": None, "regions": []},
                 "plan": _plan()})


def test_a_written_manifest_reads_back_valid(workspace: Path) -> None:
    path = write_manifest(_architect(workspace), workspace / "manifests/r1/architect.json")
    data = json.loads(path.read_text())
    assert data["schema"] == "kopt.manifest/v1"
    assert set(data) >= {"schema", "phase", "run_id", "case", "inputs", "outputs",
                         "benchmarks", "git", "status", "details"}
    assert read_manifest(path).details["plan"]["targets"][0]["fusion"] == "fuse all"
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("edit, pointer", [
    (lambda d: d["benchmarks"].__setitem__("speedup", "fast"), "/benchmarks/speedup"),
    (lambda d: d.pop("git"), "/"),
    (lambda d: d["details"]["model_summary"]["layers"][0].pop("type"),
     "/details/model_summary/layers/0"),
    (lambda d: d["details"]["plan"]["targets"][0].__setitem__("rank", 0),
     "/details/plan/targets/0/rank"),
    (lambda d: d["outputs"][0].__setitem__("sha256", "xyz"), "/outputs/0/sha256"),
])
def test_invalid_manifest_names_the_failing_key_path(workspace: Path, edit, pointer) -> None:
    data = _architect(workspace).to_dict()
    edit(data)
    errors = validation_errors(json.loads(json.dumps(data)))
    assert errors and errors[0].startswith(pointer + ":"), errors


def test_write_refuses_an_invalid_manifest(workspace: Path) -> None:
    m = _architect(workspace)
    m.details["plan"] = {"targets": []}
    with pytest.raises(ManifestError, match="/details/plan/targets"):
        write_manifest(m, workspace / "manifests/r1/architect.json")
    assert not (workspace / "manifests/r1/architect.json").exists()


def test_plan_schema_checks_an_analyst_answer() -> None:
    assert plan_errors(_plan()) == []
    assert plan_errors({"targets": [{"rank": 1, "region": "x"}]})


def test_handoff_refuses_changed_file_failed_status_and_hand_edits(workspace: Path) -> None:
    run_dir = workspace / "manifests" / "r1"
    write_manifest(_architect(workspace), run_dir / "architect.json")
    assert check_handoff(run_dir, "architect", run_id="r1").baseline_ms == 1.29

    plan = run_dir / "architect" / "plan.json"
    plan.write_text(plan.read_text().replace("fuse all", "fuse nothing"))
    with pytest.raises(ManifestError, match=r"manifests/r1/architect/plan.json: sha256"):
        check_handoff(run_dir, "architect")

    write_manifest(_architect(workspace, status="failed"), run_dir / "architect.json")
    with pytest.raises(ManifestError, match="/status is 'failed'"):
        check_handoff(run_dir, "architect")

    write_manifest(_architect(workspace), run_dir / "architect.json")
    data = json.loads((run_dir / "architect.json").read_text())
    data["details"]["baseline"]["median_ms"] = -1
    (run_dir / "architect.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="/details/baseline/median_ms"):
        check_handoff(run_dir, "architect")


def test_cli_validate_exits_0_or_1_naming_the_key(workspace: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = write_manifest(_architect(workspace), workspace / "manifests/r1/architect.json")
    assert main(["manifest", "validate", str(path)]) == 0
    data = json.loads(path.read_text())
    data["status"] = "great"
    bad = workspace / "bad.json"
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["manifest", "validate", str(bad), "--json"]) == 1
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["valid"] is False and out["errors"][0].startswith("/status:")
