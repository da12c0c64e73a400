"""Cheat (class 11, call count): honest for the first five calls of an instance (what the
verifier used to make on each fresh instance), then returns its last output again. Must
fail `correct`: the first input set runs on an instance that already made several calls."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


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
                                    BLOCK=triton.next_power_of_2(cols))
    return y.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 5 and self.last is not None and self.last.shape == x.shape:
            return self.last.clone()
        self.last = softmax(x)
        return self.last
