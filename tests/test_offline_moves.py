"""Pointwise ops moved to where a reduction or a pooling can compute them (issue 18's fusion
rules): across a reshape into a softmax over flattened dims (`reshapes.py`), and into the taps
of a pooling that reads them (`window_prologues.py`). Each candidate is checked against eager
in the CPU interpreter on odd sizes, on the main set and on a smoke set whose constructor
changes the channel count."""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt.phases.engineers.offline import generate_candidate
from kopt.phases.engineers.offline.reshapes import dim_groups, reshaped_broadcast
from tests.test_offline import _check_case, _load_candidate
from tests.test_offline_fusion import _constructor_case


@pytest.mark.parametrize(("src", "dst", "groups"), [
    ((2, 3, 4, 5), (2, 3, 20), [((0,), (0,)), ((1,), (1,)), ((2, 3), (2,))]),
    ((6, 20), (2, 3, 4, 5), [((0,), (0, 1)), ((1,), (2, 3))]),
    ((2, 1, 6), (2, 6, 1), [((0,), (0,)), ((1, 2), (1, 2))]),
    ((4, 6), (3, 8), [((0, 1), (0, 1))]),
])
def test_dim_groups_pair_the_dims_a_reshape_merges_or_splits(src, dst, groups) -> None:
    got = [(tuple(a), tuple(b)) for a, b in dim_groups(src, dst)]
    assert got == groups


@pytest.mark.parametrize(("operand", "src", "dst", "want"), [
    ((5, 1, 1, 1), (2, 5, 3, 4, 6), (2, 5, 72), (1, 5, 1)),     # a conv bias, spatial flattened
    ((1, 5, 1), (2, 5, 72), (2, 5, 3, 4, 6), (1, 5, 1, 1, 1)),  # and back
    ((3, 4, 6), (2, 5, 3, 4, 6), (2, 5, 72), (1, 1, 72)),       # full over the merged dims
    ((1, 1, 6), (2, 5, 3, 4, 6), (2, 5, 72), None),             # broadcast within them
    ((5, 1), (5, 12), (10, 6), None),                            # a split across the channel
])
def test_a_broadcast_operand_reshapes_only_when_each_group_is_all_full_or_all_broadcast(
        operand, src, dst, want) -> None:
    assert reshaped_broadcast(operand, src, dst) == want


def _conv3d_case(tmp: Path, name: str, forward: list[str], extra: list[str] | None = None):
    return _constructor_case(
        tmp, name, "c", ["self.conv = nn.Conv3d(3, c, 3)", "self.scale = nn.Parameter(torch.randn(1, c, 1, 1, 1))",
                         *(extra or [])],
        forward, "c: 6", [2, 3, 5, 6, 7], "c: 5", [2, 3, 4, 5, 6])


def _generated(tmp: Path, case, name: str):
    result = generate_candidate(case)
    module = _load_candidate(result.source, tmp, name)
    for input_set in ("main", "smoke"):
        _check_case(case, module, input_set)
    return result


def test_a_softmax_over_flattened_dims_takes_the_ops_on_both_sides_of_its_views(tmp_path: Path) -> None:
    # KernelBench level-2 38's shape of forward: clamp, view(b, c, -1), softmax, view back, scale
    case = _conv3d_case(tmp_path, "view_softmax", [
        "y = torch.clamp(self.conv(x), -0.4, 0.4)",
        "b, ch, d, h, w = y.shape",
        "y = torch.softmax(y.view(b, ch, -1), dim=2).view(b, ch, d, h, w)",
        "return y * self.scale"])
    result = _generated(tmp_path, case, "view_softmax")
    (kernel,) = result.kernels
    assert {"convolution_bias", "clamp", "_softmax"} <= set(kernel["fuses"])
    assert any(f.startswith("mul") for f in kernel["fuses"])


def test_an_operand_broadcast_inside_the_flattened_dims_stays_before_the_view(tmp_path: Path) -> None:
    # (1, 1, 1, 1, W) varies inside the merged (D, H, W): it has no (B, C, D*H*W) form, so the
    # add stays a kernel of its own; the result still matches
    case = _conv3d_case(tmp_path, "view_row", [
        "y = self.conv(x) + self.row",
        "b, ch = y.shape[:2]",
        "return torch.softmax(y.view(b, ch, -1), dim=2)"],
        extra=["self.row = nn.Parameter(torch.randn(1, 1, 1, 1, c - 1))"])  # W = c - 1 in both sets
    result = _generated(tmp_path, case, "view_row")
    assert len(result.kernels) == 2


