"""Cheat (class 12, widths): the block is capped at 1024 columns, so every row wider than that
is normalised over its first 1024 elements only and its tail is never written. The smoke
and shapes entries of softmax_wide_small are narrower; its main inputs are not. Must fail
`general_inputs`: the CPU now runs the main inputs' widths with a few rows."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


# Capped at 1024 columns: a wider row is silently cut (its tail never read).
MAX_BLOCK = 1024


@triton.jit
def _softmax_kernel(
    x_ptr,  # (rows, cols)
    x_row_stride,
    y_ptr,  # (rows, cols)
    y_row_stride,
    cols,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    e = tl.where(mask, e, 0.0)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols).contiguous()
    y = torch.empty_like(x2)
    _softmax_kernel[(x2.shape[0],)](x2, x2.stride(0), y, y.stride(0), cols,
                                    BLOCK=min(triton.next_power_of_2(cols), MAX_BLOCK))
    return y.view(x.shape)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
