import torch
import torch.nn as nn


class Model(nn.Module):
    """
    ReLU followed by multiplication with a constant scale factor.
    """
    def __init__(self, scale_factor):
        super(Model, self).__init__()
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale_factor


batch_size = 128
dim = 8192
scale_factor = 2.5


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [scale_factor]