def test_an_instance_norm_and_what_reads_it_back_share_the_samples_layout(tmp_path: Path) -> None:
    """KernelBench level-2 79's shape of forward: a convolution times a per-channel scale,
    instance norm (which PyTorch runs on an (1, N*C, *S) view), clamp, the scale again and a
    max over channels. The statistics are taken on the (N, C, *S) value itself, so the map
    and the max after the view back are one kernel, and the cheap scale before the view is
    computed again by the statistics kernel instead of written and read back: two kernels
    (torch.compile's two), against eager on both sets."""
    case = _conv3d_case(tmp_path, "inorm_max", [
        "y = self.norm(self.conv(x) * self.scale)",
        "return torch.max(torch.clamp(y, -1.0, 1.0) * self.scale, dim=1)[0]"],
        extra=["self.norm = nn.InstanceNorm3d(c)"])
    result = _generated(tmp_path, case, "inorm_max")
    assert len(result.kernels) == 2, result.kernels
    fused = [set(k["fuses"]) for k in result.kernels]
    assert all("convolution_bias" in f for f in fused)  # the bias and the scale read in both
    assert any("clamp" in f and any(m.startswith("max") for m in f) for f in fused), fused


def test_a_transcendental_before_the_view_is_not_computed_twice(tmp_path: Path) -> None:
    """Only cheap ops are copied into the statistics' kernel: a tanh before an instance norm
    read twice is written once by its own kernel (or the bias's), as before."""
    case = _conv3d_case(tmp_path, "inorm_tanh", [
        "return self.norm(torch.tanh(self.conv(x)))"], extra=["self.norm = nn.InstanceNorm3d(c)"])
    result = _generated(tmp_path, case, "inorm_tanh")
    assert sum("tanh" in k["fuses"] for k in result.kernels) == 1, result.kernels


def _conv2d_case(tmp: Path, name: str, pool: str):
    return _constructor_case(
        tmp, name, "c", ["self.conv = nn.Conv2d(3, c, 3)", "self.bias = nn.Parameter(torch.randn(c, 1, 1))"],
        ["y = torch.tanh(self.conv(x)) * 2.0 + self.bias", f"return {pool}"],
        "c: 6", [2, 3, 13, 12], "c: 5", [2, 3, 9, 10])


@pytest.mark.parametrize("pool", [
    "torch.nn.functional.max_pool2d(y, 2)",              # tiling windows (strided slices); 11 rows: one left over
    "torch.nn.functional.avg_pool2d(y, 3, stride=1)",    # overlapping windows (window taps)
])
def test_a_pooling_computes_the_pointwise_chain_before_it_at_its_taps(tmp_path: Path, pool: str) -> None:
    # KernelBench level-2 82 / 46: conv, pointwise epilogue, pooling -> the pooling's kernel
    # reads the convolution's output once and writes only the pooled values
    result = _generated(tmp_path, _conv2d_case(tmp_path, "tap_chain", pool), "tap_chain")
    (kernel,) = result.kernels
    assert {"convolution_bias", "tanh"} <= set(kernel["fuses"])


def test_the_convolutions_a_concatenation_reads_add_their_bias_in_its_kernel(tmp_path: Path) -> None:
    """A SqueezeNet fire module: two convolutions of one input, each through a ReLU, then
    concatenated along the channels. cuDNN runs both without their bias (ATen would add each
    in a pass of its own over the output) and the concatenation's kernel adds it as it copies
    each part; the main and the smoke set (other channel counts) against eager."""
    case = _constructor_case(
        tmp_path, "fire", "c",
        ["self.squeeze = nn.Conv2d(3, 4, 1)", "self.e1 = nn.Conv2d(4, c, 1)",
         "self.e3 = nn.Conv2d(4, c + 1, 3, padding=1)"],
        ["y = torch.relu(self.squeeze(x))",
         "return torch.cat([torch.relu(self.e1(y)), torch.relu(self.e3(y))], 1)"],
        "c: 6", [2, 3, 9, 10], "c: 5", [2, 3, 7, 6])
    result = _generated(tmp_path, case, "fire")
    calls = [line for line in result.source.splitlines() if "aten.convolution.default(" in line]
    assert len(calls) == 3 and all(", None, [" in line for line in calls), calls
    (cat,) = [k for k in result.kernels if any(f.startswith("cat") for f in k["fuses"])]
    assert {"convolution_1_bias", "convolution_2_bias"} <= set(cat["fuses"]), cat["fuses"]


