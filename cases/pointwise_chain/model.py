import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-channel scale and shift, tanh-GELU, residual add, scaled sigmoid gate and clamp."""

    def __init__(self, hidden: int = 4096):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(hidden))
        self.beta = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x * self.gamma + self.beta
        h = F.gelu(h, approximate="tanh")
        h = h + residual
        h = h * torch.sigmoid(1.702 * h)
        return torch.clamp(h * 0.5, min=-4.0, max=4.0)


def init_weights(model: Model) -> None:
    # gamma = 1 and beta = 0 would hide a kernel that ignores them.
    with torch.no_grad():
        model.gamma.normal_(1.0, 0.2)
        model.beta.normal_(0.0, 0.2)
