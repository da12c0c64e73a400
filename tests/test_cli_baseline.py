"""`kopt baseline`: the JSON contract, the labels on CPU figures and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import has_gpu
from kopt.workbench.cli import main


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_baseline_json_is_the_last_line(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["baseline", "layernorm_gelu", "--skip-compile", "--json", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    data = _last_json(out)
    assert data["ok"] and data["case"] == "layernorm_gelu"
    assert data["device"] == "cpu" and data["timing_label"] == "cpu-interpreter"
    eager = data["variants"]["eager"]
    assert eager["ok"] and eager["latency_ms"]["median"] > 0
    assert eager["timing_label"] == "cpu-interpreter"
    assert data["roofline"]["bytes"] == 66560 and data["roofline"]["floor_ms"] is None
    assert "compile" not in data["variants"]


def test_baseline_table_labels_cpu_figures(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", "layernorm_gelu", "--skip-compile", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "cpu-interpreter" in out and "not GPU figures" in out
    assert "eager" in out and "top kernels by CPU time" in out


def test_baseline_times_torch_compile(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kopt.harness.runner import measure_variant

    m = measure_variant("layernorm_gelu", "compile", timing_options={"min_iters": 3, "max_iters": 3})
    assert m["ok"], m.get("error")  # inductor's C++ backend works on this machine
    assert m["variant"] == "compile" and m["correctness"]["passed"]


def test_unknown_case_is_one_line_exit_2(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", "no_such_case", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown case 'no_such_case'" in err[0]


@pytest.mark.skipif(has_gpu(), reason="needs a machine without a GPU")
def test_cuda_without_gpu_is_one_line_exit_2(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", "layernorm_gelu", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0] and "--device cpu" in err[0]


def test_model_that_raises_is_one_line_exit_2(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = workspace / "cases" / "raiser"
    d.mkdir(parents=True)
    (d / "manifest.yaml").write_text(
        "name: raiser\ninputs:\n  args:\n    - {shape: [4, 8]}\n")
    (d / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        raise RuntimeError('shape mismatch in block 3')\n")
    assert main(["baseline", "raiser", "--skip-compile", "--device", "cpu"]) == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    err = [line for line in stderr.splitlines() if line.startswith("kopt: error:")]
    assert len(err) == 1
    assert "model.py" in err[0] and "RuntimeError: shape mismatch in block 3" in err[0]
    assert str(workspace / "cases" / "raiser") in err[0]  # the user's file, not the worker's copy
