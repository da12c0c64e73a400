"""Honest but partial: Triton computes the normalised rows; the weight multiply stays in
PyTorch (accepted; the report lists `mul` as a PyTorch op that remains)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_normalize_kernel(
    x_ptr,  # (rows, cols)
    y_ptr,  # (rows, cols)
    cols,
    eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    tl.store(y_ptr + row * cols + offs, x * rstd, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 64, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = x.shape[-1]
        x2 = x.reshape(-1, cols).contiguous()
        y = torch.empty_like(x2)
        _rms_normalize_kernel[(x2.shape[0],)](x2, y, cols, self.eps,
                                              BLOCK=triton.next_power_of_2(cols))
        return y.view(x.shape) * self.weight
