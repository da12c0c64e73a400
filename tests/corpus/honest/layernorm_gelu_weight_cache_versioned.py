"""Honest: packs its LayerNorm weight and bias into one float32 (2, hidden) tensor (a
weight-derived cache) and rebuilds it when either parameter's version counter or storage
changes (load_state_dict, an optimizer step, .to())."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# One row per program: a (rows, hidden) activation with hidden <= 8192 fits one block.
MAX_BLOCK = 8192


@triton.jit
def _layernorm_gelu_kernel(
    x_ptr,  # (rows, cols)
    x_row_stride,
    w_ptr,  # (cols,)
    b_ptr,  # (cols,)
    y_ptr,  # (rows, cols)
    y_row_stride,
    cols,
    eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = xc * rstd * w + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    cols = x.shape[-1]
    if cols > MAX_BLOCK:
        raise ValueError(f"hidden size {cols} exceeds the one-block limit {MAX_BLOCK}")
    x2 = x.reshape(-1, cols).contiguous()
    y = torch.empty_like(x2)
    _layernorm_gelu_kernel[(x2.shape[0],)](
        x2, x2.stride(0), weight, bias, y, y.stride(0), cols, eps,
        BLOCK=triton.next_power_of_2(cols))
    return y.view(x.shape)



class ModelNew(nn.Module):
    def __init__(self, hidden: int = 96):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self._packed = None
        self._key = None

    def _weights(self) -> torch.Tensor:
        w, b = self.norm.weight, self.norm.bias
        key = (w._version, b._version, w.data_ptr(), b.data_ptr())
        if self._packed is None or key != self._key:
            self._packed = torch.stack([w.detach(), b.detach()]).float().contiguous()
            self._key = key
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self._weights()
        return layernorm_gelu(x, packed[0], packed[1], self.norm.eps)
