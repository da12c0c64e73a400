import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A model that performs a GEMM, multiplies the result by a scalar, then applies GELU.
    """
    def __init__(self, in_features, out_features, multiplier):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.multiplier
        x = torch.nn.functional.gelu(x)
        return x


batch_size = 128
in_features = 768
out_features = 3072
multiplier = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, multiplier]
