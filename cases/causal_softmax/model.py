import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled, causally masked softmax over attention scores (batch, heads, q_len, k_len)."""

    def __init__(self, head_dim: int = 128):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        q_len, k_len = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(1)
        scores = (scores * self.scale).masked_fill(mask, float("-inf"))
        return torch.softmax(scores.float(), dim=-1).to(scores.dtype)
