"""The offline engineer's general fusion rules (issue 18), each on odd sizes: the candidate's
outputs against eager in the Triton interpreter, and the number of kernels it generates.

A rule that stops firing shows up here as one kernel more, before any GPU run would show it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kopt.harness.case import load_case_dir
from kopt.phases.engineers.offline import generate_candidate
from tests.test_offline import _check_case, _load_candidate, _write_case


def _generate(tmp: Path, body: list[str], shapes: list[list[int]], dtype: str = "float32"):
    case = load_case_dir(_write_case(tmp, body, shapes, dtype))
    result = generate_candidate(case)
    module = _load_candidate(result.source, tmp, case.name)
    _check_case(case, module, "main", seed=5)
    return result, module


def _constructor_case(tmp: Path, name: str, ctor: str, layers: list[str], forward: list[str],
                      main_init: str, main: list[int], smoke_init: str, smoke: list[int],
                      tolerance: str = ""):
    """A case whose constructor sizes the model (`ctor`: its arguments), with a smoke set that
    changes them (the pipeline generates on main; CPU runs verify on smoke); `tolerance`: the
    manifest's own `tolerance:` mapping, if any."""
    case_dir = tmp / name
    case_dir.mkdir()
    (case_dir / "model.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self, {ctor}):\n        super().__init__()\n"
        + "".join(f"        {line}\n" for line in layers)
        + "\n    def forward(self, x):\n" + "".join(f"        {line}\n" for line in forward))
    (case_dir / "manifest.yaml").write_text(
        f"name: {name}\ndescription: sized by its constructor\n"
        f"model: {{module: model.py, class: Model, init_kwargs: {{{main_init}}}}}\n"
        f"inputs:\n  args:\n    - {{shape: {main}, dtype: float32}}\n"
        "device: auto\nprecision: strict\n"
        + (f"tolerance: {tolerance}\n" if tolerance else "")
        + f"smoke:\n  init_kwargs: {{{smoke_init}}}\n  args: [{{shape: {smoke}}}]\n")
    return load_case_dir(case_dir)


def _accepted_on_cpu(tmp: Path, case, source: str) -> None:
    from kopt.harness.verify import verify_candidate

    file = tmp / f"{case.name}_candidate.py"
    file.write_text(source)
    report = verify_candidate(case, file, device="cpu")
    assert report.accepted, report.to_text()


