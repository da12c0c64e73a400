"""Patterns from models written as users write them, none of them KernelBench's (a diffusion
block's group norm sized by its constructor, ALiBi's distance bias, a spatial transformer's
sampler, a spectral filter, attention written with einsum): each failed codegen outright
on 2026-12-02 before the change its test names. Each runs against eager in the Triton
interpreter on odd sizes.
"""

from __future__ import annotations

from pathlib import Path

from kopt.harness.case import load_case_dir
from tests.test_offline import _write_case
from tests.test_offline_fusion import _accepted_on_cpu, _constructor_case, _generate


def test_a_group_norm_sized_by_its_constructor_follows_it(tmp_path: Path) -> None:
    """`channels // groups` channels a group, fitted from two traces as `floor(128/groups)`
    with 128 the traced channels: torch's size printer refused the negative power (codegen
    failed), and a view sized so would have baked 128 in. The view now takes -1 there and the
    candidate is accepted at the smoke constructor, which changes the channels, not the
    groups."""
    case = _constructor_case(
        tmp_path, "gn_ctor", "channels, groups",
        ["self.norm = nn.GroupNorm(groups, channels)",
         "self.conv = nn.Conv2d(channels, channels, 3, padding=1)"],
        ["return self.conv(torch.nn.functional.silu(self.norm(self.conv(x))))"],
        "channels: 16, groups: 4", [2, 16, 6, 6], "channels: 8, groups: 4", [1, 8, 5, 5])
    from kopt.phases.engineers.offline import generate_candidate

    result = generate_candidate(case)
    _accepted_on_cpu(tmp_path, case, result.source)


def test_a_bias_over_fewer_dims_is_recomputed_in_the_softmax(tmp_path: Path) -> None:
    """ALiBi: a per-head slope times the key-query distance (aranges, a full-range slice of
    each) added to (batch, heads, q, k) scores, a causal fill, a softmax. The bias is a
    producer over fewer dims than its one reader: recomputed there, one kernel in all (codegen
    failed on the sliced range; then five kernels, the bias and the ranges stored)."""
    body = ["n = x.shape[-1]",
            "pos = torch.arange(n, device=x.device)",
            "dist = (pos[None, :] - pos[:, None]).float()",
            "bias = y[:, None, None] * dist",
            "causal = pos[None, :] > pos[:, None]",
            "return torch.softmax((x + bias).masked_fill(causal, float('-inf')), dim=-1)"]
    shapes = [[2, 3, 7, 7], [3]]
    result, _ = _generate(tmp_path, body, shapes)
    assert len(result.kernels) == 1, result.kernels
    case = load_case_dir(_write_case(tmp_path, body, shapes, "float32"))
    _accepted_on_cpu(tmp_path, case, result.source)


def test_a_spatial_transformer_samples_from_a_stored_grid(tmp_path: Path) -> None:
    """`affine_grid` pads its base grid (ranges) with ones: a pad of a value computed from
    coordinates, which a window tap cannot load, so the grid is stored by a kernel of its own
    first (codegen failed with a KeyError on it); `grid_sample` follows. Accepted."""
    body = ["theta = y.view(-1, 2, 3) * 0.1 + torch.eye(2, 3, device=x.device)",
            "grid = F.affine_grid(theta, x.shape, align_corners=False)",
            "return F.grid_sample(x, grid, mode='bilinear', align_corners=False)"]
    shapes = [[2, 3, 5, 7], [2, 6]]
    result, _ = _generate(tmp_path, body, shapes)
    case = load_case_dir(_write_case(tmp_path, body, shapes, "float32"))
    _accepted_on_cpu(tmp_path, case, result.source)


def test_complex_values_stay_in_pytorch_around_generated_kernels(tmp_path: Path) -> None:
    """A spectral filter: rfft2, a complex product, irfft2, GELU. No Triton type holds a
    complex value, so every op that makes or reads one runs in PyTorch (codegen failed on the
    product); the GELU after them is generated. The verifier accepts it: torch.fft's
    transforms are library calls the baseline makes (`guards.LIBRARY_FAMILIES`), as cuBLAS's
    are, and the complex product left in PyTorch touches under half of the rest's elements."""
    body = ["f = torch.fft.rfft2(x, dim=(1, 2), norm='ortho')",
            "f = f * torch.complex(y, -y)[None, :, :, None]",
            "return F.gelu(torch.fft.irfft2(f, s=x.shape[1:3], dim=(1, 2), norm='ortho'))"]
    shapes = [[2, 6, 6, 5], [6, 4]]
    result, _ = _generate(tmp_path, body, shapes)
    assert any("gelu" in " ".join(k["fuses"]) for k in result.kernels), result.kernels
    assert not any("complex" in line for k in result.kernels for line in k["fuses"])
    case = load_case_dir(_write_case(tmp_path, body, shapes, "float32"))
    _accepted_on_cpu(tmp_path, case, result.source)


def test_a_power_of_a_size_is_shape_arithmetic(tmp_path: Path) -> None:
    """`(d // h) ** -0.5` of the input's width: Python's pow over sizes in the exported
    graph (codegen failed: an unsupported call), a float the kernel reads; accepted."""
    body = ["b, n, d = x.shape",
            "q = x.reshape(b, n, 2, d // 2)",
            "s = torch.einsum('bqhd,bkhd->bhqk', q, q) * (d // 2) ** -0.5",
            "return s.softmax(dim=-1) + y"]
    shapes = [[2, 5, 6], [1]]
    result, _ = _generate(tmp_path, body, shapes)
    case = load_case_dir(_write_case(tmp_path, body, shapes, "float32"))
    _accepted_on_cpu(tmp_path, case, result.source)
