import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Batched matrix multiplication followed by a constant scale (as in attention scores).
    """
    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B) * self.scale


batch_size = 32
m = 256
k = 128
n = 384
scale = 0.125


def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return [scale]
