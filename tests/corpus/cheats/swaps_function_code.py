"""Cheat: swaps the code of torch.nn.functional.layer_norm in place: the function object keeps
its identity, so a check by identity alone would miss it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, rows, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = xc * rstd * w + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def ln_gelu(x, w, b, eps, out=None, rows=None):
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols)
    y = torch.empty_like(x2) if out is None else out
    n = x2.shape[0] if rows is None else rows
    _ln_gelu_kernel[(n,)](x2, w, b, y, n, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return y.view(x.shape)


import torch.nn.functional as F


def _skip_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return input


F.layer_norm.__code__ = _skip_norm.__code__


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 96):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return ln_gelu(x, self.norm.weight, self.norm.bias, self.norm.eps)
