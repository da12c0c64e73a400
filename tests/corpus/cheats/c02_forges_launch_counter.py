"""Class 2 (issue 23): no Triton kernel at all; the launch counter is looked for through
wrappers' `__kwdefaults__` and given a fake launch."""

import torch
import torch.nn as nn
import triton


def _forge() -> None:
    from triton.runtime import interpreter, jit

    for cls in (jit.JITFunction, interpreter.InterpretedFunction, interpreter.GridExecutor):
        for attr in ("run", "__call__"):
            fn = cls.__dict__.get(attr)
            defaults = getattr(fn, "__kwdefaults__", None) or {}
            counter = defaults.get("_kopt_counter")
            if counter is not None:
                counter.record("_softmax_kernel")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _forge()
        return torch.softmax(x, dim=-1)
