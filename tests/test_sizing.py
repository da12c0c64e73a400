"""The GPU size budget (`harness.sizing`): a main input set over it runs on fewer rows."""

from __future__ import annotations

from pathlib import Path

import yaml

from kopt.harness.case import load_case_dir
from kopt.harness.sizing import fit_case_dir, fit_leading, largest_tensor

MODELS = {
    "softmax": "return torch.softmax(x, dim=1)",
    # the output is four times the input: the budget counts outputs too
    "widen": "return x.repeat(1, 4)",
    # only 64 rows are accepted: no smaller set runs, so nothing changes
    "fixed": "return x.reshape(64, 1000).sum(1)",
}


def _case(tmp_path: Path, body: str, rows: int = 64, width: int = 1000) -> Path:
    d = tmp_path / "case"
    d.mkdir()
    (d / "model.py").write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n"
        f"    def forward(self, x, y):\n        {body}\n")
    (d / "manifest.yaml").write_text(yaml.safe_dump({
        "name": "c", "description": "test case.", "model": {"module": "model.py", "class": "Model"},
        "inputs": {"args": [{"shape": [rows, width], "dtype": "float32"},
                            {"shape": [rows, 3], "dtype": "float32"}]},
        "smoke": {"args": [{"shape": [4, 8]}, {"shape": [4, 3]}]}}))
    return d


def test_halves_the_leading_size_until_the_largest_tensor_fits(tmp_path: Path) -> None:
    d = _case(tmp_path, MODELS["softmax"])
    fit = fit_case_dir(load_case_dir(d), 8000)
    assert fit is not None and (fit.lead, fit.rows) == (64, 8)
    assert (fit.largest_before, fit.largest_after) == (64000, 8000)
    case = load_case_dir(d)
    # every input that shares the leading size shrinks; the smoke set keeps its own shapes
    assert [a.shape for a in case.input_set("main").args] == [[8, 1000], [8, 3]]
    assert [a.shape for a in case.input_set("smoke").args] == [[4, 8], [4, 3]]
    assert "leading size 64 -> 8" in case.manifest.description


def test_outputs_count_toward_the_budget(tmp_path: Path) -> None:
    case = load_case_dir(_case(tmp_path, MODELS["widen"]))
    assert largest_tensor(case, case.input_set("main")) == 256000
    result = fit_leading(case, 64000)
    assert result is not None and result[1].rows == 16


def test_within_budget_or_not_shrinkable_changes_nothing(tmp_path: Path) -> None:
    d = _case(tmp_path, MODELS["softmax"])
    before = (d / "manifest.yaml").read_text()
    assert fit_case_dir(load_case_dir(d), 64000) is None
    assert (d / "manifest.yaml").read_text() == before
    (tmp_path / "f").mkdir()
    assert fit_leading(load_case_dir(_case(tmp_path / "f", MODELS["fixed"])), 1000) is None


def test_stops_at_one_row(tmp_path: Path) -> None:
    result = fit_leading(load_case_dir(_case(tmp_path, MODELS["softmax"])), 10)
    assert result is not None and result[1].rows == 1
    assert "still over the budget" in result[1].note
