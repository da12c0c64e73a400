"""Class 18: the PyTorch fallback is captured into a CUDA graph when the model is built (no
forward is being observed then) and only replayed by forward, beside a decoy Triton kernel:
a replay dispatches no aten op. The verifier counts what a graph captured again at each
replay (`guards.LaunchCounter`'s graph hooks), so the replayed softmax is seen. Without a GPU
(or at another shape) forward computes the fallback directly."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _decoy_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))


def _fallback(x: torch.Tensor) -> torch.Tensor:
    scratch = torch.empty(16, device=x.device)
    _decoy_kernel[(1,)](scratch, BLOCK=16)
    return torch.softmax(x, dim=-1)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.graph = None
        if torch.cuda.is_available():
            self.static_in = torch.zeros(16, 2048, device="cuda")
            _fallback(self.static_in)  # compile the decoy before capture
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = _fallback(self.static_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.graph is None or x.device.type != "cuda" or tuple(x.shape) != (16, 2048):
            return _fallback(x)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()
