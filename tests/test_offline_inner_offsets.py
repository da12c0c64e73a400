"""A flat pointwise kernel reads an operand laid out as its domain over trailing dims at the
flat index's part over those dims (`X<i>_INNER`, `_laid_from` at launch), so those dims'
coordinates are not divided out per element; any other layout takes the coordinate path.
Both paths run here, in the CPU interpreter, against the model."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import torch

from kopt.harness.case import load_case_dir
from kopt.phases.engineers.offline import generate_candidate
from tests.test_offline import _load_candidate


def _case(tmp: Path, name: str, body: str, shapes: list[list[int]]):
    d = tmp / name
    d.mkdir()
    (d / "model.py").write_text("import torch\nimport torch.nn as nn\n\n\n"
                                "class Model(nn.Module):\n    def forward(self, a, b):\n"
                                + textwrap.indent(textwrap.dedent(body).strip(), " " * 8) + "\n")
    args = "\n".join(f"    - {{shape: {s}, dtype: float32}}" for s in shapes)
    (d / "manifest.yaml").write_text(f"name: {name}\ninputs:\n  args:\n{args}\ndevice: cpu\n")
    return load_case_dir(d)


def _strided(t: torch.Tensor) -> torch.Tensor:
    """t's values in memory transposed over its last two dims (a view, not contiguous)."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _run(case, source: str, workspace: Path, tag: str, shapes: list[tuple[int, ...]]) -> None:
    module = _load_candidate(source, workspace, tag)
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=gen) for s in shapes)
    namespace: dict = {}
    exec(compile(case.model_file.read_text(), "model.py", "exec"), namespace)
    ref = namespace["Model"]()
    new = module.ModelNew()
    with torch.no_grad():
        want = ref(a, b)
        for x, y in ((a, b), (_strided(a), b), (a, _strided(b)), (_strided(a), _strided(b))):
            got = new(x, y)
            torch.testing.assert_close(got, want)


def test_a_concatenation_reads_its_inputs_at_the_flat_index_over_the_trailing_dims(
        workspace: Path) -> None:
    case = _case(workspace, "cat_relu", "return torch.cat([a.relu(), b.relu()], 1)",
                 [[2, 3, 5, 7], [2, 4, 5, 7]])
    source = generate_candidate(case).source
    assert "if X0_INNER <= 2:" in source and "if X1_INNER <= 2:" in source, source
    assert "(offs - c0 * span0 - c1 * span1)" in source
    assert "X0_INNER=_laid_from(x0, D)" in source
    _run(case, source, workspace, "cat_relu", [(2, 3, 5, 7), (2, 4, 5, 7)])
    module = _load_candidate(source, workspace, "cat_relu_helper")
    x = torch.zeros(2, 3, 5, 7)
    assert module._laid_from(x, (2, 7, 5, 7)) == 2  # its channels are fewer: dims 2, 3
    assert module._laid_from(x, (2, 3, 5, 7)) == 0
    assert module._laid_from(_strided(x), (2, 7, 5, 7)) == 4  # transposed: none
    assert module._laid_from(x[:, :, :, :6], (2, 7, 5, 6)) == 3  # rows of 7 read 6: the last
    assert module._laid_from(torch.zeros(3, 5, 7), (2, 3, 5, 7)) == 4  # another rank


def test_a_broadcast_operand_reads_its_inner_dims_at_the_flat_index(workspace: Path) -> None:
    """(1, C, H, W) beside (N, C, H, W): laid out as the domain from dim 1."""
    case = _case(workspace, "bcast_add", "return torch.tanh(a) * b + a",
                 [[1, 3, 5, 7], [2, 3, 5, 7]])
    source = generate_candidate(case).source
    assert re.search(r"(if|elif) X\d_INNER <= 1:", source), source
    assert "X0_INNER <= 0" not in source and "X1_INNER <= 0" not in source  # X<i>_CONTIG's
    _run(case, source, workspace, "bcast_add", [(1, 3, 5, 7), (2, 3, 5, 7)])


def test_a_middle_dim_reduction_reads_and_writes_its_inner_dims_at_the_tile_column(
        workspace: Path) -> None:
    """A tiled reduction over dim 1 of (N, C, H, W): with H and W laid out as the domain's,
    loads and the (contiguous) outputs use the tile's column index `ci` instead of H and W
    coordinates divided out of it. Contiguous, outer-strided (`INNER` only) and transposed
    (coordinates) inputs, a reduced extent read in one pass and one that loops (split in two
    in the interpreter), all against the model."""
    for c in (24, 600):
        name = f"channel_stats_{c}"
        case = _case(workspace, name, "return torch.softmax(a, 1) * b, a.mean(1), a.amax(1, keepdim=True)",
                     [[2, c, 5, 7], [2, c, 5, 7]])
        source = generate_candidate(case).source
        assert "tiled_reduction" in source, source
        assert "if X0_CONTIG:" in source and "X0_INNER <= 2:" in source, source
        assert "(outer * n_cols + cr) * n_inner + ci" in source
        assert "X0_INNER=_laid_from(x0, D)" in source
        assert re.search(r"tl\.store\(y\d_ptr \+ outer \* n_inner \+ ci,", source), source  # a row output
        module = _load_candidate(source, workspace, name)
        namespace: dict = {}
        exec(compile(case.model_file.read_text(), "model.py", "exec"), namespace)
        ref, new = namespace["Model"](), module.ModelNew()
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(2, c, 5, 7, generator=gen) for _ in range(2))
        with torch.no_grad():
            want = ref(a, b)
            wide = torch.randn(4, c, 5, 7, generator=gen)
            wide[::2] = a
            for x in (a, wide[::2], _strided(a), a.contiguous(memory_format=torch.channels_last)):
                torch.testing.assert_close(new(x, b), want)
