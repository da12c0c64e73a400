"""Peak memory of one forward call.

GPU: the CUDA caching allocator's own peak statistic (`torch.cuda.max_memory_allocated`).
CPU: the CPU allocator keeps no peak statistic, so the call runs once under a dispatch mode
that counts, op by op, every storage an op creates while anything still references it (a
storage counts until its last tensor is gone: weak references to the storage itself, not to
the tensor objects). Both add the resident inputs and weights. What the CPU count cannot see
is memory an op allocates and frees inside itself (workspaces) and arrays the Triton
interpreter holds in numpy, so it is the peak of tensor memory, not of the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def resident_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct storages behind `tensors` (a view is not counted twice)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            ref = StorageWeakRef(t.untyped_storage())
            seen[ref.cdata] = t.untyped_storage().nbytes()
    return sum(seen.values())


class _LiveStorages(TorchDispatchMode):
    """Counts the bytes of storages created by ops during the mode, while they are alive."""

    def __init__(self, known: Iterable[torch.Tensor]) -> None:
        super().__init__()
        self.known = {StorageWeakRef(t.untyped_storage()).cdata for t in known
                      if isinstance(t, torch.Tensor)}
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def _sweep(self) -> None:
        for key, (ref, nbytes) in list(self.live.items()):
            if ref.expired():
                del self.live[key]
                self.current -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self._sweep()  # what the previous ops' callers let go of
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            storage = t.untyped_storage()
            ref = StorageWeakRef(storage)
            if ref.cdata in self.known or ref.cdata in self.live:
                continue
            self.live[ref.cdata] = (ref, storage.nbytes())
            self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def cpu_peak_bytes(call: Callable[[], Any], resident: Iterable[torch.Tensor]) -> int:
    """Resident bytes plus the most tensor memory `call()` had alive at once (see above)."""
    resident = list(resident)
    with _LiveStorages(resident) as mode:
        out = call()
    del out
    return resident_bytes(resident) + mode.peak


def cuda_peak_bytes(call: Callable[[], Any], resident: Iterable[torch.Tensor]) -> int:
    """Resident bytes plus the most the CUDA allocator held on top of them during `call()`."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return resident_bytes(resident) + torch.cuda.max_memory_allocated() - before


class _LargestOutput(TorchDispatchMode):
    """Records the largest tensor (by elements) any op returns during the mode."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0
        self.shape: list[int] = []
        self.op = ""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.shape, self.op = t.numel(), list(t.shape), str(func)
        return out


def largest_op_output(call: Callable[[], Any]) -> tuple[Any, int, list[int], str]:
    """`call()`'s result, and the element count, shape and op name of the largest tensor any
    op produced during it: what the Triton interpreter will walk when a kernel takes that op."""
    with _LargestOutput() as mode:
        out = call()
    return out, mode.numel, mode.shape, mode.op
