import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs Layer Normalization over the last dimension.
    """
    def __init__(self, normalized_shape: int):
        super(Model, self).__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 512
features = 2048


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features]