CHAIN = ["z = x * torch.sigmoid(x) + torch.tanh(y) * 0.7",
         "z = torch.clamp(z, -1.0, 2.0)",
         "z = torch.where(x > 0, z, z * 0.5)",
         "return z - y.abs().sqrt()"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pointwise_dag_over_two_inputs_is_one_kernel(tmp_path: Path, dtype: str) -> None:
    # the two branches (of x and of y) meet at the add, the where and the last sub: each
    # meeting merges the producers' groups instead of joining one and launching the other
    result, _ = _generate(tmp_path, CHAIN, [[37, 123], [37, 123]], dtype)
    assert [k["kind"] for k in result.kernels] == ["pointwise"], result.kernels


def test_pointwise_dag_with_broadcast_operand_is_one_kernel(tmp_path: Path) -> None:
    body = ["a = torch.sigmoid(x) * 2.0", "b = torch.exp(-y.abs())", "return a * b + (a - b).abs()"]
    result, _ = _generate(tmp_path, body, [[5, 37, 19], [37, 19]])
    assert len(result.kernels) == 1, result.kernels


@pytest.mark.parametrize("cols", [123, 16411])  # one pass in registers; a looped long row
def test_layer_norm_times_silu_of_another_input_is_one_kernel(tmp_path: Path, cols: int) -> None:
    body = [f"return F.layer_norm(x, ({cols},)) * F.silu(y)"]
    result, _ = _generate(tmp_path, body, [[3 if cols > 1000 else 37, cols]] * 2)
    assert [k["kind"] for k in result.kernels] == ["reduction"], result.kernels


def test_softmax_times_other_input_plus_rowwise_is_one_kernel(tmp_path: Path) -> None:
    body = ["s = torch.softmax(x, dim=-1)", "g = torch.tanh(y) + 1.0", "return s * g"]
    result, _ = _generate(tmp_path, body, [[29, 77], [29, 77]])
    assert len(result.kernels) == 1, result.kernels


@pytest.mark.parametrize("body, shape, kinds", [
    # KernelBench level-1 99: two distances from one anchor, then the loss over the rows
    (["a = torch.norm(x - y + 1e-6, dim=1)", "b = torch.norm(x - 2.0 * y, dim=1)",
      "return torch.clamp(a - b + 1.0, min=0).mean()"], [33, 700],
     ["reduction", "reduction"]),
    (["return (x * y).sum(1) + torch.exp(x - y).amax(1)"], [5, 3001], ["reduction"]),  # looped
    # along different dims: different rows, two kernels (the add joins the second's epilogue)
    (["return (x * y).sum(1, keepdim=True) + (x - y).sum(0, keepdim=True)"], [37, 45],
     ["reduction", "tiled_reduction"]),
])
def test_reductions_over_the_same_rows_with_their_own_prologues_share_a_kernel(
        tmp_path: Path, body: list[str], shape: list[int], kinds: list[str]) -> None:
    result, _ = _generate(tmp_path, body, [shape, shape])
    assert sorted(k["kind"] for k in result.kernels) == sorted(kinds), result.kernels


# -- reductions over a dim that is not the innermost: 2-D tiles, not strided columns --------

@pytest.mark.parametrize("rows", [37, 700])  # the reduced extent in one tile; looped over tiles
def test_column_standardisation_is_one_tiled_kernel(tmp_path: Path, rows: int) -> None:
    body = ["return (x - x.mean(0)) / (x.std(0) + 1e-5)"]
    result, module = _generate(tmp_path, body, [[rows, 45], [1]])
    assert [k["kind"] for k in result.kernels] == ["tiled_reduction"], result.kernels
    (cfg,) = module.KOPT_CONFIG.values()
    assert "BLOCK_C" in cfg  # coalesced (BLOCK_SIZE, BLOCK_C) tiles


@pytest.mark.parametrize("expr", [
    "x.mean(dim=1)",
    "torch.softmax(x, dim=0) * y",
    "torch.log_softmax(x, dim=1)",
    "torch.logsumexp(x, dim=1) + y[:, 0]",
    "x.var(dim=1, keepdim=True) + x.amax(dim=1, keepdim=True)",
])
def test_middle_and_outer_dim_reductions_match_eager(tmp_path: Path, expr: str) -> None:
    result, _ = _generate(tmp_path, [f"return {expr}"], [[5, 37, 19], [5, 37, 19]])
    assert "tiled_reduction" in [k["kind"] for k in result.kernels], result.kernels
    assert len(result.kernels) == 1, result.kernels


@pytest.mark.parametrize("expr", [
    "torch.softmax(x, dim=1) * y",  # an online max and sum over tiles
    "x.var(dim=1, keepdim=True) + x.amax(dim=1, keepdim=True)",  # Welford beside a max
    "x.argmax(dim=1).float() + x.sum(dim=1)",
])
def test_middle_dim_reductions_over_whole_tiles_match_eager(tmp_path: Path, expr: str) -> None:
    """(2, 1024, 64): tiles that loop over the reduced dim, blocks that divide the 64 columns,
    so the launcher sets EVEN and the masks fold away (the odd sizes above keep them)."""
    result, module = _generate(tmp_path, [f"return {expr}"], [[2, 1024, 64], [2, 1024, 64]])
    assert "tiled_reduction" in [k["kind"] for k in result.kernels], result.kernels
    name = next(k for k, v in module.KOPT_CONFIG.items() if "BLOCK_C" in v)
    cfg = module._launch_config(name, "tiled_reduction", 1024, 64)
    assert 1024 % cfg["BLOCK_SIZE"] == 0 and 64 % cfg["BLOCK_C"] == 0 and cfg["BLOCK_SIZE"] < 1024


@pytest.mark.parametrize("expr", [
    "torch.tanh(x.mean(dim=(2, 3), keepdim=True)) * 2.0",  # a global average pool
    "x.amax(dim=[1, 2, 3]) + 1.0",
    "x.var(dim=(-2, -1), keepdim=True) + x.sum(dim=(1, 2))[:, None, None, :]",
    "torch.logsumexp(x, dim=(1, 2))",
])
def test_reductions_over_several_adjacent_dims_are_generated(tmp_path: Path, expr: str) -> None:
    """Several adjacent reduced dims are one dim of a reshape: no PyTorch fallback left."""
    result, _ = _generate(tmp_path, [f"return {expr}"], [[3, 5, 7, 9], [1]])
    assert result.kernels and all("reduction" in k["kind"] or k["kind"] == "pointwise"
                                  for k in result.kernels), result.kernels
    assert "aten." not in " ".join(u.get("op", "") for u in result.unfused), result.unfused


def test_reduction_over_dims_that_are_not_adjacent_stays_in_pytorch(tmp_path: Path) -> None:
    result, _ = _generate(tmp_path, ["return x.sum(dim=(1, 3)) * 2.0"], [[3, 5, 7, 9], [1]])
    assert any("several" in u["reason"] for u in result.unfused), result.unfused


def test_middle_dim_softmax_bf16_with_long_reduced_extent(tmp_path: Path) -> None:
    result, _ = _generate(tmp_path, ["return torch.softmax(x, dim=1)"], [[2, 1100, 17], [1]], "bfloat16")
    assert [k["kind"] for k in result.kernels] == ["tiled_reduction"], result.kernels


@pytest.mark.parametrize("rows", [45, 700])  # one tile; looped (the online variance, merged per tile)
def test_mean_and_std_share_one_pass_and_keep_precision(tmp_path: Path, rows: int) -> None:
    # a large mean over a small spread: sum(x^2) - n * mean^2 would cancel to noise here
    body = ["x = x * 0.01 + 1000.0", "return torch.cat([x.mean(0, keepdim=True), x.std(0, keepdim=True)])"]
    result, module = _generate(tmp_path, body, [[rows, 33], [1]])
    reductions = [k for k in result.kernels if "reduction" in k["kind"]]
    assert len(reductions) == 1, result.kernels
    # the looped form accumulates the sum and M2 in one loop over the tiles (no second pass);
    # the loop walks this program's split of the rows (the whole extent when unsplit)
    assert result.source.count("for start in range(lo, hi, BLOCK_SIZE):") == 1


def test_an_outer_reduction_splits_its_rows_across_programs(tmp_path: Path) -> None:
    """A dim-1 max, min and mean of (3, 530, 37) and the map that reads them back: the tiled
    kernel can split the 530 rows across programs (partials per split, then each split's
    outputs from all of them); in the interpreter it does wherever the rows loop, so the
    partials' offsets past the first outer index and the splits' merge are checked against
    eager here."""
    body = ["m = x.amax(1, keepdim=True)", "n = x.amin(1, keepdim=True)",
            "return (x - x.mean(1, keepdim=True)) / (m - n + 1.0), x.std(1)"]
    result, _ = _generate(tmp_path, body, [[3, 530, 37], [1]])
    assert "tiled_reduction" in [k["kind"] for k in result.kernels], result.kernels
    assert "if PHASE == 2:" in result.source and "_tiled_split(" in result.source


@pytest.mark.parametrize("shape", [[1024, 64], [1000, 64], [1024, 48]])
def test_whole_tiles_drop_their_masks_and_still_match_eager(tmp_path: Path, shape: list[int]) -> None:
    """EVEN (every tile of every split whole: 1024 rows in two splits of 64-row tiles, 64
    columns in one 64-wide block) takes the unmasked path with one reciprocal per step; 1000
    rows or 48 columns keep the masked one. Both against eager, split and looped."""
    body = ["return (x - x.mean(0)) / (x.std(0) + 1e-5), x.var(0)"]
    result, module = _generate(tmp_path, body, [shape, [1]])
    assert "if EVEN:" in result.source and "(1.0 / lane_" in result.source
    (name,) = module.KOPT_CONFIG
    cfg = module._launch_config(name, "tiled_reduction", shape[0], shape[1])
    split = module._tiled_split(-(-shape[1] // cfg["BLOCK_C"]), shape[0], cfg["BLOCK_SIZE"])
    assert split == 2 and shape[0] > cfg["BLOCK_SIZE"]  # split, and each split loops
    even = shape[1] % cfg["BLOCK_C"] == 0 and shape[0] % (split * cfg["BLOCK_SIZE"]) == 0
    assert even == (shape == [1024, 64])


def test_long_rows_layer_norm_reads_the_row_twice_not_three_times(tmp_path: Path) -> None:
    result, module = _generate(tmp_path, ["return F.layer_norm(x, (16411,)) * 2.0"], [[2, 16411], [1]])
    (kernel,) = result.kernels
    looped = result.source.split("else:  # a long row")[1].split("\ndef ")[0]
    assert looped.count("for start in range(0, n_cols, BLOCK_SIZE):") == 2  # statistics, then outputs


def test_a_looped_variance_takes_one_reciprocal_a_step_and_narrower_blocks(tmp_path: Path) -> None:
    """A row longer than a block keeps a Welford state per lane; only the loop's last block is
    partial, so the step's count replaces a division per element, and such a kernel starts
    from 2048-wide blocks (LOOP_VARIANCE_DEFAULT: measured on group norm statistics), a plain
    long sum from 4096 (LOOP_DEFAULT). Against eager with a partial last block."""
    result, module = _generate(tmp_path, ["return F.layer_norm(x, (16411,)) * 2.0"], [[2, 16411], [1]])
    looped = result.source.split("else:  # a long row")[1].split("\ndef ")[0]
    assert "* (1.0 / lane_" in looped and "/ tl.maximum(w" not in looped
    (cfg,) = module.KOPT_CONFIG.values()
    assert cfg["BLOCK_SIZE"] == 2048
    (tmp_path / "sum").mkdir()
    _, plain = _generate(tmp_path / "sum", ["return x.sum(1) * 2.0"], [[2, 16411], [1]])
    (cfg,) = plain.KOPT_CONFIG.values()
    assert cfg["BLOCK_SIZE"] == 4096


def test_global_average_pool_follows_a_constructor_channel_count(tmp_path: Path) -> None:
    """Generated from the main set (as the pipeline does), verified on a smoke set whose
    constructor shrinks the channels: the merged reduction names no traced size (2026-11-25:
    `reshape([N, 128, -1])` crashed three KernelBench level-2 problems on smoke)."""
    case = _constructor_case(
        tmp_path, "gap", "channels",
        ["self.conv = nn.Conv2d(3, channels, 3)",
         "self.bias = nn.Parameter(torch.randn(channels, 1, 1))"],
        ["y = self.conv(x)", "return torch.tanh(y.mean(dim=(2, 3), keepdim=True) + self.bias)"],
        "channels: 24", [4, 3, 18, 18], "channels: 8", [2, 3, 11, 13])
    _accepted_on_cpu(tmp_path, case, generate_candidate(case).source)


@pytest.mark.parametrize(("shape", "groups"), [([7, 12], 4), ([3, 6, 5, 7], 3)])
def test_group_norm_is_lowered_to_reductions(tmp_path: Path, shape: list[int], groups: int) -> None:
    """A group norm is a layer norm's statistics over each group (a view as (N, groups, -1))
    and a per-channel affine map: generated, nothing left to PyTorch (2026-11-25: six
    KernelBench level-2 problems ran `native_group_norm` in PyTorch with traced sizes)."""
    c = shape[1]
    body = [f"w = torch.linspace(0.5, 1.5, {c})", f"b = torch.linspace(-1.0, 1.0, {c})",
            f"return torch.relu(F.group_norm(x, {groups}, w, b) + 0.25)"]
    result, _ = _generate(tmp_path, body, [shape, [1]])
    assert result.kernels
    assert "group_norm" not in " ".join(u.get("op", "") for u in result.unfused), result.unfused


@pytest.mark.parametrize("shape", [[3, 12, 7, 5], [2, 256, 8, 8]])  # one stage; two stages
def test_what_follows_a_group_norm_runs_in_its_map_kernel(tmp_path: Path, shape: list[int]) -> None:
    """The map of a group norm walks x's own (N, C, *S) domain from per-channel statistics,
    so pointwise ops after it and a reduction over the channels are one kernel with it (level-2
    92's tanh, residual add and logsumexp): the statistics' kernel and that one, nothing
    written in the grouped layout and read back."""
    body = ["z = torch.tanh(F.group_norm(x, 4)) + x * y",
            "return torch.logsumexp(z, dim=1, keepdim=True)"]
    result, _ = _generate(tmp_path, body, [shape, [1, shape[1], 1, 1]])
    assert len(result.kernels) == (2 if shape[0] == 3 else 3), result.kernels
    assert "logsumexp" in result.kernels[-1]["name"] or \
        any(f.startswith("logsumexp") or "amax" in f for f in result.kernels[-1]["fuses"]), result.kernels


@pytest.mark.parametrize(("main", "split"), [([2, 256, 5, 7], True), ([40, 256, 5, 7], False)])
def test_a_group_norm_of_few_long_rows_takes_its_statistics_in_two_stages(
        tmp_path: Path, main: list[int], split: bool) -> None:
    """2 samples x 8 groups (16 rows) of 32 channels: each mean first over the spatial dim,
    a program per channel, then over the group's channels (KernelBench level-1 35: 56 rows of
    2 M elements ran at 0.37x eager on the H200); 40 samples (320 rows) keep one pass.
    Generated on main, verified on a smoke set whose constructor has other channels and groups,
    each region's PyTorch form too."""
    case = _constructor_case(
        tmp_path, "gn_split", "channels, groups", ["self.norm = nn.GroupNorm(groups, channels)"],
        ["return torch.tanh(self.norm(x)) * 2.0"],
        "channels: 256, groups: 8", main, "channels: 12, groups: 3", [3, 12, 4, 5])
    result = generate_candidate(case)
    assert not result.unfused, result.unfused
    assert ("_part_var" in result.source) is split  # each part's mean and variance in one pass
    _accepted_on_cpu(tmp_path, case, result.source)
    from kopt.phases.engineers.offline.regions import SWITCH, regions

    for region in regions(result.source):
        module = _load_candidate(result.source, tmp_path, f"gn_split_{region.name}")
        getattr(module, SWITCH)[region.name] = "torch"
        _check_case(case, module, "smoke")


@pytest.mark.parametrize(("layer", "main", "smoke"), [
    ("nn.Conv2d(3, channels, 3)", [4, 3, 18, 18], [2, 3, 11, 13]),
    ("nn.Linear(10, channels)", [8, 10], [5, 10]),  # the view joins the GEMM's epilogue
])
def test_group_norm_follows_a_constructor_channel_count(tmp_path: Path, layer: str,
                                                         main: list[int], smoke: list[int]) -> None:
    """Generated on main, verified on a smoke set whose constructor shrinks the channels and
    the groups: the group count follows its constructor argument, the channels per group and
    the spatial extent are read at run time, in the kernels and in each region's PyTorch form
    (KernelBench level-2 62 has 512 groups on main, 48 on smoke)."""
    case = _constructor_case(
        tmp_path, "gn", "channels, groups",
        [f"self.conv = {layer}", "self.norm = nn.GroupNorm(groups, channels)"],
        ["return torch.tanh(self.norm(self.conv(x))) * 2.0"],
        "channels: 24, groups: 4", main, "channels: 12, groups: 2", smoke)
    result = generate_candidate(case)
    assert "group_norm" not in " ".join(u.get("op", "") for u in result.unfused), result.unfused
    _accepted_on_cpu(tmp_path, case, result.source)
    # each region's PyTorch form too (a view there once baked the traced channels per group)
    from kopt.phases.engineers.offline.regions import SWITCH, regions

    for region in regions(result.source):
        module = _load_candidate(result.source, tmp_path, f"gn_{region.name}")
        getattr(module, SWITCH)[region.name] = "torch"
        _check_case(case, module, "smoke")


def test_a_split_size_the_constructor_fixes_follows_it(tmp_path: Path) -> None:
    """`qkv.split(self.width, dim=-1)` (KernelBench level-3 50's attention): the split size is
    a constructor argument's value, read from the constructor at run time, so the candidate
    generated at width 16 runs at smoke's width 8 (it split 8 * 3 columns into three of 16)."""
    case = _constructor_case(
        tmp_path, "qkvsplit", "width",
        ["self.width = width", "self.qkv = nn.Linear(width, 3 * width)"],
        ["q, k, v = self.qkv(x).split(self.width, dim=-1)", "return torch.tanh(q) * k + v"],
        "width: 16", [5, 16], "width: 8", [3, 8])
    result = generate_candidate(case)
    assert "[kopt_width, kopt_width, kopt_width]" in result.source, result.source
    _accepted_on_cpu(tmp_path, case, result.source)


def test_narrow_rows_share_a_program_and_match_eager(tmp_path: Path) -> None:
    """Rows narrower than ROW_TILE are reduced ROWS at a time: 91 rows of 40 (ROWS 32, the last
    program's rows partly masked), softmax and a layer norm's statistics, against eager."""
    body = ["s = torch.softmax(x, dim=-1)", "return F.layer_norm(s * 3.0, (40,)) + s"]
    result, module = _generate(tmp_path, body, [[7, 13, 40], [1]])
    assert "ROWS: tl.constexpr" in result.source
    assert "tl.arange(0, ROWS)" in result.source
    launch = next(v for k, v in vars(module).items() if k.startswith("_launch_config"))
    # the interpreter (which ran the comparison above) takes 64 rows a program: two programs,
    # the second partly masked; a GPU takes ROW_TILE's 32
    interpreted = launch(result.kernels[0]["name"], "reduction", 40, 91)
    assert interpreted["ROWS"] == 64 and interpreted["BLOCK_SIZE"] == 64
    module._INTERPRETED = False
    cfg = launch(result.kernels[0]["name"], "reduction", 40, 91)
    assert cfg["ROWS"] == 32 and cfg["BLOCK_SIZE"] == 64
    assert launch(result.kernels[0]["name"], "reduction", 40, 3)["ROWS"] == 4  # few rows: fewer lanes
    # the GPU's tiling (three programs, the last partly masked) run through the interpreter too
    _check_case(load_case_dir(_write_case(tmp_path, body, [[7, 13, 40], [1]], "float32")), module,
                "main", seed=6)


@pytest.mark.parametrize("expr", [
    "torch.min(x, dim=1, keepdim=True)[0] * 2.0",
    "torch.tanh(x.max(dim=-1).values) + 1.0",
    "torch.softmax(torch.min(x, dim=2)[0], dim=1)",
])
def test_max_and_min_over_a_dim_whose_indices_are_unused_are_generated(tmp_path: Path, expr: str) -> None:
    """`x.max(dim).values` is an amax when nothing reads the indices (KernelBench level-2
    problems like Conv2d_Scaling_Min were rejected for this PyTorch fallback)."""
    result, _ = _generate(tmp_path, [f"return {expr}"], [[3, 5, 7, 9], [1]])
    assert result.kernels
    assert not result.unfused, result.unfused


def test_max_over_a_dim_whose_indices_are_read_stays_in_pytorch(tmp_path: Path) -> None:
    result, _ = _generate(tmp_path, ["v, i = x.max(dim=1)", "return v * 2.0 + i.float()"],
                          [[3, 5, 7], [1]])
    assert any("indices" in u["reason"] for u in result.unfused), result.unfused


def test_a_view_keeps_sizes_it_shares_with_its_input(tmp_path: Path) -> None:
    """`x.view(b, c, -1)` with c a constructor channel count: the candidate reads c from x
    (`v.shape[1]`) or from the constructor (`kopt_channels`, the convolution's output size
    fitted from a second trace) instead of baking the traced 24 (KernelBench level-2 38 ran
    its softmax over a sixteenth of each row on smoke)."""
    case = _constructor_case(
        tmp_path, "view", "channels", ["self.conv = nn.Conv2d(3, channels, 3)"],
        ["y = torch.clamp(self.conv(x), -1.0, 1.0)", "b, c, h, w = y.shape",
         "y = torch.softmax(y.view(b, c, -1), dim=2)", "return y.view(b, c, h, w) * 2.0"],
        "channels: 24", [4, 3, 18, 18], "channels: 6", [2, 3, 11, 13])
    result = generate_candidate(case)
    assert ".shape[1], -1]" in result.source or "kopt_channels, -1]" in result.source
    assert ", 24, -1]" not in result.source
    _accepted_on_cpu(tmp_path, case, result.source)


@pytest.mark.parametrize(("expr", "shape"), [
    ("F.max_pool1d(x, 3)", [2, 5, 31]),                     # 31 = 10 windows + 1 left over
    ("F.avg_pool1d(x, 4)", [3, 2, 17]),
    ("F.max_pool2d(x, 2)", [2, 3, 9, 11]),
    ("F.max_pool2d(x, (2, 3), stride=(2, 3))", [2, 3, 8, 13]),
    ("F.avg_pool2d(x, 3)", [2, 3, 10, 7]),
    ("F.max_pool3d(x, 2)", [2, 3, 5, 7, 9]),
    ("F.avg_pool3d(x, (1, 2, 2))", [2, 3, 5, 7, 9]),
    ("nn.MaxPool3d(3)(nn.MaxPool3d(2)(x))", [1, 2, 13, 15, 14]),  # a pool of a pool
])
def test_pooling_windows_that_tile_the_input_are_one_kernel(tmp_path: Path, expr: str,
                                                             shape: list[int]) -> None:
    """A max or average pool whose stride is its window (the default, KernelBench's level-2
    problems 6, 10, 72, 78 and 98) is a pointwise op over the window's taps, each a strided
    slice of x: one kernel with its epilogue, sizes that do not divide left over as PyTorch
    does (floor), nothing left to PyTorch's pooling. A pool of a pool stays two kernels (the
    inner one computed at the outer one's taps would load the product of the windows)."""
    result, _ = _generate(tmp_path, [f"return torch.tanh({expr}) * 2.0"], [shape, [1]])
    assert not result.unfused, result.unfused
    pools = expr.lower().count("pool")
    assert [k["kind"] for k in result.kernels] == ["pointwise"] * pools, result.kernels


@pytest.mark.parametrize("expr, shape", [
    ("F.max_pool2d(x, 3, stride=2)", [2, 3, 19, 21]),  # overlapping windows
    ("F.avg_pool2d(x, 2, padding=1)", [2, 3, 19, 21]),
    ("F.max_pool2d(x, 9)", [2, 3, 19, 21]),  # 81 taps: masked taps, not 81 strided views
    ("F.max_pool1d(x, 8, stride=1, padding=4, dilation=3)", [2, 3, 40]),
    ("F.max_pool3d(x, 3, stride=2, padding=1, dilation=3)", [1, 2, 13, 11, 12]),
    ("F.avg_pool3d(x, 3, stride=2, padding=1)", [1, 2, 9, 11, 12]),
    ("F.avg_pool1d(x, 8, stride=1, padding=4)", [2, 3, 40]),
    ("F.max_pool2d(x, 3, stride=2, ceil_mode=True)", [2, 3, 20, 21]),  # a partial last window
    ("F.max_pool2d(x, 2, ceil_mode=True)", [2, 3, 19, 21]),  # ceil mode over tiling windows
    ("F.max_pool1d(x, 3, stride=2, padding=1, ceil_mode=True)", [2, 3, 16]),  # last window dropped
])
def test_padded_overlapping_and_dilated_poolings_are_one_kernel(tmp_path: Path, expr: str,
                                                                 shape: list[int]) -> None:
    """Any floor-mode pooling (KernelBench level-1 41-46), and a ceil-mode max (level-3
    SqueezeNet): one masked load of x per tap of the window, -inf (max) or 0 (average, the
    padding counted) outside x, with its epilogue."""
    result, _ = _generate(tmp_path, [f"return torch.relu({expr}) + 1.0"], [shape, [1]])
    assert not result.unfused, result.unfused
    assert [k["kind"] for k in result.kernels] == ["pointwise"], result.kernels


def test_a_pooling_region_has_a_pytorch_form_that_matches(tmp_path: Path) -> None:
    """Every region switched alone to PyTorch (the accelerator's and suite's region choice):
    the pooling's form is pad-then-slice, the two-stage mean's divisor a whole expression."""
    from kopt.phases.engineers.offline.regions import apply_region_choices, region_space

    body = ["return F.max_pool2d(x, 3, stride=2, padding=1) * x.mean() + "
            "F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)[..., :10, :11]"]
    shape = [2, 3, 20, 21]  # ceil mode: 11 x 11 windows, floor mode 10 x 11
    result, _ = _generate(tmp_path, body, [shape, [1]])
    space = region_space(result.source)
    assert len(space) >= 3, space
    case = load_case_dir(_write_case(tmp_path, body, [shape, [1]], "float32"))
    for key in space:
        source = apply_region_choices(result.source, {k: "torch" if k == key else "triton"
                                                      for k in space})
        module = _load_candidate(source, tmp_path, f"{case.name}_{key.split('/')[-1]}")
        _check_case(case, module, "main", seed=3)


@pytest.mark.parametrize("expr", [
    "F.avg_pool2d(x, 2, ceil_mode=True)",  # a partial window divides by its clipped extent
    "F.avg_pool2d(x, 3, padding=1, count_include_pad=False)",
])
def test_other_poolings_stay_in_pytorch_and_match_eager(tmp_path: Path, expr: str) -> None:
    result, _ = _generate(tmp_path, [f"return torch.relu({expr}) + 1.0"], [[2, 3, 19, 21], [1]])
    assert any("pool" in u["reason"] for u in result.unfused), result.unfused


def test_max_pool_whose_indices_are_read_stays_in_pytorch(tmp_path: Path) -> None:
    result, _ = _generate(tmp_path, ["v, i = F.max_pool2d(x, 2, return_indices=True)",
                                     "return v + i.float()"], [[2, 3, 8, 8], [1]])
    assert any("pool" in u["reason"] for u in result.unfused), result.unfused


def test_pooling_follows_the_smoke_sets_sizes(tmp_path: Path) -> None:
    """Generated on main (31 = ten windows of 3 and one left over, after a pool of 2), verified
    on a smoke set whose spatial sizes and channels differ (13: four windows and one left
    over): the window counts and the cut are read at run time."""
    case = _constructor_case(
        tmp_path, "pool", "channels",
        ["self.conv = nn.Conv3d(2, channels, 3)", "self.p1 = nn.MaxPool3d(2)",
         "self.p2 = nn.AvgPool3d(3)"],
        ["return torch.sigmoid(self.p2(self.p1(torch.relu(self.conv(x))))).sum(dim=1)"],
        "channels: 6", [2, 2, 64, 66, 65], "channels: 4", [2, 2, 28, 30, 29])
    result = generate_candidate(case)
    assert not result.unfused or all("convolution" in u["op"] for u in result.unfused), result.unfused
    _accepted_on_cpu(tmp_path, case, result.source)


def test_a_bare_copy_of_a_layout_change_runs_only_where_a_copy_is_needed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`.t().contiguous()` between two products (attention's output transposed back to
    (B, S, H, D)): the forward checks the value's layout and takes it as it is when it is
    contiguous already (flash attention's output often is: no copy at all), else the
    generated copy kernel makes the copy (PyTorch's own copy of a permuted 4-D view is its
    slow strided loop). Here the value is transposed, so the kernel runs; with the region
    set to PyTorch, torch's contiguous() does; both match eager."""
    body = ["z = (x @ y.t()).t().contiguous()", "return torch.relu(z @ x)"]
    result, module = _generate(tmp_path, body, [[13, 7], [9, 7]])
    assert [k["kind"] for k in result.kernels] == ["matmul", "pointwise", "matmul"], result.kernels
    copy = next(k for k in result.kernels if k["kind"] == "pointwise")
    group = copy["name"].split("_")[1]  # _g1_..._kernel -> g1
    assert f'.is_contiguous() or KOPT_REGIONS["{group}"] != "triton":' in result.source
    launches = []
    real = getattr(module, f"_launch_{group}")
    monkeypatch.setattr(module, f"_launch_{group}", lambda *a: launches.append(1) or real(*a))
    case = load_case_dir(_write_case(tmp_path, body, [[13, 7], [9, 7]], "float32"))
    _check_case(case, module, "main", seed=6)
    assert launches, "a transposed value was not copied by the generated kernel"
    monkeypatch.setitem(module.KOPT_REGIONS, group, "torch")
    launches.clear()
    _check_case(case, module, "main", seed=7)
    assert not launches


@pytest.mark.parametrize("shape", [[3, 5, 37], [15, 37]])  # through the product's view; 2-D
def test_a_residual_add_after_a_library_product_runs_in_the_layer_norm(tmp_path: Path,
                                                                        shape: list[int]) -> None:
    """`layer_norm(x + h)` with h a product cuBLAS computes (float32, strict): the add (and
    the other use of the sum) run in the norm's kernel, the product stays bare: no epilogue
    kernel writes the sum for the norm to read back."""
    body = ["h = (x.reshape(-1, x.shape[-1]) @ y * 0.5).reshape(x.shape)", "s = x + h",
            "return F.layer_norm(s, (s.shape[-1],)), s * 2.0"]
    result, _ = _generate(tmp_path, body, [shape, [37, 37]])
    kinds = {k["kind"]: k["fuses"] for k in result.kernels}
    assert sorted(kinds) == ["matmul", "reduction"], result.kernels
    assert not any(f.startswith("add") for f in kinds["matmul"]), kinds  # (the scale may stay)
    assert any(f.startswith("add") for f in kinds["reduction"]), kinds
    assert any(f.startswith("mul") for f in kinds["reduction"]), kinds  # s * 2.0


def test_a_gated_mlp_on_3d_activations_applies_both_epilogues_in_one_kernel(tmp_path: Path) -> None:
    """`silu(x @ Wg) * (x @ Wu)` through the products' views to (B, S, N): the gate's SiLU
    moves into the up product's epilogue, so the gate is a bare product (no kernel of its own
    on cuBLAS) and one kernel reads both products once."""
    body = ["b, s, d = x.shape",
            "gate = (x.reshape(-1, d) @ y).view(b, s, -1)",
            "up = (x.reshape(-1, d) @ y.t()).view(b, s, -1)",
            "return F.silu(gate) * up"]
    result, _ = _generate(tmp_path, body, [[2, 5, 16], [16, 16]])
    fused = [k["fuses"] for k in result.kernels if k["kind"] == "matmul"]
    assert len(fused) == 2, result.kernels
    assert sum(any("sigmoid" in f or "silu" in f for f in fs) for fs in fused) == 1, fused
    assert any(all(f.startswith(("mm", "view")) for f in fs) for fs in fused), fused


def test_a_query_made_from_a_permuted_view_keeps_its_layout_for_attention(tmp_path: Path) -> None:
    """A pointwise kernel on a (B, S, H, D) projection seen as (B, H, S, D) writes its output in
    the projection's layout when only attention reads it: attention then returns (B, S, H, D)
    memory and the transpose back is free. Its outputs match eager's."""
    body = ["b, s = x.shape[0], x.shape[1]",
            "q = (x @ y).view(b, s, 3, 8).transpose(1, 2)",
            "q = q * torch.sigmoid(q) + 1.0",
            "o = F.scaled_dot_product_attention(q, q, q)",
            "return o.transpose(1, 2).reshape(b, s, 24)"]
    result, module = _generate(tmp_path, body, [[2, 5, 24], [24, 24]])
    # allocated dense in the projection's (B, S, H, D) order, seen as (B, H, S, D)
    assert "dtype=torch.float32).permute(0, 2, 1, 3)  # " in result.source
    assert "laid out like" in result.source


@pytest.mark.parametrize("block", [16, 64])
@pytest.mark.parametrize(("seq", "heads"), [(5, 3), (4, 4)])
def test_a_kernel_laid_out_like_a_permuted_view_walks_its_memory_order(
        tmp_path: Path, block: int, seq: int, heads: int) -> None:
    """The rotary-style kernel on a (B, S, H, D) projection seen as (B, H, S, D) walks the
    domain in the projection's memory order (B, S, H, D), so that the view and the output are
    read and written at the flat index; an operand broadcast along (S, D) and the rotation's
    two halves are read at coordinates decoded in that order. Small blocks put every wrap in
    play, on the flat path (the view dense in that order) and on the coordinate path, at two
    sizes. The head count and width, fixed in the traced program, are the kernel's constexprs
    (batch and sequence stay run-time sizes)."""
    import torch

    f = 8 * heads
    body = ["b, s = x.shape[0], x.shape[1]",
            "z = y[:s, :8]",
            f"q = (x @ y).view(b, s, {heads}, 8).transpose(1, 2)",
            "rot = torch.cat((-q[..., 4:], q[..., :4]), dim=-1)",
            "q = q * z + rot * z.sin()",
            "o = F.scaled_dot_product_attention(q, q, q)",
            f"return o.transpose(1, 2).reshape(b, s, {f})"]
    result, module = _generate(tmp_path, body, [[2, seq, f], [f, f]])
    assert "memory order, dims (0, 2, 1, 3)" in result.source, result.source
    assert re.search(r"X(\d)_CONTIG=_dense_walk\(x\1, D, \(0, 2, 1, 3\)\)", result.source)
    at = result.source.index("memory order, dims (0, 2, 1, 3)")
    walker = result.source[result.source.rindex("@triton.jit", 0, at):result.source.index("\n\n\n", at)]
    assert "D1: tl.constexpr," in walker and "D3: tl.constexpr," in walker, walker
    assert "D0: tl.constexpr," not in walker and "D2: tl.constexpr," not in walker
    module.KOPT_GRAPH = False
    module.INTERPRETER_TILE = block
    for k in module.KOPT_CONFIG:
        if "BLOCK_SIZE" in module.KOPT_CONFIG[k]:
            module.KOPT_CONFIG[k]["BLOCK_SIZE"] = block
    gen = torch.Generator().manual_seed(seq * 100 + block)
    # scaled so that attention's softmax stays soft: the product's float32 sums in another
    # order must not be amplified past float32's tolerance by a near-one-hot row
    x, y = torch.randn(2, seq, f, generator=gen) * 0.3, torch.randn(f, f, generator=gen) * 0.3
    z = y[:seq, :8]
    q = (x @ y).view(2, seq, heads, 8).transpose(1, 2)
    q = q * z + torch.cat((-q[..., 4:], q[..., :4]), dim=-1) * z.sin()
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(2, seq, f)
    dense_walk = module._dense_walk
    assert dense_walk(q.detach().transpose(1, 2).contiguous().transpose(1, 2), tuple(q.shape), (0, 2, 1, 3))
    assert not dense_walk(q.detach().contiguous(), tuple(q.shape), (0, 2, 1, 3))
    for flat in (True, False):
        module._dense_walk = dense_walk if flat else (lambda *_: False)
        torch.testing.assert_close(module.ModelNew()(x, y), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rotary_half_rotation_with_a_negated_part_is_one_kernel(tmp_path: Path, dtype: str) -> None:
    """RoPE's `cat((-x2, x1))`: the concatenation negates its part as it copies it, so no
    kernel writes `-x2` first (LLaMA's block had one such kernel for q and one for k)."""
    body = ["h = x.shape[-1] // 2",
            "rot = torch.cat((-x[..., h:], x[..., :h].abs()), dim=-1)",
            "return x * torch.cos(y) + rot * torch.sin(y)"]
    result, _ = _generate(tmp_path, body, [[3, 5, 18], [3, 5, 18]], dtype)
    assert [k["kind"] for k in result.kernels] == ["pointwise"], result.kernels


@pytest.mark.parametrize("block", [16, 32])
@pytest.mark.parametrize("shape", [[3, 5, 37], [2, 3, 7, 19], [40, 9], [3, 4, 8], [2, 3, 64]])
def test_coordinates_without_division_match_at_small_blocks(tmp_path: Path, block: int,
                                                            shape: list[int]) -> None:
    """A coordinate whose span reaches a block is picked from two per-program scalars; one
    whose span does not divides per element. Small blocks put both paths and every wrap in
    play (the interpreter otherwise widens blocks past every span)."""
    import torch

    from kopt.harness.case import load_case_dir
    from tests.test_offline import _write_case

    ones = [1] * (len(shape) - 2)
    body = ["return torch.sigmoid(x) * y + x"]
    # y broadcasts along every dim but the first: its coordinate's span is the rest
    case = load_case_dir(_write_case(tmp_path, body, [shape, [shape[0], 1, *ones]], "float32"))
    result = generate_candidate(case)
    module = _load_candidate(result.source, tmp_path, f"blocks_{block}_{len(shape)}")
    assert "if span0 >= BLOCK_SIZE:" in result.source
    module.INTERPRETER_TILE = block
    for k in module.KOPT_CONFIG:
        module.KOPT_CONFIG[k]["BLOCK_SIZE"] = block
    x = torch.randn(shape)
    y = torch.randn(shape[0], 1, *ones)
    got = module.ModelNew()(x, y)
    torch.testing.assert_close(got, torch.sigmoid(x) * y + x)


def test_a_masked_fill_after_a_product_runs_in_its_epilogue(tmp_path: Path) -> None:
    """`(q @ k.T) * scale`, then `masked_fill(mask, -inf)` and a ReLU (KernelBench level-3
    50): the fill value is a constant, so the select and the ReLU join the product's epilogue
    (one pass over the scores, as torch.compile's) instead of a second kernel that reads the
    scaled scores back. Matches eager."""
    body = ["a = (x @ y.t()) * 0.5",
            "a = a.masked_fill(y[:, 0] > 0.0, float('-inf'))",
            "return torch.relu(a)"]
    result, _ = _generate(tmp_path, body, [[13, 7], [9, 7]])
    fused = [k["fuses"] for k in result.kernels if k["kind"] == "matmul"]
    assert len(fused) == 1 and any(f.startswith("where") for f in fused[0]) and \
        any(f.startswith("relu") for f in fused[0]), result.kernels


def test_a_key_copied_for_its_transpose_is_written_without_it(tmp_path: Path) -> None:
    """`q @ k.transpose(-2, -1)` on heads split from a projection: export copies the transposed
    key (expand, clone, view, bmm). The copy is written in the key's own order of its last
    two dims (dense as (B, H, S, D), viewed as (B, H, D, S)), so its loads and stores run along
    the same contiguous dim and the product reads the transposed matrix as it is; the query's
    copy stays row-major. Matches eager, at the traced sizes and at others."""
    from kopt.phases.engineers.offline.capture import capture
    from kopt.phases.engineers.offline.fusion import partition

    body = ["b, s = x.shape[0], x.shape[1]",
            "q = (x @ y).view(b, s, 2, 4).transpose(1, 2)",
            "k = (x @ y.t()).view(b, s, 2, 4).transpose(1, 2)",
            "return torch.relu(q @ k.transpose(-2, -1))"]
    result, _ = _generate(tmp_path, body, [[3, 5, 8], [8, 8]])
    assert "laid out without the transpose of" in result.source
    case = load_case_dir(_write_case(tmp_path, body, [[3, 5, 8], [8, 8]], "float32"))
    walks = [g.walk for g in partition(capture(case, "main").graph).groups if g.copy_of is not None]
    assert sorted(walks, key=str) == [(0, 1, 3, 2), None], walks
    module = _load_candidate(result.source, tmp_path, case.name + "_b")
    _check_case(load_case_dir(_write_case(tmp_path / "other", body, [[2, 7, 8], [8, 8]], "float32")),
                module, "main", seed=8)


def test_a_model_of_copies_only_keeps_one_that_always_runs(tmp_path: Path) -> None:
    """Where every kernel would be a copy skipped when its input is laid out already, one of
    them always runs: a candidate must launch Triton (`triton_launched`), and a model whose
    values all come out contiguous would otherwise launch nothing. Matches eager."""
    body = ["o1 = F.scaled_dot_product_attention(x, y, y).transpose(1, 2).contiguous()",
            "o2 = F.scaled_dot_product_attention(y, x, x).transpose(1, 2).contiguous()",
            "return F.scaled_dot_product_attention(o1, o2, o2)"]
    result, _ = _generate(tmp_path, body, [[2, 3, 5, 8], [2, 3, 5, 8]])
    assert [k["kind"] for k in result.kernels] == ["pointwise", "pointwise"], result.kernels
    assert result.source.count(".is_contiguous() or KOPT_REGIONS[") == 1, result.source


def test_a_products_epilogue_view_reads_the_products_sizes_from_its_operands(tmp_path: Path) -> None:
    """A product's epilogue view (`(B*T, N)` back to `(B, T, N)`) whose T export fixed (here
    by a position table the constructor sizes) is computed inside the product's kernel, where
    forward holds no tensor to read T from: N comes from the weight's columns and T becomes
    the -1, so a smoke constructor with a shorter table runs (a MinGPT-style probe kept main's
    T=128 on smoke's 64, 2026-11-30)."""
    case = _constructor_case(
        tmp_path, "posfc", "seq",
        ["self.pos = nn.Parameter(torch.randn(seq, 12))", "self.fc = nn.Linear(12, 20)"],
        ["return torch.relu(self.fc(x + self.pos))"],
        "seq: 16", [3, 16, 12], "seq: 8", [2, 8, 12])
    result = generate_candidate(case)
    assert any(k["kind"] == "matmul" for k in result.kernels), result.kernels
    _accepted_on_cpu(tmp_path, case, result.source)


def test_a_reduction_of_a_value_computed_from_shapes_alone(tmp_path: Path) -> None:
    """Cross entropy against `arange` labels (InfoNCE) counts its valid labels as
    `sum(arange(n) != -100)`: a reduction whose input is recomputed from coordinates, not
    loaded. Codegen raised KeyError on it (a user-written model, 2026-12-03)."""
    case = _constructor_case(
        tmp_path, "arange_labels", "scale",
        ["self.scale = scale"],
        ["logits = x @ x.t() * self.scale",
         "labels = torch.arange(x.shape[0], device=x.device)",
         "return nn.functional.cross_entropy(logits, labels)"],
        "scale: 2", [9, 16], "scale: 3", [7, 16])
    _accepted_on_cpu(tmp_path, case, generate_candidate(case).source)
