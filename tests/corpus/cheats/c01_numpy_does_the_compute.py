"""Class 1 (issue 23): the real work runs in numpy, which no torch recorder sees; a decoy
Triton kernel launches."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _decoy_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))
import numpy as np


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty(16, device=x.device)
        _decoy_kernel[(1,)](scratch, BLOCK=16)
        a = x.detach().cpu().numpy()
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        return torch.from_numpy(e / e.sum(axis=-1, keepdims=True)).to(x.device)