def test_a_padded_pooling_leaves_the_chain_in_its_own_kernel(tmp_path: Path) -> None:
    # a padded tap reads -inf outside the input; tanh(-inf) is not -inf, so the chain stays
    result = _generated(tmp_path, _conv2d_case(
        tmp_path, "tap_padded", "torch.nn.functional.max_pool2d(y, 3, stride=2, padding=1)"), "tap_padded")
    assert len(result.kernels) == 2


def test_a_convolutions_bias_is_added_at_the_taps_of_the_pooling_after_it(tmp_path: Path) -> None:
    # ATen adds a cuDNN convolution's bias in a pass of its own; read only by a pooling, the
    # bias moves into the pooling's taps (the convolution runs without it)
    case = _constructor_case(tmp_path, "conv_pool", "c", ["self.conv = nn.Conv2d(3, c, 3)"],
                             ["return torch.relu(torch.nn.functional.max_pool2d(self.conv(x), 2))"],
                             "c: 6", [2, 3, 13, 12], "c: 5", [2, 3, 9, 10])
    result = _generated(tmp_path, case, "conv_pool")
    (kernel,) = result.kernels
    assert "convolution_bias" in kernel["fuses"]
    assert "aten.convolution.default(x, p_p_conv_weight, None," in result.source


def test_a_convolution_only_a_concatenation_reads_stays_in_cudnn(tmp_path: Path) -> None:
    # a cat's parts are clipped taps (0 outside the part): only the convolution's bias moves
    # past one (as a part of its own, 0 outside), and the forward convolution beside the
    # cat's kernel is cuDNN's (GoogleNet's inception branches: the implicit-GEMM template ran
    # them at half cuDNN's speed, `_forward_convolutions_to_cudnn`)
    case = _constructor_case(tmp_path, "conv_cat", "c", ["self.conv = nn.Conv2d(3, c, 3, padding=1)"],
                             ["return torch.cat([self.conv(x), x], dim=1)"],
                             "c: 6", [2, 3, 7, 6], "c: 5", [2, 3, 5, 6])
    result = _generated(tmp_path, case, "conv_cat")
    assert [k["kind"] for k in result.kernels] == ["pointwise"]
    assert "aten.convolution.default(x, p_p_conv_weight, None," in result.source


def test_a_global_average_pool_adds_the_convolutions_bias_as_it_loads(tmp_path: Path) -> None:
    # a mean over (H, W) reads the conv through a flatten of its spatial dims: the bias moves
    # across it into the reduction (ATen's bias pass over the whole output is gone) and the
    # convolution stays in cuDNN (KernelBench level-2 42)
    case = _constructor_case(tmp_path, "conv_gap", "c", ["self.conv = nn.ConvTranspose2d(3, c, 3)"],
                             ["return torch.mean(self.conv(x), dim=(2, 3), keepdim=True) * 2.0"],
                             "c: 6", [2, 3, 7, 6], "c: 5", [2, 3, 5, 6])
    result = _generated(tmp_path, case, "conv_gap")
    (kernel,) = result.kernels
    assert "convolution_bias" in kernel["fuses"] and kernel["kind"] != "conv"
    assert "aten.convolution.default(x, p_p_conv_weight, None," in result.source


def test_a_pooling_read_through_a_flatten_stays_one_kernel(tmp_path: Path) -> None:
    # the mean over (H, W) reads the max pool through a flatten; the pool's ops read strided
    # taps, which a flatten cannot view: nothing moves across it (moved, each tap's chain was
    # a kernel of its own: KernelBench level-2 8 went from 3 kernels to 10)
    case = _constructor_case(tmp_path, "pool_gap", "c", ["self.conv = nn.Conv2d(3, c, 3)"],
                             ["return torch.mean(torch.nn.functional.max_pool2d(self.conv(x) / 2.0, 2), dim=(2, 3))"],
                             "c: 6", [2, 3, 11, 10], "c: 5", [2, 3, 9, 10])
    result = _generated(tmp_path, case, "pool_gap")
    assert len(result.kernels) == 2
