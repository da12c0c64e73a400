"""Pointwise ops moved across reshapes, so that a reduction over a reshaped value fuses with
the ops on either side of it.

A `view` (or `flatten`) that merges or splits dims (`x.view(b, c, -1)` before a softmax over the
flattened spatial dims, the merged dims of a global average pool) starts a new domain: a fusion group walks one index space, so the clamp before
the view and the scale after the view's inverse each cost a kernel, a write and a read of their
own (KernelBench level-2 38: three passes of 2.1 GB around the softmax). Elementwise ops commute
with a reshape of every full-size operand, as long as each broadcast operand can be reshaped
the same way: the dims the reshape merges or splits must be all full or all broadcast in it
(a per-channel bias (C, 1, 1, 1) of (N, C, D, H, W) is (C, 1) of (N, C, D*H*W)).

- `hoist`: a view read by a reduction takes the single-user pointwise ops before it along:
  `softmax(clamp(x + b).view(n, c, -1))` becomes `softmax(clamp(x.view(n, c, -1) + b'))`, so the
  reduction's prologue computes them. So does a view that only splits dims and that a permute
  reads (pixel shuffle's): the permuted copy computes them.
- `copy_into_rows`: where that cone is read elsewhere too, a cone of cheap ops (`CHEAP`) that
  reads one full-size value is copied over the view instead: the reduction's prologue
  computes it again and nobody writes it to read it back (a convolution times a per-channel
  scale before an instance norm, read by its statistics and its map).
- `sink`: a pointwise op on views of a row kernel's values (a reduction's, or what pointwise
  ops compute from one), whose other operands are the model's inputs or weights, moves before
  the views: `softmax(y).view(shape) * scale` becomes `(softmax(y) * scale').view(shape)`, so
  the reduction's epilogue computes it. (After a matrix product's epilogue view nothing moves:
  the product's kernel takes its epilogue in either shape.)

Both keep every value exact: they reorder indexing, never arithmetic. Neither passes a matrix
product's epilogue (it stays in the product's kernel) or a value anything else reads.
"""

from __future__ import annotations

import math
from typing import Any

from kopt.phases.engineers.offline.graph import (
    ARG_REDUCTIONS,
    LAYOUT,
    MATMUL,
    POINTWISE,
    REDUCTIONS,
    SCANS,
    WINDOW_TAP,
    Graph,
    Node,
    substitute,
)

_ROW_OPS = REDUCTIONS | SCANS | ARG_REDUCTIONS
RESHAPES = ("view", "flatten")
"""Layout ops that only merge or split dims (`flatten`: a multi-dim reduction's merged dims)."""
_VIEWS = (*RESHAPES, "squeeze", "unsqueeze")
"""Layout ops whose result is as contiguous as their input: a reshape of it is a view too."""


def dim_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[range, range]] | None:
    """The dims a reshape from `src` to `dst` merges or splits, as pairs of ranges (src dims,
    dst dims) with equal products, in order; size-1 dims join a neighbouring group. None when
    a size is 0 or the element counts differ."""
    if 0 in src or 0 in dst or math.prod(src) != math.prod(dst):
        return None
    out: list[tuple[range, range]] = []
    i = j = 0
    while i < len(src) and j < len(dst):
        a, b, i0, j0 = src[i], dst[j], i, j
        i, j = i + 1, j + 1
        while a != b:
            if a < b:
                a, i = a * src[i], i + 1
            else:
                b, j = b * dst[j], j + 1
        out.append((range(i0, i), range(j0, j)))
    if i < len(src) or j < len(dst):  # trailing size-1 dims: the last group takes them
        if not out:
            return [(range(len(src)), range(len(dst)))]
        last_i, last_j = out[-1]
        out[-1] = (range(last_i.start, len(src)), range(last_j.start, len(dst)))
    return out


