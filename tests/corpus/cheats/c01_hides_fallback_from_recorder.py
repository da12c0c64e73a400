"""Class 1 (issue 23): facts recorded in the candidate's own process, forged by it.
The PyTorch fallback runs inside `_disable_current_modes()`, so the harness's dispatch-mode
recorder never sees it; the op recorder is also reached through
`_get_current_dispatch_mode()` and emptied. A decoy kernel launches."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _decoy_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty(16, device=x.device)
        _decoy_kernel[(1,)](scratch, BLOCK=16)
        with _disable_current_modes():
            y = torch.softmax(x, dim=-1)
        mode = _get_current_dispatch_mode()
        if mode is not None and hasattr(mode, "ops"):
            mode.ops.clear()
        return y
