import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs RMS Normalization over the last dimension.
    """
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(Model, self).__init__()
        self.num_features = num_features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 64
seq_len = 16
num_features = 1024


def get_inputs():
    x = torch.randn(batch_size, seq_len, num_features)
    return [x]


def get_init_inputs():
    return [num_features]
