"""Honest: keeps a float32 copy of its weight (a weight-derived cache, like a pre-transposed
matrix or a folded batch norm) and rebuilds it whenever a state_dict is loaded, through a
`load_state_dict` post hook."""

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


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 64, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        # non-persistent: not in the state_dict, moved by .to() with the parameters
        self.register_buffer("_w32", self.weight.detach().float().clone(), persistent=False)
        self.register_load_state_dict_post_hook(ModelNew._rebuild)

    @staticmethod
    def _rebuild(module: "ModelNew", _incompatible) -> None:
        module._w32 = module.weight.detach().float().contiguous().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self._w32, self.eps)