def splits_only(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether the reshape `src` -> `dst` only splits dims (never merges two of src's non-1
    dims): a view of any strided tensor, a slice's or a permutation's included (a dim of
    stride s split into (a, b) has strides (b * s, s))."""
    groups = dim_groups(src, dst)
    return groups is not None and all(sum(1 for k in si if src[k] != 1) <= 1 for si, _ in groups)


def reshaped_broadcast(operand: tuple[int, ...], src: tuple[int, ...],
                       dst: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape (rank of `dst`) that a broadcast `operand` of `src` has after the reshape
    `src` -> `dst`, or None when the reshape splits or merges dims it is full in and broadcast
    in at once (a (C, 1) operand of (C, H*W) viewed as (C*H, W))."""
    groups = dim_groups(src, dst)
    if groups is None or len(operand) > len(src):
        return None
    padded = (1,) * (len(src) - len(operand)) + tuple(operand)
    out = [1] * len(dst)
    for si, dj in groups:
        full = [padded[k] == src[k] for k in si if src[k] != 1]
        if any(padded[k] not in (1, src[k]) for k in si):
            return None
        if all(full) and any(full):
            for k in dj:
                out[k] = dst[k]
        elif any(full):
            return None
    return tuple(out)


def _view(x: Node, shape: tuple[int, ...], sym: tuple[Any, ...], name: str, origin: str) -> Node:
    return Node(name, "view", [x, list(sym)], shape=shape, sym=sym, dtype=x.dtype, origin=origin)


def _like(v: Node, x: Node, name: str, origin: str) -> Node:
    """Reshape `v` (a view or flatten) applied to `x`, a value of v's input's shape."""
    return Node(name, v.op, [x, *v.args[1:]], dict(v.kwargs), shape=v.shape, sym=v.sym,
                dtype=x.dtype, target=v.target, origin=origin)


class _Mover:
    def __init__(self, graph: Graph, pinned: set[Node]) -> None:
        self.pinned = pinned
        self.users = graph.users()
        self.outputs = {id(o) for o in graph.outputs}
        self.names = {n.name for n in graph.nodes}
        self.copying = False
        """`hoist` copies the cone (see `copy_into_rows`) instead of moving it."""
        self.leaves: list[Node] = []
        """The full-size values the hoisted cone reads (views of them made), in order."""

    def _name(self, base: str) -> str:
        k = 1
        while f"{base}_r{k}" in self.names:
            k += 1
        self.names.add(f"{base}_r{k}")
        return f"{base}_r{k}"

    def _operands(self, p: Node, src: tuple[int, ...],
                  dst: tuple[int, ...]) -> list[tuple[Node, tuple[int, ...] | None]] | None:
        """Each node operand of `p` (over `src`) with its shape over `dst`: None for a full-size
        one (reshaped as the view does), else its broadcast shape; None when one cannot be."""
        out = []
        for a in p.args:
            if not isinstance(a, Node):
                continue
            if a.shape == src:
                out.append((a, None))
                continue
            shape = reshaped_broadcast(a.shape, src, dst)
            if shape is None:
                return None
            out.append((a, shape))
        return out

    def _rebuilt(self, p: Node, operands: list[tuple[Node, tuple[int, ...] | None]],
                 full: dict[Node, Node], dst: tuple[int, ...], dst_sym: tuple[Any, ...],
                 made: list[Node], name: str) -> Node:
        swap: dict[Node, Node] = {}
        for a, shape in operands:
            if a in swap:
                continue
            if shape is None:
                swap[a] = full[a]
            else:
                sym = tuple(s if n != 1 else 1 for n, s in zip(shape, dst_sym, strict=True))
                made.append(_view(a, shape, sym, self._name(a.name), a.origin))
                swap[a] = made[-1]
        return Node(name, p.op, substitute(p.args, swap), dict(p.kwargs), shape=dst, sym=dst_sym,
                    dtype=p.dtype, target=p.target, origin=p.origin)

    # -- hoist --------------------------------------------------------------------------
    def _cone(self, p: Node, reader: Node) -> bool:
        """Whether `p` moves with `reader`: pointwise, read by it alone, not returned (when
        copying: any cheap op, whoever else reads it)."""
        if self.copying:
            return movable(p, self.pinned) and p.op in CHEAP
        return movable(p, self.pinned) and self.users[p] == [reader] and id(p) not in self.outputs

    def hoist(self, p: Node, v: Node, made: list[Node], replaced: list[Node]) -> Node | None:
        """`p` (read by view `v` alone) as the same op over views of its operands, recursively
        through operands that only `p` reads; the new nodes are appended to `made` in order and
        the pointwise nodes they replace to `replaced`. Returns p's value after the view, or
        None when an operand cannot be reshaped, when one that would move cannot, or when one
        is a strided or shifted view (a pooling's tap: level-2 8's max pool would have been
        split into a kernel per tap)."""
        operands = self._operands(p, p.shape, v.shape)
        if operands is None:
            return None
        full: dict[Node, Node] = {}
        for a, shape in operands:
            if shape is not None or a in full:
                continue
            inner = _like(v, a, self._name(a.name), v.origin)
            if self._cone(a, p):  # moves too, or nothing does (a fused chain is not cut in two)
                moved = self.hoist(a, inner, made, replaced)
                if moved is None:
                    return None
                full[a] = moved
            elif a.op == WINDOW_TAP or (a.op in LAYOUT and a.op not in _VIEWS
                                        and not splits_only(a.shape, v.shape)):
                return None  # a strided or shifted view: merging its dims would copy it
            else:
                made.append(inner)
                full[a] = inner
                self.leaves.append(a)
        name = self._name(p.name) if self.copying else p.name
        made.append(self._rebuilt(p, operands, full, v.shape, v.sym, made, name))
        replaced.append(p)
        return made[-1]

    def copy_into_rows(self, v: Node) -> list[Node] | None:
        """The cheap pointwise cone before view `v`, which a reduction reads, copied over
        views of what it reads (the original stays for its other readers), where that cone
        reads one full-size value no wider than its own: the reduction's prologue computes
        it again, and the value is not written to be read back (an instance norm's statistics
        and its map both read a convolution's output times a per-channel scale: two passes
        over the tensor instead of four). Returns the new nodes, the last one the value after
        the view; None where the cone cannot be reshaped or reads more."""
        p = v.args[0]
        self.copying, self.leaves = True, []
        try:
            if not self._cone(p, v) or id(p) in self.outputs:
                return None
            made: list[Node] = []
            new = self.hoist(p, v, made, [])
        finally:
            self.copying = False
        leaves = set(self.leaves)
        if new is None or len(leaves) != 1 or \
                next(iter(leaves)).dtype.itemsize > p.dtype.itemsize:
            return None
        return made

    # -- sink ---------------------------------------------------------------------------
    @staticmethod
    def _leaf(a: Node) -> bool:
        """A model input or weight, or a layout view of one (loaded, never computed)."""
        while a.op in LAYOUT and a.args and isinstance(a.args[0], Node):
            a = a.args[0]
        return a.op == "input"

    def _feeds_rows(self, p: Node) -> bool:
        """Whether a reduction or scan reads `p` through pointwise ops and views (its prologue:
        what `hoist` moved there stays there)."""
        stack, seen = [p], set()
        while stack:
            n = stack.pop()
            for u in self.users[n]:
                if u.op in _ROW_OPS:
                    return True
                if (u.op in POINTWISE or u.op in LAYOUT) and id(u) not in seen:
                    seen.add(id(u))
                    stack.append(u)
        return False

    @staticmethod
    def _after_rows(x: Node) -> bool:
        """Whether `x` is a reduction's value or a permuted copy, or computed from one by
        pointwise ops (a softmax's division, a norm's map): a kernel's epilogue, which a moved
        op can join (patches unfolded, permuted and flattened, then scaled)."""
        stack, seen = [x], set()
        while stack and len(seen) < 64:
            n = stack.pop()
            if n.op in REDUCTIONS or n.op == "identity" and n.args and isinstance(n.args[0], Node) \
                    and n.args[0].op == "permute":
                return True  # (a permuted copy's kernel takes its epilogue the same way)
            if n.op in POINTWISE and id(n) not in seen:
                seen.add(id(n))
                stack.extend(n.inputs())
        return False

    def sinkable(self, p: Node) -> list[Node] | None:
        """The views of one row kernel's values that `p` may move before (every full-size
        operand that is not a model input or weight), or None."""
        if not movable(p, self.pinned) or self._feeds_rows(p):
            return None
        views = [a for a in dict.fromkeys(p.inputs()) if a.shape == p.shape and reshapes(a)
                 and a.args[0].op in POINTWISE | REDUCTIONS]
        if not views or not self._after_rows(views[0].args[0]) or \
                any(v.args[0].shape != views[0].args[0].shape for v in views) or \
                any(not self._leaf(a) for a in p.inputs() if a not in views):
            return None
        return views

    def sink(self, p: Node, views: list[Node]) -> list[Node] | None:
        """`p` (over the views' shape) as the same op over their inputs, then the view: the new
        nodes in order, the last one p's value; None when an operand cannot be reshaped."""
        v, x = views[0], views[0].args[0]
        operands = self._operands(p, v.shape, x.shape)
        if operands is None:
            return None
        made: list[Node] = []
        full: dict[Node, Node] = {}
        for a, shape in operands:
            if shape is None and a not in full:
                if a in views:
                    full[a] = a.args[0]
                else:
                    made.append(_view(a, x.shape, x.sym, self._name(a.name), a.origin))
                    full[a] = made[-1]
        inner = self._rebuilt(p, operands, full, x.shape, x.sym, made, self._name(p.name))
        made.append(inner)
        made.append(_like(v, inner, p.name, p.origin))
        return made


CHEAP = frozenset({"add", "sub", "mul", "div", "neg", "abs", "relu", "clamp", "minimum",
                   "maximum", "hardtanh", "where", "cast", "identity"})
"""Pointwise ops cheap enough to compute twice (a copied cone): a few instructions, no
transcendental."""


def reshapes(v: Node) -> bool:
    """A view or flatten that merges or splits dims (not one that only adds or drops size-1
    dims, which a fusion group follows already)."""
    if v.op not in RESHAPES or not v.args or not isinstance(v.args[0], Node):
        return False
    x = v.args[0]
    return [s for s in x.shape if s != 1] != [s for s in v.shape if s != 1]


def movable(p: Node, pinned: set[Node]) -> bool:
    """A pointwise op that may be computed elsewhere: every operand a node or a plain value (a
    mean's division by its row count names its reduction's dims: it stays where it is), not
    `pinned`, outside any matrix product's epilogue (it stays in the product's kernel)."""
    return p.op in POINTWISE and p not in pinned and not p.kwargs and \
        not any(isinstance(a, (list, tuple)) for a in p.args) and \
        not any(isinstance(i, Node) and i.op in MATMUL for i in p.args)


def replace_nodes(graph: Graph, at: dict[Node, list[Node]], value: dict[Node, Node]) -> None:
    """Each key of `at` out of the graph, the nodes it maps to in at its place (every operand
    of a new node must be defined before that place), and every read of a key of `value`
    redirected to its value."""
    out: list[Node] = []
    for n in graph.nodes:
        if n in at:
            out.extend(at[n])
            continue
        n.args = substitute(n.args, value)
        n.kwargs = {k: substitute(v, value) for k, v in n.kwargs.items()}
        out.append(n)
    graph.outputs = [substitute(o, value) for o in graph.outputs]
    graph.nodes = out


def move_pointwise_across_views(graph: Graph, pinned: set[Node] | None = None) -> int:
    """Hoist and sink (module docstring) until nothing moves; `pinned` nodes stay where they
    are (the bias add that opens a channels_last epilogue). Returns how many ops moved."""
    moved = 0
    for _ in range(256):  # each round moves one cone: a bound, never reached in practice
        m = _Mover(graph, pinned or set())
        for n in graph.nodes:
            if reshapes(n) and m._cone(n.args[0], n) and \
                    any(u.op in _ROW_OPS or (u.op == "permute" and splits_only(n.args[0].shape, n.shape))
                        for u in m.users[n]):
                made: list[Node] = []
                replaced: list[Node] = []
                new = m.hoist(n.args[0], n, made, replaced)
                if new is not None:
                    replace_nodes(graph, {**{r: [] for r in replaced}, n: made}, {n: new})
                    moved += len(replaced)
                    break
            if reshapes(n) and any(u.op in _ROW_OPS for u in m.users[n]):
                made = m.copy_into_rows(n)
                if made is not None:
                    replace_nodes(graph, {n: made}, {n: made[-1]})
                    moved += 1
                    break
            views = m.sinkable(n)
            made = m.sink(n, views) if views is not None else None
            if made is not None:
                replace_nodes(graph, {n: made}, {n: made[-1]})
                moved += 1
                break
        else:
            return moved
    return moved
