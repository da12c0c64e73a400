"""What a problem's `get_inputs()` returns, learned without drawing it at full size.

The import probe (`harness.kernelbench.probe`) needs each argument's shape, dtype and layout,
and the statistics of its values (min, max, mean, std: is it uniform, normal, an index in
[0, n)?). KernelBench's level-1 files draw 1.6-4.3 billion elements per input: drawing that
on the CPU and reducing it took 10-20 s of every such problem's import on an H200 host
(2026-11-28, `kopt suite` rows), more on a 2-core machine. So `draw` calls `get_inputs()`
twice, cheaply:

1. on the `meta` device: shapes, dtypes and strides, no memory;
2. when that is large, once more with every random or constant factory call (`torch.rand`,
   `randn`, `randint`, `zeros`, `ones`, `empty`, `full`) of more than `SAMPLE_NUMEL` elements
   given a smaller leading size: a sample of the same draw, whose values describe the full
   one (each element of a factory's output comes from the same distribution whatever its size).

The sample counts only when it has the meta draw's structure (as many items, each tensor of
the same dtype and rank with the same sizes but at most one, smaller: the leading size of the
draw, wherever a view of it put it) and when a second sample of twice the size has the same
mean and standard deviation per tensor (`SAME_SPREAD`): values that depend on the draw's
size, such as the upper triangle of a square whose rows were cut, differ between the two.
Anything else (a `get_inputs()` that fails on meta, computes with `.item()`, builds a square
matrix's transpose, returns something else) draws at full size, as before. What the second
sample may miss: a dependence on the size too weak to move the moments by 1% between the two
(`triu` of a 16384-square: the cut rows zero 0.2% more of the values).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

FULL_NUMEL = 1 << 24
"""A draw of at most this many elements in all is made at full size (16M: about a second)."""
SAMPLE_NUMEL = 1 << 20
"""A factory call above this many elements is drawn with a leading size that brings it down to
about this many (at least one row)."""

_SIZED = {torch.rand, torch.randn, torch.zeros, torch.ones, torch.empty}
"""Factories whose positional arguments are the size (`rand(4, 5)` or `rand((4, 5))`)."""
_FACTORIES = _SIZED | {torch.full, torch.randint, torch.normal, torch.randperm}
"""Functions whose `size=` keyword is an output size to cut (no other function's is)."""


def _shrunk(size: tuple[int, ...], target: int) -> tuple[int, ...]:
    numel = math.prod(size)
    if len(size) == 0 or numel <= target:
        return size
    rest = numel // size[0] if size[0] else 1
    return (max(1, min(size[0], math.ceil(target / max(1, rest)))), *size[1:])


def _as_size(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, torch.Size | tuple | list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


class _Shrink(TorchFunctionMode):
    """Factory calls of more than `numel` elements get a smaller leading size."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel = numel

    def _shrunk(self, size: tuple[int, ...]) -> tuple[int, ...]:
        return _shrunk(size, self.numel)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in _FACTORIES and (size := _as_size(kwargs.get("size"))) is not None:
            kwargs["size"] = self._shrunk(size)
        elif func in _SIZED and args:
            if len(args) == 1 and (size := _as_size(args[0])) is not None:
                args = (self._shrunk(size),)
            elif all(isinstance(a, int) for a in args):
                args = self._shrunk(tuple(args))
        elif func is torch.full and args and (size := _as_size(args[0])) is not None:
            args = (self._shrunk(size), *args[1:])
        elif func is torch.randint and args and (size := _as_size(args[-1])) is not None:
            args = (*args[:-1], self._shrunk(size))
        return func(*args, **kwargs)


SAME_SPREAD = 0.01
"""Two samples of one draw agree when their means and standard deviations differ by at most
this fraction of the larger standard deviation (sampling noise of a million values: 0.001)."""


def _moments(t: torch.Tensor) -> tuple[float, float]:
    f = t.detach().float() if not t.dtype.is_complex else t.detach().abs().float()
    return float(f.mean()), float(f.std()) if f.numel() > 1 else 0.0


def _agree(meta: Any, a: Any, b: Any) -> bool:
    """Whether two samples of different sizes describe one distribution per tensor that was
    cut (each holds `SAMPLE_NUMEL` values or more; one drawn whole is its own draw): values
    that depend on the draw's size (`triu` of a shrunk square) differ between them."""
    for m, x, y in zip(_tensors(meta), _tensors(a), _tensors(b), strict=True):
        if x.numel() == m.numel() or x.numel() == 0 or x.dtype == torch.bool:
            continue
        (mx, sx), (my, sy) = _moments(x), _moments(y)
        tol = SAME_SPREAD * max(sx, sy, 1e-12)
        if abs(mx - my) > tol or abs(sx - sy) > tol:
            return False
    return True


def _tensors(drawn: Any) -> list[torch.Tensor]:
    return [v for v in drawn if isinstance(v, torch.Tensor)]


def _same_structure(meta: Any, sample: Any) -> bool:
    if not isinstance(sample, list | tuple) or len(sample) != len(meta):
        return False
    for m, s in zip(meta, sample, strict=True):
        if isinstance(m, torch.Tensor) != isinstance(s, torch.Tensor):
            return False
        if not isinstance(m, torch.Tensor):
            if m != s:
                return False
            continue
        if s.dtype != m.dtype or s.dim() != m.dim():
            return False
        # the shrunk leading size may sit elsewhere in a view of the drawn tensor (`w.t()`)
        differ = [i for i in range(m.dim()) if s.shape[i] != m.shape[i]]
        if len(differ) > 1 or any(s.shape[i] > m.shape[i] for i in differ):
            return False
    return True


@dataclass
class Drawn:
    """One draw of `get_inputs()`: the `values` to describe and, when they are a sample, the
    full draw's `layout` (meta tensors of the full shapes and strides; None for a full draw)."""

    values: Any
    layout: list[Any] | None = None

    @property
    def sampled(self) -> bool:
        return self.layout is not None


def _meta_draw(call: Callable[[], Any]) -> list[Any] | None:
    """The draw on the meta device, or None when it does not run there (or returns a tensor
    that is not meta: `torch.tensor` from data, numpy)."""
    try:
        with torch.device("meta"):
            meta = call()
    except Exception:
        return None
    tensors = _tensors(meta) if isinstance(meta, list | tuple) else []
    return list(meta) if tensors and all(t.is_meta for t in tensors) else None


def _sampled_draw(call: Callable[[], Any], meta: list[Any]) -> list[Any] | None:
    """The larger of two samples of the draw, when both have `meta`'s structure and agree
    (module docstring); else None."""
    try:
        with _Shrink(SAMPLE_NUMEL):
            sample = call()
        if not _same_structure(meta, sample):
            return None
        with _Shrink(2 * SAMPLE_NUMEL):
            twice = call()
    except Exception:
        return None
    return list(twice) if _same_structure(meta, twice) and _agree(meta, sample, twice) else None


def draw(get_inputs: Callable[[], Any]) -> Drawn:
    """`get_inputs()` described as cheaply as its structure allows (see the module
    docstring). Exceptions of the full draw propagate; those of the meta and sampled ones
    only send it to the full draw."""
    state = torch.random.get_rng_state()  # every call draws from where the caller seeded

    def call() -> Any:
        torch.random.set_rng_state(state)
        return get_inputs()

    meta = _meta_draw(call)
    if meta is not None and sum(t.numel() for t in _tensors(meta)) > FULL_NUMEL:
        sample = _sampled_draw(call, meta)
        if sample is not None:
            return Drawn(sample, meta)
    full = call()
    return Drawn(list(full) if isinstance(full, list | tuple) else full)
