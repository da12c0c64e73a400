"""A model's large initial draws made on every core.

torch draws a CPU tensor's random values on one thread (the generator is sequential): a
constructor that initialises 2.15 G float32 parameters (KernelBench level-3 2) spent ~15 s per
model drawing them, twice per verification (two fresh state_dicts), on a 16-core H200 host
(2026-12-01). Under `ParallelFills`, an initialiser the constructor calls through
`torch.nn.init` (`uniform_`, `normal_`, `kaiming_uniform_`: what nn.Linear, the convolutions,
nn.Embedding and the recurrent layers use) on a tensor of `MIN_ELEMENTS` or more fills it in
chunks, each from its own generator, on a thread pool. The values follow the same distribution
with the same parameters (kaiming's bound from the tensor's fan, as torch computes it); they are
a function of the seed the surrounding code set (one value drawn from the global generator seeds
every chunk, and the chunks are fixed by the tensor's size, not by the machine's cores), so a
seed still names one state_dict. Smaller tensors, other initialisers, an explicit generator and
non-contiguous or non-CPU tensors are drawn by torch as before.
"""

from __future__ import annotations

import inspect
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

MIN_ELEMENTS = 1 << 24
"""Tensors from this size (16 M elements: 64 MB of float32) are drawn in parallel."""
CHUNK = 1 << 22
"""Elements per chunk (each its own generator)."""

_INITS = {torch.nn.init.uniform_: "uniform", torch.nn.init.normal_: "normal",
          torch.nn.init.kaiming_uniform_: "kaiming_uniform"}
_SIGNATURES = {f: inspect.signature(f) for f in _INITS}


class ParallelFills(torch.overrides.TorchFunctionMode):
    """Large `torch.nn.init` draws in parallel chunks (the module's docstring). A torch function
    mode is this thread's own."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _INITS:
            draw = _draw(func, args, kwargs)
            if draw is not None:
                tensor, kind, lo, hi = draw
                fill(tensor, kind, lo, hi)
                return tensor
        return func(*args, **kwargs)


def _draw(func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[torch.Tensor, str, float, float] | None:
    """(tensor, "uniform" or "normal", low or mean, high or std) for a call this mode takes."""
    try:
        bound = _SIGNATURES[func].bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    a = bound.arguments
    tensor = a.get("tensor")
    if (not isinstance(tensor, torch.Tensor) or a.get("generator") is not None
            or tensor.numel() < MIN_ELEMENTS or tensor.device.type != "cpu"
            or not tensor.is_floating_point() or not tensor.is_contiguous()
            or type(tensor) not in (torch.Tensor, torch.nn.Parameter)):
        return None
    kind = _INITS[func]
    if kind == "uniform":
        return tensor, "uniform", float(a["a"]), float(a["b"])
    if kind == "normal":
        return tensor, "normal", float(a["mean"]), float(a["std"])
    # kaiming_uniform_, as torch computes its bound; torch draws itself when its private fan
    # helper is gone or refuses the arguments (a torch release that renamed it)
    try:
        fan = torch.nn.init._calculate_correct_fan(tensor, a["mode"])
        gain = torch.nn.init.calculate_gain(a["nonlinearity"], a["a"])
    except (AttributeError, TypeError, ValueError):
        return None
    bound_ = math.sqrt(3.0) * gain / math.sqrt(fan)
    return tensor, "uniform", -bound_, bound_


def fill(tensor: torch.Tensor, kind: str, lo: float, hi: float) -> None:
    """`tensor` (contiguous, CPU) filled in chunks of CHUNK elements, chunk i from a generator
    seeded with (one draw of the global generator) + i, on up to os.cpu_count() threads."""
    seed = int(torch.randint(0, 1 << 62, (1,)).item())
    flat = tensor.detach().view(-1)
    starts = range(0, flat.numel(), CHUNK)

    def one(i: int) -> None:
        gen = torch.Generator().manual_seed(seed + i)
        part = flat[starts[i]:starts[i] + CHUNK]
        with torch.no_grad():
            if kind == "uniform":
                part.uniform_(lo, hi, generator=gen)
            else:
                part.normal_(lo, hi, generator=gen)

    with ThreadPoolExecutor(max_workers=max(1, min(len(starts), os.cpu_count() or 1))) as pool:
        list(pool.map(one, range(len(starts))))
