import torch
import torch.nn as nn


class Model(nn.Module):
    """3x3 convolution, ReLU, then a learned per-channel bias (KernelBench level 2 style)."""

    def __init__(self, in_channels: int = 256, out_channels: int = 256, kernel_size: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                              dtype=torch.bfloat16)
        self.bias = nn.Parameter(torch.zeros(out_channels, 1, 1, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + self.bias


def init_weights(model: Model) -> None:
    # A zero post-ReLU bias would hide a kernel that drops it.
    with torch.no_grad():
        model.bias.normal_(0.0, 0.5)
