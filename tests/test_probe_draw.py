"""The import probe learns a large `get_inputs()` from a sample of it (harness.probe_draw)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kopt.harness import kernelbench, probe_draw


@pytest.fixture
def sampled_above_a_million(monkeypatch: pytest.MonkeyPatch) -> None:
    """Draws of over 1M elements count as large (samples keep their real size: 1M and 2M)."""
    monkeypatch.setattr(probe_draw, "FULL_NUMEL", 1 << 20)


def test_a_large_draw_is_sampled_by_its_leading_size(sampled_above_a_million: None) -> None:
    def get_inputs() -> list[object]:
        x = torch.rand(4096, 1024) * 4 - 2
        idx = torch.randint(0, 7, size=(4096,))
        w = torch.empty(8192, 512).normal_(3.0, 2.0)
        return [x, idx, 5, w.t()]

    drawn = probe_draw.draw(get_inputs)
    assert drawn.sampled
    x, idx, value, wt = drawn.values
    assert x.shape == (2048, 1024) and idx.shape == (4096,) and value == 5
    assert wt.shape == (512, 4096) and not wt.is_contiguous()  # rows cut, then transposed
    assert [tuple(t.shape) for t in drawn.layout if isinstance(t, torch.Tensor)] == [
        (4096, 1024), (4096,), (512, 8192)]
    assert -2 <= float(x.min()) and float(x.max()) < 2


def test_a_sample_describes_the_inputs_as_the_full_draw_does(
        sampled_above_a_million: None, tmp_path: Path) -> None:
    """Same shapes, layouts and distributions in the derived specs, sampled or not."""
    file = tmp_path / "problem.py"
    file.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x, t, idx):\n"
        "        return x.sum() + t.sum() + idx.sum()\n"
        "def get_inputs():\n"
        "    return [torch.rand(40000, 64) * 6 - 3, torch.randn(64, 2000).t(),\n"
        "            torch.randint(10, (40000,))]\n"
        "def get_init_inputs():\n"
        "    return []\n")

    def specs() -> list[dict[str, object]]:
        result = kernelbench.probe(file)
        assert result["ok"], result
        d = kernelbench._Derivation()
        return [kernelbench._tensor_spec(i, info, {}, d) for i, info in enumerate(result["inputs"])]

    assert probe_draw.draw(lambda: [torch.rand(40000, 64)]).sampled
    sampled = specs()
    assert sampled[0] == {"shape": [40000, 64], "dtype": "float32", "init": "uniform",
                          "low": -3.0, "high": 3.0}
    assert sampled[1]["shape"] == [2000, 64] and sampled[1]["contiguous"] is False
    assert sampled[2]["init"] == "randint" and (sampled[2]["low"], sampled[2]["high"]) == (0, 10)
    probe_draw.FULL_NUMEL = 1 << 40  # the same problem drawn at full size
    assert specs() == sampled


@pytest.mark.parametrize("source", [
    "a = torch.randn(1100, 1000); return [a @ a.t()]",  # a square: two sizes follow the cut
    "n = int(torch.randint(1100, 1200, (1,)).item()); return [torch.rand(n, 1000)]",  # no meta
    # values that depend on the draw's size: the upper triangle of 350, then 700, of 3000 rows
    "return [torch.triu(torch.rand(3000, 3000))]",
])
def test_a_draw_a_sample_cannot_stand_for_is_made_at_full_size(
        sampled_above_a_million: None, source: str) -> None:
    namespace: dict[str, object] = {"torch": torch}
    exec("def get_inputs():\n    " + source, namespace)  # noqa: S102 (the test's own code)
    drawn = probe_draw.draw(namespace["get_inputs"])  # type: ignore[arg-type]
    assert not drawn.sampled and drawn.values[0].shape[0] >= 1100


def test_a_small_draw_is_made_as_the_file_wrote_it() -> None:
    drawn = probe_draw.draw(lambda: [torch.rand(16, 16)])
    assert not drawn.sampled and drawn.values[0].shape == (16, 16)
