"""`kopt run` end to end on CPU with the real harness (workers, verifier, timer, Triton
interpreter) and the offline engineer, on the bundled layernorm_gelu case shrunk to tiny
shapes so the interpreter finishes in about a minute."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kopt.harness.paths import bundled_cases_dir
from kopt.phases import history
from kopt.phases.manifest import read_manifest, validation_errors
from kopt.workbench.cli import main


def tiny_case(workspace: Path) -> Path:
    """The bundled layernorm_gelu with main (128, 256), shapes [(33, 256)], smoke (64, 256)."""
    case = workspace / "cases" / "lg_tiny"
    shutil.copytree(bundled_cases_dir() / "layernorm_gelu", case)
    text = (case / "manifest.yaml").read_text()
    for old, new in (("name: layernorm_gelu", "name: lg_tiny"), ("[16384, 4096]", "[128, 256]"),
                     ("hidden: 4096}}", "hidden: 256}}"), ("[1000, 4096]", "[33, 256]")):
        assert old in text
        text = text.replace(old, new)
    (case / "manifest.yaml").write_text(text)
    return case


@pytest.mark.slow
def test_kopt_run_offline_on_cpu(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = tiny_case(workspace)
    subprocess.run(["git", "init", "-q", "-b", "main", str(workspace)], check=True)
    head_before = (workspace / ".git" / "HEAD").read_bytes()

    rc = main(["run", str(case), "--engineer", "offline", "--iterations", "1", "--yes", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["verified"] is True and result["case"] == "lg_tiny"
    assert len(result["manifests"]) == 4
    for m in result["manifests"]:
        assert validation_errors(json.loads((workspace / m).read_text())) == []

    opt = read_manifest(workspace / result["manifests"][1])
    assert [i["verdict"] for i in opt.details["iterations"]] == ["accepted"]
    assert opt.timing_label == "cpu-interpreter"
    acc = read_manifest(workspace / result["manifests"][2])
    assert acc.details["gpu"] == "no GPU: default configuration verified only"
    assert acc.details["tunables"]  # the offline engineer declares KOPT_TUNABLES
    final = read_manifest(workspace / result["manifests"][3])
    assert final.details["verification"]["accepted"] is True
    assert final.details["timing"]["eager_ms"] and final.details["timing"]["candidate_ms"]

    run = history.get_run(result["run_id"])
    assert [(i.iteration, i.verified, i.author) for i in run.iterations] == [(1, True, "offline")]
    kernel = history.show_file(run.iterations[0].commit, "kernels/lg_tiny.py")
    assert "@triton.jit" in kernel and "class ModelNew" in kernel
    archive = workspace / result["archive"]
    assert (archive / "lg_tiny.py").read_text() == kernel
    assert "cpu-interpreter" in (archive / "report.md").read_text()
    assert (workspace / ".git" / "HEAD").read_bytes() == head_before
