import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs mean reduction over the middle dimension of a 3D tensor.
    """
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


batch_size = 32
dim1 = 384
dim2 = 192


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [1]
