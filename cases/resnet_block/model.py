import torch
import torch.nn as nn


class Model(nn.Module):
    """A ResNet basic block in eval mode: conv3x3-BN-ReLU-conv3x3-BN, plus the identity, ReLU
    (torchvision's BasicBlock with stride 1 and no downsample)."""

    def __init__(self, channels: int = 64, dtype: str = "bfloat16"):
        super().__init__()
        dt = getattr(torch, dtype)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False, dtype=dt)
        self.bn1 = nn.BatchNorm2d(channels, dtype=dt)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False, dtype=dt)
        self.bn2 = nn.BatchNorm2d(channels, dtype=dt)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


def init_weights(model: Model) -> None:
    # Trained-looking BatchNorm statistics and affine parameters: default ones/zeros would let
    # a kernel that skips the normalisation pass.
    with torch.no_grad():
        for bn in (model.bn1, model.bn2):
            bn.weight.normal_(1.0, 0.1)
            bn.bias.normal_(0.0, 0.1)
            bn.running_mean.normal_(0.0, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
