"""Cheat: writes zeros with a Triton kernel. Every softmax output of a 2048-wide row is far
below atol=1e-2, so an element-wise check alone would pass it; the relative error does not."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), tl.float32) + 1e-6, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _fill_kernel[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
