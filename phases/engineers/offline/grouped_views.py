"""A group norm's grouped view, and what moves past it.

A group norm is lowered to statistics over a view of its input, (N, C, *S) as (N, G, C/G * S)
or (N, G, C/G, S) (`graph.lower_group_norm`), and a map over the input's own domain. The view
is a new domain: the kernels before it cannot take the statistics as their epilogue, and the
value they write is read twice after it (the statistics, the map). `bias_after_grouped_view`
moves a convolution's bias (which ATen adds in a pass of its own after cuDNN) past the view,
added in the view's layout (`fusion.split_conv_bias`), exact for every input.

A pointwise chain before the view (a swish) computed again after it, so that nothing writes
its value (three passes over the tensor instead of five), was built and measured slower on
KernelBench level-2 60 (H200, 2026-11-27: 6.40 ms against 5.72 ms end to end) and removed.
"""

from __future__ import annotations

import math
from typing import Any

from kopt.phases.engineers.offline.graph import Graph, Node, substitute


def grouped_view(x: Node, v: Node) -> bool:
    """Whether `v` views `x` (N, C, *S) as (N, G, C / G * S) or (N, G, C / G, S): a group norm's
    rows, channels in order within each group."""
    if v.op != "view" or not v.args or v.args[0] is not x or v.rank not in (3, 4) or x.rank < 3:
        return False
    n, c, spatial = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    g = v.shape[1]
    if v.shape[0] != n or g < 1 or c % g:
        return False
    return v.shape[2:] == ((c // g * spatial,) if v.rank == 3 else (c // g, spatial))


def _channel_in_view(x: Node, vec: Node, v: Node) -> tuple[list[Node], Node]:
    """Per-channel values `vec` ((C,), one per channel of `x`) in the layout of `x`'s grouped
    view `v`: (G, C / G, 1) for a 4-D view; for a 3-D one, a (C, 1) column when each row is one
    channel (`flatten(2)`), else repeated over the spatial positions, (C, S) viewed as
    (G, C / G * S): C * S values, one sample's worth, that PyTorch writes once. Returns the
    nodes to insert and the last."""
    spatial: Any = 1
    for d in x.sym[2:]:
        spatial = spatial * d
    # the group count as the view's own size list has it: an expression of the constructor's
    # arguments where a second trace made it one (`Node.sym` keeps the traced number)
    sizes = v.args[1] if len(v.args) > 1 and isinstance(v.args[1], (list, tuple)) else ()
    g_sym = sizes[1] if len(sizes) == v.rank and not (type(sizes[1]) is int and sizes[1] == -1) \
        else v.sym[1]
    origin = vec.origin
    if v.rank == 4:
        out = Node(f"{v.name}_{vec.name}_g", "view", [vec, [g_sym, -1, 1]], shape=(v.shape[1], v.shape[2], 1),
                   sym=(g_sym, v.sym[2], 1), dtype=vec.dtype, origin=origin)
        return [out], out
    if v.shape[1] == x.shape[1]:  # one channel a row
        out = Node(f"{v.name}_{vec.name}_g", "view", [vec, [-1, 1]], shape=(v.shape[1], 1),
                   sym=(v.sym[1], 1), dtype=vec.dtype, origin=origin)
        return [out], out
    col = Node(f"{v.name}_{vec.name}_col", "view", [vec, [-1, 1]], shape=(x.shape[1], 1),
               sym=(x.sym[1], 1), dtype=vec.dtype, origin=origin)
    rep = Node(f"{v.name}_{vec.name}_rep", "expand", [col, [x.sym[1], spatial]],
               shape=(x.shape[1], math.prod(x.shape[2:])), sym=(x.sym[1], spatial),
               dtype=vec.dtype, origin=origin)
    out = Node(f"{v.name}_{vec.name}_g", "view", [rep, [g_sym, -1]], shape=v.shape[1:],
               sym=v.sym[1:], dtype=vec.dtype, origin=origin)
    return [col, rep, out], out


def _redirect(users: dict[Node, list[Node]], old: Node, new: Node) -> None:
    for u in users[old]:
        u.args = substitute(u.args, {old: new})
        u.kwargs = {k: substitute(val, {old: new}) for k, val in u.kwargs.items()}


def bias_after_grouped_view(graph: Graph, users: dict[Node, list[Node]], conv: Node,
                            bias: Node, v: Node) -> None:
    """The bias the convolution lost, added after a grouped view `v` of its output: v's
    readers get `v + bias` in v's layout (`_channel_in_view`; level-2 92's group norm read the
    conv output this way, and ATen's bias pass after cuDNN took 0.405 ms of its forward)."""
    made, gb = _channel_in_view(conv, bias, v)
    add = Node(f"{v.name}_biased", "add", [v, gb], shape=v.shape, sym=v.sym, dtype=v.dtype,
               origin=f"{conv.origin}_bias")
    _redirect(users, v, add)
    at = graph.nodes.index(v) + 1
    graph.nodes[at:at] = [*made, add]
