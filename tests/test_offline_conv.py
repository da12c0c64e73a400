"""The offline engineer's channels_last convolution (issue 5): cuDNN's conv on an NHWC copy of
x without bias, then one Triton epilogue that reads NHWC, adds the conv bias and the fused
pointwise ops and writes NCHW. All on the CPU through the Triton interpreter (a GPU run should
time conv2d_relu_bias against torch.compile: benchmarks/conv_layout_gpu.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch

from kopt.harness.case import load_case, load_case_dir
from kopt.harness.data import agent_provide_inputs, build_model
from kopt.phases.engineers.offline import generate_candidate
from tests.test_offline import _check_case, _load_candidate


def test_conv2d_relu_bias_uses_channels_last_epilogue(tmp_path: Path) -> None:
    case = load_case("conv2d_relu_bias")
    result = generate_candidate(case)
    assert "_conv2d_nhwc(self, \"conv.weight\"" in result.source
    assert "aten.convolution" not in result.source.split("def forward")[1]
    (kernel,) = result.kernels
    assert kernel["fuses"] == ["convolution_bias", "relu", "add_10"]
    assert set(result.tunables[kernel["name"]]) == {"BLOCK_HW", "BLOCK_C", "num_warps"}
    module = _load_candidate(result.source, tmp_path, "conv_cl")
    for input_set in ("smoke", "shape0"):  # shape0: (3, 5, 31, 45), 5 -> 12 channels
        _check_case(case, module, input_set)


def test_non_contiguous_input_and_weight_update(tmp_path: Path) -> None:
    case = load_case("conv2d_relu_bias")
    module = _load_candidate(generate_candidate(case).source, tmp_path, "conv_cl_nc")
    ref = build_model(case, "shape0")
    new = build_model(case, "shape0", cls=module.ModelNew)
    (x,) = agent_provide_inputs(case, "shape0", 3).args
    wide = torch.randn(x.shape[0], x.shape[1], x.shape[2], x.shape[3] * 2, dtype=x.dtype)
    x_nc = wide[..., ::2]  # strided along W
    x_t = x.transpose(2, 3).contiguous().transpose(2, 3)  # permuted strides
    with torch.no_grad():
        for inp in (x_nc, x_t, x.contiguous(memory_format=torch.channels_last)):
            torch.testing.assert_close(new(inp), ref(inp), atol=2e-2, rtol=2e-2)
        # the cached channels_last weight follows an in-place update of the parameter
        for m in (ref, new):
            m.conv.weight.mul_(-1.5)
        torch.testing.assert_close(new(x), ref(x), atol=3e-2, rtol=2e-2)


def _conv_model(conv: str, result: str) -> str:
    """model.py of a one-conv model: `nn.Conv2d(conv)`, forward returns `result` of x."""
    return f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d({conv})

    def forward(self, x):
        return {result}
'''


_GROUPED = _conv_model("4, 8, 3, padding=1, groups=2", "torch.relu(self.conv(x)) * 2.0")
_STRIDED_SOFTMAX = _conv_model("4, 8, 3, padding=1, stride=2",
                               "torch.softmax(torch.relu(self.conv(x)), dim=1) * 2.0")


def _case(tmp_path: Path, name: str, source: str):
    case_dir = tmp_path / name
    case_dir.mkdir()
    (case_dir / "model.py").write_text(textwrap.dedent(source))
    (case_dir / "manifest.yaml").write_text(
        f"name: {name}\nmodel: {{module: model.py, class: Model}}\n"
        "inputs:\n  args:\n    - {shape: [2, 4, 9, 11], dtype: float32, init: normal}\n")
    return load_case_dir(case_dir)


def test_grouped_conv_keeps_todays_path(tmp_path: Path) -> None:
    case = _case(tmp_path, "grouped_conv_relu", _GROUPED)
    result = generate_candidate(case)
    assert "_conv2d_nhwc" not in result.source and "aten.convolution.default" in result.source
    module = _load_candidate(result.source, tmp_path, "grouped")
    _check_case(case, module, "main")


def test_strided_conv_into_a_reduction_reads_nhwc_by_strides(tmp_path: Path) -> None:
    # the bias add opens a pointwise group that softmax turns into a reduction: no tiled
    # epilogue, but the NHWC conv output is still read correctly through its strides
    case = _case(tmp_path, "conv_softmax", _STRIDED_SOFTMAX)
    result = generate_candidate(case)
    # softmax over the channels (dim 1) is an outer reduction of the NCHW domain: one tiled kernel
    assert "_conv2d_nhwc" in result.source and [k["kind"] for k in result.kernels] == ["tiled_reduction"]
    _check_case(case, _load_candidate(result.source, tmp_path, "conv_softmax"), "main")


def _case_5d(tmp_path: Path, name: str, conv: str, result: str, shape: list[int]):
    source = f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {conv}
        self.scale = nn.Parameter(torch.randn(1, 6, 1, 1, 1))

    def forward(self, x):
        return {result}
'''
    case_dir = tmp_path / name
    case_dir.mkdir()
    (case_dir / "model.py").write_text(textwrap.dedent(source))
    (case_dir / "manifest.yaml").write_text(
        f"name: {name}\nmodel: {{module: model.py, class: Model}}\n"
        f"inputs:\n  args:\n    - {{shape: {shape}, dtype: float32, init: normal}}\n")
    return load_case_dir(case_dir)


def test_3d_and_transposed_conv_bias_joins_the_epilogue(tmp_path: Path) -> None:
    """ATen adds a cuDNN convolution's bias in a pass of its own over the output: a conv3d or
    a transposed conv3d whose users are pointwise runs without bias, and the one fused
    epilogue adds it (the model's layout is kept: channels_last is the 2-D path only)."""
    for name, conv in (("conv3d_ep", "nn.Conv3d(3, 6, 3)"),
                       ("convt3d_ep", "nn.ConvTranspose3d(3, 6, 3, stride=2, padding=1, "
                                      "output_padding=1)")):
        case = _case_5d(tmp_path, name, conv, "torch.sigmoid(torch.tanh(self.conv(x)) * self.scale)",
                        [2, 3, 5, 6, 7])
        result = generate_candidate(case)
        forward = result.source.split("def forward")[1]
        assert "aten.convolution.default(x, p_p_conv_weight, None," in forward, name
        assert "_conv2d_nhwc" not in forward and len(result.kernels) == 1
        assert "convolution_bias" in result.kernels[0]["fuses"]
        _check_case(case, _load_candidate(result.source, tmp_path, name), "main")


def test_conv_bias_joins_a_reduction_after_it(tmp_path: Path) -> None:
    """A softmax over the channels right after a conv3d (KernelBench level-2 6): the bias is
    added where the softmax loads the conv's output, not in ATen's pass of its own."""
    case = _case_5d(tmp_path, "conv3d_softmax", "nn.Conv3d(3, 6, 3)",
                    "torch.softmax(self.conv(x), dim=1) * self.scale", [2, 3, 5, 6, 7])
    result = generate_candidate(case)
    forward = result.source.split("def forward")[1]
    assert "aten.convolution.default(x, p_p_conv_weight, None," in forward
    assert any("convolution_bias" in k["fuses"] for k in result.kernels)
    _check_case(case, _load_candidate(result.source, tmp_path, "conv3d_softmax"), "main")
