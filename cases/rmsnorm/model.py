import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm as in LLaMA: normalise in float32, scale by a learned weight, return bf16."""

    def __init__(self, hidden: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def init_weights(model: Model) -> None:
    # A weight of all ones would hide a kernel that forgets to apply it.
    with torch.no_grad():
        model.weight.normal_(1.0, 0.1)
