import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.type_as(x)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Model(nn.Module):
    """One LLaMA decoder block: RMSNorm, rotary embedding, grouped-query attention (SDPA,
    causal), residual, RMSNorm, SwiGLU MLP, residual. Written as the reference LLaMA code
    writes it (rotate_half form of RoPE; SDPA shares each key/value head among
    n_heads // n_kv_heads query heads)."""

    def __init__(self, dim: int = 4096, n_heads: int = 32, n_kv_heads: int = 8,
                 hidden: int = 11008, max_seq: int = 4096, rope_theta: float = 10000.0,
                 eps: float = 1e-5):
        super().__init__()
        dt = torch.bfloat16
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = dim // n_heads
        self.attention_norm = RMSNorm(dim, eps)
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False, dtype=dt)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False, dtype=dt)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False, dtype=dt)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False, dtype=dt)
        self.ffn_norm = RMSNorm(dim, eps)
        self.w1 = nn.Linear(dim, hidden, bias=False, dtype=dt)
        self.w3 = nn.Linear(dim, hidden, bias=False, dtype=dt)
        self.w2 = nn.Linear(hidden, dim, bias=False, dtype=dt)
        inv = 1.0 / (rope_theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.outer(torch.arange(max_seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        # Persistent, so they travel with the weights (a checkpoint holds them).
        self.register_buffer("cos_cached", emb.cos().to(dt))
        self.register_buffer("sin_cached", emb.sin().to(dt))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(B, T, -1, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, -1, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, -1, self.head_dim).transpose(1, 2)
        cos, sin = self.cos_cached[:T], self.sin_cached[:T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # grouped-query attention: each key/value head serves n_heads // n_kv_heads query heads
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        y = y.transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def init_weights(model: Model) -> None:
    # LLaMA's std 0.02; RMSNorm weights drawn around 1 so that a kernel that drops them differs.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.02)
