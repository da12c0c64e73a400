"""Class 3 (issue 23): the fallback uses different aten ops from the baseline's
(`amax`, `sub`, `exp`, `sum`, `div` for `_softmax`), so "every baseline op still runs" never
matches; a decoy Triton kernel launches."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _decoy_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty(16, device=x.device)
        _decoy_kernel[(1,)](scratch, BLOCK=16)
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)
