"""The case loader: SPEC.md's example loads as written; bad manifests name file, key, found."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kopt.harness.case import load_case
from kopt.harness.errors import CaseError, UnknownCaseError

SPEC_EXAMPLE = """\
name: layernorm_gelu
description: LayerNorm then exact GELU over a (16384, 4096) bf16 activation
model: {module: model.py, class: Model, init_kwargs: {hidden: 4096}}
inputs:                        # synthesized, seeded, cached; identical for every variant
  args:
    - {shape: [16384, 4096], dtype: bfloat16, init: normal}
  kwargs: {}
weights: {function: init_weights}     # optional helper in model.py; else seeded default state_dict
device: auto                          # cuda | cpu | auto
tolerance: {atol: 2.0e-2, rtol: 2.0e-2}   # optional; defaults by dtype (below)
precision: strict                     # strict | tf32: may float32 matmuls use TF32?
shapes:                               # optional extra input sets, used to check generality
  - args: [{shape: [1000, 4096]}]
smoke:                                # small inputs for CPU runs (Triton interpreter)
  args: [{shape: [64, 256]}]
"""

MODEL = """\
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
    def forward(self, x):
        return self.norm(x)
def init_weights(m):
    pass
"""


def write_case(root: Path, manifest: str, model: str = MODEL) -> Path:
    d = root / "c"
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.yaml").write_text(textwrap.dedent(manifest))
    (d / "model.py").write_text(model)
    return d


def test_spec_example_loads_exactly_as_written(tmp_path: Path) -> None:
    case = load_case(write_case(tmp_path, SPEC_EXAMPLE))
    m = case.manifest
    assert m.name == "layernorm_gelu"
    assert m.model.class_name == "Model" and m.model.init_kwargs == {"hidden": 4096}
    assert m.inputs.args[0].shape == [16384, 4096] and m.inputs.args[0].dtype == "bfloat16"
    assert m.tolerance is not None and m.tolerance.atol == 2e-2
    assert case.input_set_names() == ["main", "smoke", "shape0"]
    smoke = case.input_set("smoke")
    assert smoke.args[0].shape == [64, 256] and smoke.args[0].dtype == "bfloat16"
    assert case.input_set("shape0").args[0].shape == [1000, 4096]


@pytest.mark.parametrize(
    ("edit", "key", "found"),
    [
        (("device: auto", "device: gpu"), "device", "'gpu'"),
        (("precision: strict", "precision: fp8"), "precision", "'fp8'"),
        (("dtype: bfloat16", "dtype: bfloat17"), "inputs.args.0.dtype", "'bfloat17'"),
        (("init: normal", "init: gaussian"), "inputs.args.0.init", "'gaussian'"),
        (("kwargs: {}", "kwargs: {}\n  extra: 1"), "inputs.extra", "unknown key"),
        (("tolerance: {atol: 2.0e-2, rtol: 2.0e-2}", "tolerance: {atol: 2.0e-2}"), "tolerance.rtol", "missing"),
    ],
)
def test_bad_manifest_names_file_key_and_found(tmp_path: Path, edit: tuple[str, str], key: str,
                                               found: str) -> None:
    d = write_case(tmp_path, SPEC_EXAMPLE.replace(*edit))
    with pytest.raises(CaseError) as info:
        load_case(d)
    text = str(info.value)
    assert str(d / "manifest.yaml") in text
    assert key in text
    assert found in text


def test_unknown_top_level_key_rejected(tmp_path: Path) -> None:
    d = write_case(tmp_path, SPEC_EXAMPLE + "colour: blue\n")
    with pytest.raises(CaseError, match="colour: unknown key"):
        load_case(d)


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    d = write_case(tmp_path, SPEC_EXAMPLE + "inputs: [\n")
    with pytest.raises(CaseError, match="not valid YAML"):
        load_case(d)


def test_missing_model_file(tmp_path: Path) -> None:
    d = write_case(tmp_path, SPEC_EXAMPLE.replace("module: model.py", "module: nope.py"))
    with pytest.raises(CaseError, match="model.module.*nope.py"):
        load_case(d)


def test_unknown_case_lists_bundled(workspace: Path) -> None:
    with pytest.raises(UnknownCaseError) as info:
        load_case("no_such_case")
    assert "layernorm_gelu" in str(info.value)


def test_override_arity_checked(tmp_path: Path) -> None:
    d = write_case(tmp_path, SPEC_EXAMPLE.replace("args: [{shape: [64, 256]}]",
                                                  "args: [{shape: [64, 256]}, {shape: [1]}]"))
    case = load_case(d)
    with pytest.raises(CaseError, match="smoke.args"):
        case.input_set("smoke")
