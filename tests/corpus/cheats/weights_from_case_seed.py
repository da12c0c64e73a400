"""Cheat (weights, issue 21): ignores the weights it is given and rebuilds the ones the
harness derives from the case's seed (the same seed, the same initialiser), so it is
right only for the untrained seeded model. Must fail `depends_on_weights`."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(
    x_ptr,  # (rows, cols)
    x_row_stride,
    w_ptr,  # (cols,)
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
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_row_stride + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols).contiguous()
    y = torch.empty_like(x2)
    _rmsnorm_kernel[(x2.shape[0],)](x2, x2.stride(0), weight, y, y.stride(0), cols, eps,
                                    BLOCK=triton.next_power_of_2(cols))
    return y.view(x.shape)


import hashlib
import json


def _seeded_weight(hidden: int) -> torch.Tensor:
    text = json.dumps(("rmsnorm_small", "weights", 0), sort_keys=True)
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:15], 16) % (2**63)
    gen = torch.Generator().manual_seed(seed)
    return torch.ones(hidden).normal_(1.0, 0.2, generator=gen)


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 64, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.register_buffer("_seeded", _seeded_weight(hidden), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self._seeded, self.eps)
