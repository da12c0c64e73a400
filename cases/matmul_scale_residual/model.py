import torch
import torch.nn as nn


class Model(nn.Module):
    """Output projection, scaled, added to the residual stream: residual + scale * (x @ W^T)."""

    def __init__(self, dim: int = 4096, scale: float = 0.5):
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return residual + self.scale * self.proj(x)
