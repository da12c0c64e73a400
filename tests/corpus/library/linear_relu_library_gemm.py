"""Honest: the GEMM stays a library call (torch's addmm, as the baseline makes it), the ReLU
and the scale run in one Triton epilogue kernel (the offline engineer's `cublas` backend)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _relu_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 0.5, mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.linear(x, self.fc.weight, self.fc.bias).contiguous()
        y = torch.empty_like(h)
        _relu_scale_kernel[(triton.cdiv(h.numel(), 256),)](h, y, h.numel(), BLOCK=256)
        return y
