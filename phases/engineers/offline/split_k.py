"""A product over a long K as a batch of shorter products and a sum over the batch (split-K).

One program per output tile walks the whole K with one float32 accumulator: on KernelBench's
matrix-vector product (K = 1,048,576) and its large-K product (K = 524,288) that left few
programs for the H100's 132 SMs, and an error 2e-4 and 6e-5 relative to the float64 truth,
against cuBLAS's 2e-8 and 1.5e-7 (cuBLAS splits K): the verifier refuses over 1e-5. Split into
S slices, A (M, K) viewed as (S, M, K / S) and B (K, N) as (S, K / S, N) are one batched
product (S times the programs), and the S partial products are summed by a reduction kernel
that takes the product's epilogue (bias, activation). The sum of S partials of K / S terms
each rounds like a two-level sum, about S times more exact than one running sum.
"""

from __future__ import annotations

import torch
from torch.utils._sympy.functions import FloorDiv

from kopt.phases.engineers.offline.graph import Builder, Node, lower_reduction

MIN_SPLIT_K = 16384
"""The shortest K that is split."""
K_OVER_OUTPUT = 32
"""K must exceed both output sizes by this factor: a product with many output tiles already
fills the GPU, and each of its programs walks a K short enough."""
MAX_SLICES = 64
MIN_SLICE = 1024
"""Slices: the largest power of two up to MAX_SLICES that divides K into at least
MIN_SLICE terms each."""


def slices(b: Builder, a: Node, w: Node) -> int | None:
    """The number of K slices to split the float32 product a @ w into, or None to keep it
    whole. The slices are views (K as (S, K / S)), so S must divide K in every input set the
    candidate runs at: K must be a forward argument's size (a weight's may follow the
    constructor) and S divides it in each of the case's input sets (KernelBench's smoke set
    has K = 96 beside main's 524,288: S = 32)."""
    if a.rank != 2 or w.rank != 2 or a.dtype != torch.float32 or w.dtype != torch.float32:
        return None
    (m, k), n = a.shape, w.shape[1]
    if not all(isinstance(v, int) for v in (m, k, n)) or k < MIN_SPLIT_K or \
            k < K_OVER_OUTPUT * max(m, n):
        return None
    every = b.arg_size_in_every_set(a, 1)
    if every is None:
        return None
    s = MAX_SLICES
    while s > 1 and (any(v % s for v in [k, *every]) or k // s < MIN_SLICE):
        s //= 2
    return s if s > 1 else None


def lower_split_k(b: Builder, a: Node, w: Node, s: int, name: str, origin: str) -> Node:
    """a @ w as the sum over s slices of K of a batched product (float32 throughout). The K
    slice is read at run time (`-1` in the views), so any K that s divides runs."""
    (m, k), n = a.shape, w.shape[1]
    m_sym, k_sym, n_sym = a.sym[0], a.sym[1], w.sym[1]
    part = k // s
    part_sym = k_sym // s if isinstance(k_sym, int) else FloorDiv(k_sym, s)
    a3 = b.add(Node(f"{name}_a_sliced", "view", [a, [m_sym, s, -1]], {}, (m, s, part),
                    (m_sym, s, part_sym), a.dtype, target=torch.ops.aten.view.default,
                    origin=origin))
    a3 = b.add(Node(f"{name}_a_batched", "permute", [a3, [1, 0, 2]], {}, (s, m, part),
                    (s, m_sym, part_sym), a.dtype, target=torch.ops.aten.permute.default,
                    origin=origin))
    w3 = b.add(Node(f"{name}_b_sliced", "view", [w, [s, -1, n_sym]], {}, (s, part, n),
                    (s, part_sym, n_sym), w.dtype, target=torch.ops.aten.view.default,
                    origin=origin))
    partial = b.add(Node(f"{name}_partial", "bmm", [a3, w3], {}, (s, m, n), (s, m_sym, n_sym),
                         torch.float32, origin=origin))
    return lower_reduction(b, "sum", partial, 0, False, name, origin, torch.float32)
