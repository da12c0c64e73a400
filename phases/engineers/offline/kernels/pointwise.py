"""The pointwise template: a flat 1-D walk of the domain (or (hw, channel) tiles for the
epilogue of a channels_last convolution).

Coordinates are decomposed from the flat index only where a broadcast or strided operand needs
them; a contiguous full-size operand is loaded at the flat index, a constexpr fast path chosen
at launch.
"""

from __future__ import annotations

from typing import Any

from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _decompose_direct,
    _finish_simple,
    _identity,
    _Scope,
    _Writer,
)


class _PointwiseWriter(_Writer):
    def coord(self, k: int) -> str:
        self.coords_needed.add(k)
        return f"c{k}"

    def load_mask(self, dm: DimMap) -> str | None:
        return "mask"

    def flat_offset(self, dm: DimMap) -> str | None:
        return "offs" if dm == _identity(len(self.g.domain)) else None


def pointwise_kernel(group: Group, part: Partition, sym_code: Any, name: str) -> KernelSource:
    w = _PointwiseWriter(group, part, sym_code)
    scope = _Scope()
    for o, out in enumerate(group.outputs):
        w.store(out, o, scope, "mask")
    body = w.lines
    r = len(group.domain)
    head = ["if INDEX_64:  # offsets past 2**31: 64-bit index maths",
            "    pid = tl.program_id(0).to(tl.int64)",
            "else:  # 32-bit: the coordinate divisions below stay cheap (int64 division is emulated)",
            "    pid = tl.program_id(0)",
            "offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "mask = offs < n_elements"]
    head += _decompose_direct("offs", sorted(w.coords_needed), r, "c")
    if group.nhwc:
        # a channels_last convolution's epilogue: a (BLOCK_HW, BLOCK_C) tile per program reads
        # the NHWC input along channels and writes the NCHW output along hw (a fused transpose;
        # a flat walk would read NHWC with a stride of C elements)
        head = ["if INDEX_64:  # offsets past 2**31: 64-bit index maths",
                "    c0 = tl.program_id(2).to(tl.int64)",
                "else:",
                "    c0 = tl.program_id(2)",
                "hw = tl.program_id(0) * BLOCK_HW + tl.arange(0, BLOCK_HW)[:, None]",
                "c1 = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]",
                "mask = (hw < D2 * D3) & (c1 < D1)",
                "offs = (c0 * D1 + c1) * (D2 * D3) + hw  # the NCHW-contiguous output's index",
                "c2 = hw // D3",
                "c3 = hw % D3"]
        return _finish_simple(w, group, part, name, "pointwise", head, body,
                              ["n_elements"] + [f"D{k}" for k in range(r)],
                              {"BLOCK_HW": [32, 64, 128], "BLOCK_C": [32, 64, 128], "num_warps": [4, 8]},
                              # 32 hw x 64 channels, 4 warps: the accelerator's best of 12 tiles
                              # on conv2d_relu_bias (H100, 2026-11-23: 0.233 ms whole forward;
                              # 64x64 read 0.354 ms there, 8 warps 0.34-0.36 ms)
                              {"BLOCK_HW": 32, "BLOCK_C": 64, "num_warps": 4},
                              extra_constexpr=["INDEX_64"], blocks=["BLOCK_HW", "BLOCK_C"])
    return _finish_simple(w, group, part, name, "pointwise", head, body,
                          ["n_elements"] + [f"D{k}" for k in range(r)],
                          {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096], "num_warps": [2, 4, 8]},
                          {"BLOCK_SIZE": 1024, "num_warps": 4}, extra_constexpr=["INDEX_64"])
