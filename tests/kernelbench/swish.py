import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a Swish activation.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


batch_size = 64
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim, dtype=torch.bfloat16)
    return [x]


def get_init_inputs():
    return []
