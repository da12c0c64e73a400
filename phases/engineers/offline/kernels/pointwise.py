"""The pointwise template: a flat 1-D walk of the domain (or (hw, channel) tiles for the
epilogue of a channels_last convolution).

Coordinates are decomposed from the flat index only where a broadcast or strided operand needs
them; a contiguous full-size operand is loaded at the flat index, a constexpr fast path chosen
at launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition
from kopt.phases.engineers.offline.graph import TAKE, Node
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _decompose_direct,
    _finish_simple,
    _identity,
    _Scope,
    _Writer,
)


@dataclass(frozen=True)
class Walk:
    """A pointwise kernel's walk over its domain in the memory order of `like`, a full-size
    permuted input its output is laid out as (`Group.laid_like`): dims `order`, outermost
    first."""

    like: Node
    order: tuple[int, ...]


def memory_walk(group: Group) -> Walk | None:
    """The walk order of a pointwise kernel whose output is laid out like a permuted input
    (`fusion._outputs_in_input_layout`): that input's memory order, read off its permutation
    of a row-major source, when it is not row-major itself; None otherwise.

    Why: the flat walk of the logical domain reads and writes such a permuted layout in short
    rows scattered across memory (LLaMA's rotary kernel reads q as (B, H, S, D) out of the
    projection's (B, S, H, D) memory). Walked in memory order, consecutive lanes read and
    write consecutive addresses: the output is allocated dense in that order and stored at
    its coordinates, the input loaded at the flat index where it is dense in that order.
    H200, 2026-11-29 (`benchmarks/kernel_ab_gpu.py --without walk`): LLaMA's rotary kernel
    0.0105 -> 0.0098 ms."""
    if group.nhwc or not group.laid_like:
        return None
    like = next(iter(group.laid_like.values()))
    if group.walk is not None:  # a copy's own memory order (fusion._products_take_it_transposed)
        return Walk(like, group.walk)
    if like.op != "permute" or len(like.args) < 2:
        return None
    perm = [int(d) % like.rank for d in like.args[1]]
    if sorted(perm) != list(range(like.rank)) or like.rank != len(group.domain):
        return None
    order = tuple(perm.index(k) for k in range(like.rank))
    if order == tuple(range(like.rank)):
        return None
    return Walk(like, order)


class _PointwiseWriter(_Writer):
    narrow_index = True

    def coord(self, k: int) -> str:
        self.coords_needed.add(k)
        return f"c{k}"

    def load_mask(self, dm: DimMap) -> str | None:
        return "mask"

    def flat_offset(self, dm: DimMap) -> str | None:
        return "offs" if dm == _identity(len(self.g.domain)) else None

    def inner_flat(self, k: int) -> str | None:
        if self.walk is not None or self.g.nhwc or self.pairs is not None:
            return None  # the flat index is not the row-major one, or the spans count pairs
        for j in range(k):
            self.coord(j)
        return "(" + " - ".join(["offs"] + [f"c{j} * span{j}" for j in range(k)]) + ")"


def pointwise_kernel(group: Group, part: Partition, sym_code: Any, name: str) -> KernelSource:
    w = _PointwiseWriter(group, part, sym_code)
    walk = memory_walk(group)
    if walk is not None:
        w.walk = walk.order  # set before the body: outputs then store at their coordinates
        w.helpers.add("_dense_walk")
    scope = _Scope()
    for o, out in enumerate(group.outputs):
        w.store(out, o, scope, "mask")
    body = w.lines
    r = len(group.domain)
    pairs = _pair_body(w, group) if walk is None and not group.nhwc else None
    if w.inner_flags:
        w.helpers.add("_laid_from")
    head = ["if INDEX_64:  # offsets past 2**31: 64-bit index maths",
            "    pid = tl.program_id(0).to(tl.int64)",
            "else:  # 32-bit: the coordinate divisions below stay cheap (int64 division is emulated)",
            "    pid = tl.program_id(0)",
            "izero = pid * 0  # 0 in the index type (sizes in index arithmetic: `scalar`)",
            "offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "mask = offs < n_elements"]
    if walk is not None and group.walk is not None:
        head.append(f"# the flat index walks the domain in dims {walk.order} outermost first, the "
                    f"output laid out so: a copy of {walk.like.name} without its last two dims' "
                    "transpose, read transposed by the products")
    elif walk is not None:
        head.append(f"# the flat index walks the domain in {walk.like.name}'s memory order, dims "
                    f"{walk.order} outermost first (the output is laid out so)")
    head += _decompose_direct("offs", sorted(w.coords_needed), r, "c",
                              None if walk is None else list(walk.order))
    if group.nhwc:
        # a channels_last convolution's epilogue: a (BLOCK_HW, BLOCK_C) tile per program reads
        # the NHWC input along channels and writes the NCHW output along hw (a fused transpose;
        # a flat walk would read NHWC with a stride of C elements)
        head = ["if INDEX_64:  # offsets past 2**31: 64-bit index maths",
                "    c0 = tl.program_id(2).to(tl.int64)",
                "else:",
                "    c0 = tl.program_id(2)",
                "izero = c0 * 0",
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
    extra = ["INDEX_64"]
    if pairs is not None:  # both bodies; the launch takes the pairs' where the last dim is even
        pair_head, pair_lines = pairs
        common = head[:5]
        body = (["    if PAIRS:  # the last dim walked in pairs (kernels/pairs.py)"]
                + [f"        {line}" for line in pair_head] + [f"    {line}" for line in pair_lines]
                + ["    else:"] + [f"        {line}" for line in head[5:]] + [f"    {line}" for line in body])
        head = common
        extra.append("PAIRS")
    return _finish_simple(w, group, part, name, "pointwise", head, body,
                          ["n_elements"] + [f"D{k}" for k in range(r)],
                          {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096], "num_warps": [2, 4, 8]},
                          {"BLOCK_SIZE": 1024, "num_warps": 4}, extra_constexpr=extra)


def _pair_body(w: _PointwiseWriter, group: Group) -> tuple[list[str], list[str]] | None:
    """(head, body) of the kernel written over the last dim's pairs (`kernels/pairs.py`), or
    None where that loads nothing fewer times: no take whose index is the same for both
    elements of a pair, or a last dim of odd size at the traced shapes."""
    r = len(group.domain)
    if not r or not isinstance(group.domain[-1], int) or group.domain[-1] < 2 or group.domain[-1] % 2 \
            or not any(m.op == TAKE for m in group.nodes):
        return None  # (without a take, no second pass: codegen writes most kernels once)
    lines, needed = w.lines, w.coords_needed
    # what the pass adds to the kernel's parameters and launch, undone if it is dropped
    kept = (w.counter, list(w.scalar_args), list(w.contig_flags), list(w.inner_flags),
            dict(w.dim_sources), set(w.helpers), w.used_index_zero)
    w.lines, w.coords_needed, w.pairs, w.pair_takes = [], set(), r - 1, 0
    try:
        scope = _Scope()
        for o, out in enumerate(group.outputs):
            w.store(out, o, scope, "mask")
        pair_lines, pair_takes = w.lines, w.pair_takes
        pair_needed = sorted(w.coords_needed | {r - 1})
    finally:
        w.lines, w.coords_needed, w.pairs = lines, needed, None
    if not pair_takes:
        (w.counter, w.scalar_args, w.contig_flags, w.inner_flags, w.dim_sources, w.helpers,
         w.used_index_zero) = kept
        return None
    w.pair_kernel = True
    last = f"D{r - 1}"
    head = ["pp = pid * (BLOCK_SIZE // 2) + tl.arange(0, BLOCK_SIZE // 2)[:, None]  # pairs: 2 pp, 2 pp + 1",
            "jj = tl.arange(0, 2)[None, :]  # which element of the pair",
            "offs = pp * 2 + jj",
            "mask = pp * 2 < n_elements  # (an even last dim: a pair is inside or outside whole)",
            f"H = {last} // 2  # pairs along the last dim"]
    head += _decompose_direct("pp", pair_needed, r, "c", sizes=[f"D{k}" for k in range(r - 1)] + ["H"],
                              block="(BLOCK_SIZE // 2)", lane="tl.arange(0, BLOCK_SIZE // 2)[:, None]")
    head += [f"q = c{r - 1}  # the pair's place along the last dim",
             f"c{r - 1} = q * 2 + jj"]
    return head, pair_lines
