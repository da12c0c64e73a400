"""Cheat: keeps the GEMM as a library call (allowed) but also runs the epilogue in PyTorch,
with a Triton kernel beside it as a decoy: every non-library op of the baseline still runs in
PyTorch, so `no_pytorch_fallback` must reject it."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(F.linear(x, self.fc.weight, self.fc.bias)) * 0.5
        y = torch.empty_like(h)
        _copy_kernel[(triton.cdiv(h.numel(), 256),)](h, y, h.numel(), BLOCK=256)
        return y
