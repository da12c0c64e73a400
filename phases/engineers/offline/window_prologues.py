"""Pointwise ops computed at each tap of the windows that read them.

A pooling is lowered to taps (`graph.lower_window_pool`: strided slices, one per offset of a
window that tiles its input; `graph.lower_tap_pool`: masked loads at shifted coordinates), so
it is a pointwise op over the taps. The taps load their input: a pointwise chain before the
pooling (a convolution's bias, tanh, a scale) is a kernel of its own that writes the full-size
value the pooling reads back (KernelBench level-2 82: 2.1 GB written and read between the
epilogue and the max pool; 46: the same before an average pool). Each tap can compute that
chain instead from its operands' values at the same coordinates: `pool(tanh(x + b))` becomes
`max(tanh(x[tap0] + b), tanh(x[tap1] + b), ...)`, one kernel that reads x once and writes the
pooled values. Exact for every input: a tap is an index map, and the chain is evaluated on the
same elements; taps that may fall outside the input (padding, ceil mode, a concatenation's
clipped parts) fill with a constant that the chain would not map to itself, so those stay as
they are. Tiling windows read each element once, so nothing is computed twice; overlapping
ones compute the chain once per tap (arithmetic against a full write and read). A value that
itself combines taps (a pooling of a pooling) stays a kernel of its own: its loads would
multiply.
"""

from __future__ import annotations

from typing import Any

from kopt.phases.engineers.offline.graph import POINTWISE, REDUCTIONS, WINDOW_TAP, Graph, Node
from kopt.phases.engineers.offline.reshapes import movable, replace_nodes


def exact_tap(t: Node, x: Node) -> bool:
    """Whether `t` reads `x` at coordinates always inside it: a slice of x (start, end and step
    along one dim), or a window tap without padding, clipping or ceil mode."""
    if not t.args or t.args[0] is not x:
        return False
    if t.op == "slice":
        return len(t.args) == 5 and sum(1 for a in t.inputs() if a is x) == 1
    if t.op == WINDOW_TAP:
        return not t.kwargs.get("clip") and not t.kwargs.get("ceil") and \
            all(spec[3] == 0 for spec in t.kwargs["taps"])
    return False


def _tap_dims(t: Node) -> list[int]:
    if t.op == "slice":
        return [t.args[1]]
    return [spec[0] for spec in t.kwargs["taps"]]


def _tap_of(t: Node, a: Node, name: str) -> Node:
    """Tap `t` (of a value of a's shape) applied to `a`."""
    return Node(name, t.op, [a, *t.args[1:]], dict(t.kwargs), shape=t.shape, sym=t.sym,
                dtype=a.dtype, target=t.target, origin=t.origin)


def _operand_at(t: Node, p: Node, a: Node, name: str, made: list[Node]) -> Node | None:
    """What operand `a` of `p` is at tap `t` of p's value: a itself where it is broadcast
    along every tapped dim, the same tap of it where it is full-size, else None."""
    if a.shape == p.shape:
        made.append(_tap_of(t, a, name))
        return made[-1]
    off = p.rank - a.rank
    if off < 0 or any(d - off >= 0 and a.shape[d - off] != 1 for d in _tap_dims(t)):
        return None
    return a


def _taps_of(p: Node, taps: list[Node], names: set[str]) -> dict[Node, list[Node]] | None:
    """For each tap of `p`: p's op over its operands at that tap (the nodes that take the
    tap's place, its value last, under the tap's name), or None when an operand cannot be
    tapped."""
    out: dict[Node, list[Node]] = {}
    for t in taps:
        made: list[Node] = []
        swap: dict[int, Any] = {}
        for i, a in enumerate(p.inputs()):
            if id(a) in swap:
                continue
            name = f"{t.name}_a{i}"  # short: a chain moved through nested taps names each level once
            while name in names:
                name += "_"
            names.add(name)
            swap[id(a)] = _operand_at(t, p, a, name, made)
            if swap[id(a)] is None:
                return None
        args = [swap[id(a)] if isinstance(a, Node) else a for a in p.args]
        made.append(Node(t.name, p.op, args, dict(p.kwargs), shape=t.shape, sym=t.sym,
                         dtype=p.dtype, target=p.target, origin=p.origin))
        out[t] = made
    return out


MAX_MOVED_TAPS = 64
"""The most taps an op is computed at (a window of at most 8x8, or 4x4x4); a larger window
keeps the op in a kernel of its own rather than grow the pooling's kernel by that much."""
MAX_NEW_NODES = 4096
"""The most nodes the moves may add to one graph (the pooling kernels' size, and codegen's
time, grow with them)."""


def _combines_taps(p: Node) -> bool:
    """Whether `p` is computed from two or more taps of one value (a pooling, a depthwise
    convolution): computed at another pooling's taps, it would load the product of the two
    windows per element (level-2 72's average of an average: 64 strided loads an element,
    1.41 ms on the H100 against 1.17 ms for compile's two kernels, 2026-11-28)."""
    seen: dict[int, set[tuple[Any, ...]]] = {}
    stack, visited = [p], 0
    while stack and visited < 512:
        n = stack.pop()
        visited += 1
        for a in n.inputs():
            if a.op == "slice" or a.op == WINDOW_TAP:
                root, where = a, []
                while root.op == "slice" or root.op == WINDOW_TAP:  # a window's taps nest per dim
                    where.append(_tap_position(root))
                    root = root.args[0]
                # the same tap read by several operands (`where(x > 0, x, a * x)` moved to a
                # tap) is one position of the window, not two
                at = seen.setdefault(id(root), set())
                at.add(tuple(where))
                if len(at) > 1:
                    return True
            elif a.op in POINTWISE:
                stack.append(a)
    return False


def _tap_position(t: Node) -> tuple[Any, ...]:
    """Where tap `t` reads its operand (its op and every argument but the operand)."""
    if t.op == "slice":
        return ("slice", *(repr(a) for a in t.args[1:]))
    return (WINDOW_TAP, repr(t.kwargs["taps"]))


def compute_at_taps(graph: Graph, pinned: set[Node] | None = None) -> int:
    """Move pointwise ops into the taps that read them (module docstring) until none moves.
    A moved op's values at its taps take the taps' places and names; the op's own operands
    become taps, and move next when taps are all that read them. `pinned` nodes stay (a
    channels_last epilogue's bias add). Returns how many ops moved."""
    pinned = pinned or set()
    moved = 0
    start = len(graph.nodes)
    while len(graph.nodes) - start < MAX_NEW_NODES:
        users = graph.users()
        outputs = {id(o) for o in graph.outputs}
        names = {n.name for n in graph.nodes}
        for p in graph.nodes:
            taps = users.get(p, [])
            if not taps or len(taps) > MAX_MOVED_TAPS or not movable(p, pinned) or id(p) in outputs or \
                    any(isinstance(a, Node) and a.op in REDUCTIONS for a in p.args) or \
                    not all(exact_tap(t, p) for t in taps) or _combines_taps(p):
                continue
            made = _taps_of(p, taps, names)
            if made is None:
                continue
            replace_nodes(graph, {p: [], **made}, {t: nodes[-1] for t, nodes in made.items()})
            moved += 1
            break
        else:
            return moved
    return moved
