"""Honest, unfused: a Triton LayerNorm kernel, then a Triton GELU kernel (one extra round trip
through memory, still no PyTorch compute op)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Elements per program of the pointwise GELU: a multiple of 128 lanes, small enough for the
# interpreter's odd test shapes.
GELU_BLOCK = 1024


@triton.jit
def _layernorm_kernel(
    x_ptr,  # (rows, cols)
    w_ptr,  # (cols,)
    b_ptr,  # (cols,)
    y_ptr,  # (rows, cols)
    cols,
    eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + offs, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_kernel(
    h_ptr,  # (n,)
    y_ptr,  # (n,)
    n,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    h = tl.load(h_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 96):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = x.shape[-1]
        x2 = x.reshape(-1, cols).contiguous()
        h = torch.empty_like(x2)
        _layernorm_kernel[(x2.shape[0],)](x2, self.norm.weight, self.norm.bias, h, cols,
                                          self.norm.eps, BLOCK=triton.next_power_of_2(cols))
        y = torch.empty_like(x2)
        n = y.numel()
        _gelu_kernel[(triton.cdiv(n, GELU_BLOCK),)](h, y, n, BLOCK=GELU_BLOCK)
        return y.view(x.shape)
