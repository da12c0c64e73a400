"""Slice assignments: `out[box] = v` as one pointwise value over out's domain.

`torch.export` writes `out[:, a:b] = v` as `slice_scatter(out, copy(out[:, a:b], v), 1, a, b)`;
PyTorch runs each as a copy of the whole tensor. Here a scatter is `where(inside, load of v at
the box, out)`: the box load (`window_tap`, or a `take` at `(o - start) // step` for a step
above 1) moves through v's pointwise ops onto what they read, and a scatter into a slice of
another scatter's result composes into one box over both dims, so a temporal shift's
assignments, or rotary pairs written as `out[..., ::2] = ...`, are one kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kopt.phases.engineers.offline.graph import (
    LAYOUT,
    MATMUL,
    POINTWISE,
    TAKE,
    WINDOW_TAP,
    Builder,
    Node,
    Sym,
    broadcast_shapes,
    broadcasts_to,
    norm_dim,
    whole_slice,
)


@dataclass(frozen=True)
class Scatter:
    """A value lowered from `slice_scatter`: `base` with `src` written over a box of it."""

    base: Node
    src: Node
    windows: tuple[tuple[int, Any, Any], ...]
    """(dim, first index, length) of the box along each dim it narrows, in base's coordinates:
    ints, or `Sym`s read at run time."""


def _window_start(start: Any, size: Any, traced: int) -> Any:
    """A slice's start as an index into a dim of `size` (an int or a sympy expression; `traced`
    its traced value): an int, or a Sym."""
    if isinstance(start, Sym):
        return start
    start = 0 if start is None else start
    if start >= 0:
        return start
    if isinstance(size, int):
        return max(size + start, 0)
    return Sym(size + start, max(traced + start, 0))


def _plus(a: Any, c: Any) -> Any:
    """The sum of two ints or Syms."""
    if isinstance(a, int) and isinstance(c, int):
        return a + c
    expr = (a.expr if isinstance(a, Sym) else a) + (c.expr if isinstance(c, Sym) else c)
    return Sym(expr, (a.hint if isinstance(a, Sym) else a) + (c.hint if isinstance(c, Sym) else c))


def _sized(v: Any, traced: int) -> Any:
    """A run-time size (an int or a sympy expression) as an int or a Sym."""
    return v if isinstance(v, int) else Sym(v, traced)


WHOLE_DIM_END = 2 ** 62
"""A slice end at or past this is the end of its dim (Python's `x[a:]` exports as 2**63 - 1)."""


def lower_slice_scatter(b: Builder, base: Node, src: Node, dim: int, start: Any, end: Any,
                        step: Any, name: str, origin: str) -> Node | None:
    """`slice_scatter(base, src, dim, start, end)` (what `out[:, a:b] = y` exports as): one
    pointwise value, `where(inside, tap(src), base)`, where `tap` is a masked load of src at
    o - start along dim (`window_tap`, clipped to src) and `inside` compares an arange of dim
    with the box. A scatter into a slice of a scatter's result at the same box (`out[:, :-1,
    :k] = ...` exports as a scatter of a scatter of `slice(out)`) composes into one box over
    both dims, so a temporal shift's assignments are one kernel that writes each element once,
    where PyTorch copies the whole tensor per assignment. Sizes follow the inputs at run time.
    A step above 1 (`out[..., 1::2] = v`) takes v at (o - start) // step instead
    (`_strided_scatter`). None for a src that is not base's rank or a step that is not an
    int."""
    if not (isinstance(base, Node) and isinstance(src, Node)) or type(step) is not int or \
            step < 1 or src.rank != base.rank or base.rank == 0:
        return None
    d = norm_dim(dim, base.rank)
    sizes = [b.runtime_size(base, j) for j in range(base.rank)]
    lo = _window_start(start, sizes[d], base.shape[d])
    if step > 1:
        if not (_pushable(src) or _loadable(src)):
            return None
        return _strided_scatter(b, base, src, d, lo, step, tuple(sizes), name, origin)
    whole = lo == 0 and (end is None or isinstance(end, int) and end >= WHOLE_DIM_END)
    windows = [(d, lo, sizes[d] if whole else _sized(b.runtime_size(src, d), src.shape[d]))]
    inner = b.scatters.get(src)
    if inner is not None and inner.base.op == "slice" and inner.base.args[0] is base and \
            len(inner.base.args) >= 3 and norm_dim(inner.base.args[1], base.rank) == d and \
            (len(inner.base.args) < 5 or inner.base.args[4] == 1) and \
            _window_start(inner.base.args[2], sizes[d], base.shape[d]) == lo:
        # the inner scatter wrote into base[start:end] along d: its box, moved by start along d
        moved = [(j, _plus(lo, s) if j == d else s, n) for j, s, n in inner.windows]
        windows = moved + ([] if any(j == d for j, _, _ in moved) else windows)
        src = inner.src
    # a box as wide as base along a dim (`out[:, a:b]` keeps a `:` slice where sizes are
    # symbolic) narrows nothing there
    windows = sorted((w for w in windows if not (w[1] == 0 and _same_size(w[2], sizes[w[0]]))),
                     key=lambda w: w[0])
    if not windows:  # src covers base: the scatter is src itself
        return src if src.dtype == base.dtype else b.op(name, "cast", [src], src, dtype=base.dtype,
                                                        origin=origin)
    taps = [(j, 1, 1, s, 0, 1, n.expr if isinstance(n, Sym) else n) for j, s, n in windows]
    if not (_pushable(src) or _loadable(src)):
        return None  # (a view of a value computed beside it: PyTorch writes it)
    tap = _tapped(b, src, taps, base.shape, tuple(sizes), f"{name}_src", origin)
    if src.dtype != base.dtype:
        tap = b.op(f"{name}_cast", "cast", [tap], tap, dtype=base.dtype, origin=origin)
    inside: Node | None = None
    for j, s, n in windows:
        idx = _along(b, _coordinate(b, base, j, sizes, name, origin), base.rank - 1 - j, origin)
        ge = b.op(f"{name}_lo{j}", "ge", [idx, s], idx, dtype=torch.bool, origin=origin)
        lt = b.op(f"{name}_hi{j}", "lt", [idx, _plus(s, n)], idx, dtype=torch.bool, origin=origin)
        box = b.op(f"{name}_in{j}", "logical_and", [ge, lt], idx, dtype=torch.bool, origin=origin)
        inside = box if inside is None else b.op(
            f"{name}_in", "logical_and", [inside, box], box, shape=broadcast_shapes(inside.shape, box.shape),
            sym=broadcast_shapes(inside.sym, box.sym), origin=origin)
    assert inside is not None
    out = b.add(Node(name, "where", [inside, tap, base], {}, base.shape, tuple(sizes), base.dtype,
                     origin=origin))
    b.scatters[out] = Scatter(base, src, tuple(windows))
    return out


MAX_TAPPED_CHAIN = 16
"""The most pointwise ops a scatter's box load is moved through (`_tapped`)."""


def _layout_root(n: Node) -> Node:
    while n.op in LAYOUT and n.args and isinstance(n.args[0], Node):
        n = n.args[0]
    return n


def _loadable(n: Node) -> bool:
    """Whether a kernel can load n at a box or an index (`window_tap`, `take` read their
    operand from memory; fusion stores a value they read, one computed from shapes too): a
    value, or a view of a forward argument, a weight, what PyTorch computes (a complex
    buffer's `view_as_real`) or a matrix product (its kernel writes it whole: the heads of a
    projection, `xq.view(b, s, h, d)`); not a view of a value a pointwise or row kernel
    computes, which may be fused away."""
    return n.op not in LAYOUT or _layout_root(n).op in ("input", "fallback", *MATMUL)


def _scalar_expand(v: Node) -> bool:
    return v.op == "expand" and bool(v.args) and isinstance(v.args[0], Node) and v.args[0].rank == 0


def _pushable(v: Node, depth: int = 0) -> bool:
    """Whether a box load or an index moves through v onto what v reads (`_tapped`,
    `_taken`): a pointwise op whose operands broadcast to it, each loadable or (with v's
    shape) itself pushable; a `:` or a step-1 slice whose source is."""
    while whole_slice(v):
        v = v.args[0]
    if _scalar_expand(v):
        return True
    if depth >= MAX_TAPPED_CHAIN:
        return False
    if v.op == "slice" and len(v.args) >= 3 and isinstance(v.args[0], Node) and \
            v.args[0].rank == v.rank and type(v.args[2] or 0) is int and (v.args[2] or 0) >= 0:
        return _loadable(v.args[0]) or _pushable(v.args[0], depth + 1)
    operands = [a for a in v.args if isinstance(a, Node)]
    if not (v.op in POINTWISE and operands and not v.kwargs and
            all(broadcasts_to(a.shape, v.shape) for a in operands)):
        return False
    return all(_loadable(a) or (a.shape == v.shape and _pushable(a, depth + 1)) for a in operands)


def _tapped(b: Builder, v: Node, taps: list[tuple[Any, ...]], shape: tuple[int, ...],
            sizes: tuple[Any, ...], name: str, origin: str, depth: int = 0) -> Node:
    """v loaded at a scatter's box (`window_tap`, clipped: 0 outside), moved through the
    pointwise ops that compute v onto the values they read, where each of those has v's shape:
    `out[:, a:b] = relu(y[:, a:b]) * 2` loads y's box in the scatter's kernel and computes
    there, where a tap of the product would have a kernel write it first. Outside the box the
    ops see 0s; the scatter's `where` never selects those."""
    while whole_slice(v):  # `:` over a dim of symbolic size: v's input itself
        v = v.args[0]
    if _scalar_expand(v):  # `out[box] = 0.0`: the scalar, broadcast by the scatter's where
        return v.args[0]
    if v.op in POINTWISE and _pushable(v):
        def moved(a: Node) -> Node:  # an operand broadcast along a box dim is read as it is
            off = v.rank - a.rank
            own = [(t[0] - off, *t[1:]) for t in taps if t[0] >= off and a.shape[t[0] - off] != 1]
            if not own:
                return a
            a_shape, a_sizes = _boxed(b, a, [(j + off, j) for j, *_ in own], shape, sizes)
            if a.shape != v.shape or not _pushable(a):  # a table of angles: loaded as it is
                return b.add(Node(name, WINDOW_TAP, [a], {"taps": own, "fill": 0.0, "clip": True},
                                  a_shape, a_sizes, a.dtype, origin=origin))
            return _tapped(b, a, own, a_shape, a_sizes, name, origin, depth + 1)

        args = [moved(a) if isinstance(a, Node) else a for a in v.args]
        return b.add(Node(f"{name}_{v.op}", v.op, args, {}, shape, sizes, v.dtype, origin=origin))
    if v.op == "slice" and _pushable(v) and (len(v.args) < 5 or v.args[4] == 1):
        # a slice (step 1) of z: z at the box moved by the slice's start along its dim
        j, start, z = norm_dim(v.args[1], v.rank), v.args[2] or 0, v.args[0]
        size = b.runtime_size(z, j)
        moved = [t for t in taps if t[0] != j]
        pad = next((t[3] for t in taps if t[0] == j), 0)
        moved.append((j, 1, 1, _plus(pad, -start), 0, 1, size))
        return _tapped(b, z, sorted(moved, key=lambda t: t[0]), shape, sizes, name, origin, depth + 1)
    return b.add(Node(name, WINDOW_TAP, [v], {"taps": taps, "fill": 0.0, "clip": True}, shape,
                      sizes, v.dtype, origin=origin))


MAX_INTERLEAVED = 4
"""The most values a view interleaves as strided assignments (`lower_interleave_view`)."""


def lower_interleave_view(b: Builder, v: Node, shape: tuple[int, ...], sym: tuple[Any, ...],
                          dtype: torch.dtype, name: str) -> Node | None:
    """A view that merges the last two dims (..., n, k) -> (..., n * k) of k values stacked
    along a new last dim (`torch.stack(parts, -1).flatten(-2)`: GPT-J's `rotate_every_two`)
    or of one value repeated along it (`t.repeat_interleave(k, -1)`: an unsqueeze expanded
    and copied) as the k strided assignments it is, `out[..., j::k] = parts[j]`: the
    consumers' kernel takes each part at o // k and nothing writes the stack (an H200 ran
    GPT-J's rotary embedding as five kernels over the stack, 0.445 ms). None for any other
    view."""
    r = len(shape)
    if r < 1 or v.rank != r + 1 or tuple(v.shape[:-2]) != tuple(shape[:-1]) or \
            v.shape[-2] * v.shape[-1] != shape[-1] or type(v.sym[-1]) is not int or \
            not 2 <= v.shape[-1] <= MAX_INTERLEAVED:
        return None
    k = v.shape[-1]
    while v not in b.cats and v.op == "identity" and len(v.args) == 1 and isinstance(v.args[0], Node):
        v = v.args[0]  # a copy (`clone` of the expanded value)
    if v in b.cats:
        parts, d = b.cats[v]
        if d != r or len(parts) != k:
            return None
        sources = [_unsqueezed(p) for p in parts]
    elif v.op == "expand" and v.args and isinstance(v.args[0], Node):
        sources = [_unsqueezed(v.args[0])] * k
    else:
        return None
    if any(s is None or tuple(s.shape[:-1]) != tuple(shape[:-1]) for s in sources):
        return None  # (a part broadcast along another dim too: not taken at o // k alone)
    out = b.add(Node(f"{name}_base", "full", [False if dtype == torch.bool else 0], {}, tuple(shape),
                     tuple(sym), dtype, origin=name))
    for j, src in enumerate(sources):
        out = _strided_scatter(b, out, src, r - 1, j, k, tuple(sym), f"{name}_{j}", name)
    return out


def _unsqueezed(p: Node) -> Node | None:
    """What p adds a last dim of size 1 to (`x.unsqueeze(-1)`), or None."""
    if p.op == "unsqueeze" and len(p.args) >= 2 and isinstance(p.args[0], Node) and \
            norm_dim(p.args[1], p.rank) == p.rank - 1:
        return p.args[0]
    return None


def _strided_scatter(b: Builder, base: Node, src: Node, d: int, lo: Any, step: int,
                     sizes: tuple[Any, ...], name: str, origin: str) -> Node:
    """`slice_scatter` with a step above 1: where(inside, take(src, q), base) with
    q = (o - lo) // step along d and `inside` true at o = lo + k * step, k < src's size. The
    take moves through src's pointwise ops like `_tapped`; where it reaches a slice of the same
    dim with a step (`out[..., ::2] = x[..., ::2] * c`, interleaved rotary embeddings), it
    takes that slice's source at start + step * q, so no kernel writes the strided value."""
    n = _sized(b.runtime_size(src, d), src.shape[d])
    idx = _coordinate(b, base, d, sizes, name, origin)
    rel = b.op(f"{name}_rel", "sub", [idx, lo], idx, origin=origin)
    q = slice_index(b, idx, rel, lo, step, name, origin)
    taken = _taken(b, src, q, d, base.shape, sizes, f"{name}_src", origin)
    if taken.dtype != base.dtype:
        taken = b.op(f"{name}_cast", "cast", [taken], taken, dtype=base.dtype, origin=origin)
    on = b.op(f"{name}_on", "eq", list(on_residue(b, idx, rel, lo, step, name, origin)), idx,
              dtype=torch.bool, origin=origin)
    last = _plus(lo, Sym(step * (n.expr - 1) + 1, step * (src.shape[d] - 1) + 1) if isinstance(n, Sym)
                 else step * (n - 1) + 1)
    inside = b.op(f"{name}_in", "logical_and", [
        b.op(f"{name}_lo", "ge", [idx, lo], idx, dtype=torch.bool, origin=origin),
        b.op(f"{name}_hi", "lt", [idx, last], idx, dtype=torch.bool, origin=origin)], idx,
        dtype=torch.bool, origin=origin)
    inside = _along(b, b.op(f"{name}_inside", "logical_and", [inside, on], inside, origin=origin),
                    base.rank - 1 - d, origin)
    return b.add(Node(name, "where", [inside, taken, base], {}, base.shape, sizes, base.dtype,
                      origin=origin))


def slice_index(b: Builder, idx: Node, rel: Node, lo: Any, step: int, name: str,
                origin: str) -> Node:
    """k at o = lo + k * step (o the coordinate `idx`, rel = o - lo); other o are masked by
    the scatter. With a constant start, from o alone: o // step - lo // step = k there, so two
    strided scatters into one value (`out[..., 0::2] = ...; out[..., 1::2] = ...`) take their
    sources at one index expression and the kernel loads each element once (an H200's
    interleaved RoPE loaded x four times an element, its kernel 1.6x slower)."""
    if isinstance(lo, int) and lo >= 0:
        q = b.op(f"{name}_q", "truediv_trunc", [idx, step], idx, origin=origin)
        if lo // step:
            q = b.op(f"{name}_qs", "sub", [q, lo // step], idx, origin=origin)
        return q
    return b.op(f"{name}_q", "truediv_trunc", [rel, step], idx, origin=origin)  # o < lo: masked


def on_residue(b: Builder, idx: Node, rel: Node, lo: Any, step: int, name: str,
               origin: str) -> tuple[Node, int]:
    """(residue, value): o lies on the slice's step where the residue equals the value. With a
    constant start >= 0, o % step against start % step: o is never negative, so every strided
    scatter into one value shares the residue, and a pair kernel reads it off the pair's
    parity (`kernels/pointwise.py`); else (o - lo) % step against 0."""
    if isinstance(lo, int) and lo >= 0:
        return b.op(f"{name}_r", "fmod", [idx, step], idx, origin=origin), lo % step
    return b.op(f"{name}_r", "fmod", [rel, step], idx, origin=origin), 0


def _coordinate(b: Builder, base: Node, j: int, sizes: tuple[Any, ...] | list[Any], name: str,
                origin: str) -> Node:
    """base's coordinate along dim j, as a 1-D arange over that dim."""
    return b.add(Node(f"{name}_i{j}", "arange", [0, 1], {}, (base.shape[j],), (sizes[j],),
                      torch.int64, origin=origin))


def _along(b: Builder, v: Node, trailing: int, origin: str) -> Node:
    """A 1-D value over one dim with `trailing` dims of 1 after it, so that it broadcasts
    along that dim of a value of higher rank (and over the dims after it)."""
    name = f"{v.name}_u"
    for _ in range(trailing):
        v = b.add(Node(name, "unsqueeze", [v, v.rank], {}, v.shape + (1,), v.sym + (1,),
                       v.dtype, origin=origin))
    return v


def _taken(b: Builder, v: Node, q: Node, d: int, shape: tuple[int, ...], sizes: tuple[Any, ...],
           name: str, origin: str, depth: int = 0) -> Node:
    """v at index q along d (a `take`), moved through v's pointwise ops onto what they read
    where each has v's shape; a slice along d with an int start and step is taken from its
    source at start + step * q."""
    while whole_slice(v):  # `:` over a dim of symbolic size: v's input itself
        v = v.args[0]
    if _scalar_expand(v):  # `out[box] = 0.0`: the scalar, broadcast by the scatter's where
        return v.args[0]
    if v.op in POINTWISE and _pushable(v):
        def moved(a: Node) -> Node:  # an operand broadcast along d is read as it is
            da = d - (v.rank - a.rank)
            if da < 0 or a.shape[da] == 1:
                return a
            a_shape, a_sizes = _boxed(b, a, [(d, da)], shape, sizes)
            if a.op == "full":
                return b.add(Node(name, "full", list(a.args), {}, a_shape, a_sizes, a.dtype,
                                  origin=origin))
            if a.shape != v.shape or not _pushable(a):  # a table of angles: taken as it is
                return b.add(Node(name, TAKE, [a, q], {"dim": da}, a_shape, a_sizes, a.dtype,
                                  origin=origin))
            return _taken(b, a, q, da, a_shape, a_sizes, name, origin, depth + 1)

        args = [moved(a) if isinstance(a, Node) else a for a in v.args]
        return b.add(Node(f"{name}_{v.op}", v.op, args, {}, shape, sizes, v.dtype, origin=origin))
    if v.op == "slice" and _pushable(v) and norm_dim(v.args[1], v.rank) == d and \
            (len(v.args) < 5 or type(v.args[4]) is int):
        start, step = v.args[2] or 0, v.args[4] if len(v.args) >= 5 else 1
        at = b.op(f"{name}_at", "add", [b.op(f"{name}_st", "mul", [q, step], q, origin=origin), start],
                  q, origin=origin)
        return _taken(b, v.args[0], at, d, shape, sizes, name, origin, depth + 1)
    if v.op == "full":  # a constant at any index is the constant
        return b.add(Node(name, "full", list(v.args), {}, shape, sizes, v.dtype, origin=origin))
    return b.add(Node(name, TAKE, [v, q], {"dim": d}, shape, sizes, v.dtype, origin=origin))


def _boxed(b: Builder, a: Node, dims: list[tuple[int, int]], shape: tuple[int, ...],
           sizes: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """Operand a's shape and run-time sizes once loaded at a box: along each (dim of the
    result, dim of a) in `dims`, the result's; elsewhere a's own."""
    a_shape = list(a.shape)
    a_sizes = [b.runtime_size(a, k) for k in range(a.rank)]
    for j, k in dims:
        a_shape[k], a_sizes[k] = shape[j], sizes[j]
    return tuple(a_shape), tuple(a_sizes)


def _same_size(n: Any, size: Any) -> bool:
    """Whether a window's length (an int or a Sym) is `size` (an int or a sympy expression)."""
    v = n.expr if isinstance(n, Sym) else n
    if isinstance(v, int) or isinstance(size, int):
        return isinstance(v, int) and isinstance(size, int) and v == size
    return bool((v - size).simplify() == 0)
