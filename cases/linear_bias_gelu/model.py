import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Up-projection of a transformer MLP: Linear (with bias) then tanh-approximated GELU."""

    def __init__(self, in_features: int = 4096, out_features: int = 16384):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x), approximate="tanh")
