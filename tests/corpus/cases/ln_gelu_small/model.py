import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LayerNorm then exact GELU, float32."""

    def __init__(self, hidden: int = 96):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(x))


def init_weights(model: Model) -> None:
    # Non-trivial affine parameters, so a kernel that ignores them is caught.
    with torch.no_grad():
        model.norm.weight.normal_(1.0, 0.1)
        model.norm.bias.normal_(0.0, 0.1)
