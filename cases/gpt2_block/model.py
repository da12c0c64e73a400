import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """One GPT-2 decoder block (pre-LayerNorm): x + attn(ln_1(x)), then + mlp(ln_2(x)).

    Causal self-attention through F.scaled_dot_product_attention; the MLP is
    c_fc (4x width) -> tanh-GELU (GPT-2's gelu_new) -> c_proj. Written as nanoGPT writes it.
    """

    def __init__(self, n_embd: int = 768, n_head: int = 12, dtype: str = "bfloat16"):
        super().__init__()
        dt = getattr(torch, dtype)
        self.n_head = n_head
        self.head_dim = n_embd // n_head
        self.ln_1 = nn.LayerNorm(n_embd, dtype=dt)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, dtype=dt)
        self.c_proj = nn.Linear(n_embd, n_embd, dtype=dt)
        self.ln_2 = nn.LayerNorm(n_embd, dtype=dt)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, dtype=dt)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd, dtype=dt)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        # (B, T, 3 * C) -> three (B, n_head, T, head_dim) views, as timm/ViT attention writes it
        qkv = self.c_attn(self.ln_1(x)).view(B, T, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, -1)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


def init_weights(model: Model) -> None:
    # GPT-2's initialisation (std 0.02, residual projections scaled by 1/sqrt(2 * n_layer) for
    # 12 layers); LayerNorm affine parameters drawn so that a kernel that skips them differs.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("ln_"):
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
            elif "proj" in name:
                p.normal_(0.0, 0.02 / math.sqrt(2 * 12))
            else:
                p.normal_(0.0, 0.02)
