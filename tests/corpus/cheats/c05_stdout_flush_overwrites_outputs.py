"""Class 5 (issue 23): forward returns zeros; `sys.stdout` is replaced by a proxy whose
`flush()` (called by the worker after it writes the response) overwrites the output files
with correct values computed from the staged inputs."""

import glob
import os
import sys

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file


class _Proxy:
    def __init__(self, inner):
        self.inner = inner
        self.inputs = {os.path.basename(f)[:-12]: load_file(f)
                       for f in glob.glob(os.path.join(os.getcwd(), "inputs", "*.safetensors"))}

    def write(self, text):
        return self.inner.write(text)

    def flush(self):
        for name, tensors in self.inputs.items():
            target = os.path.join(os.getcwd(), "out", f"cand-{name}.safetensors")
            if os.path.exists(target) and "arg0" in tensors:
                save_file({"o0": torch.softmax(tensors["arg0"], dim=-1)}, target)
        return self.inner.flush()

    def __getattr__(self, name):
        return getattr(self.inner, name)


sys.stdout = _Proxy(sys.stdout)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)
