"""A group norm's grouped view, and what moves past it.

A group norm is lowered to statistics over a view of its input, (N, C, *S) as (N, G, C/G * S)
or (N, G, C/G, S) (`graph.lower_group_norm`), and a map over the input's own domain. The view
is a new domain: the kernels before it cannot take the statistics as their epilogue, and the
value they write is read twice after it (the statistics, the map). Two rewrites move work past
the view instead, each exact for every input:

- `bias_after_grouped_view`: a convolution's bias (which ATen adds in a pass of its own after
  cuDNN) is added after the view, in the view's layout (`fusion.split_conv_bias`);
- `recompute_before_grouped_views`: a short pointwise chain between the producer and the view
  (a swish, an added residual, a scale) is computed again after the view from the chain's own
  inputs, so the statistics' kernel takes it as its prologue and the chain's value is no longer
  written: with the map's kernel then taking the chain too (no cycle through the statistics
  any more), the tensor moves through memory three times instead of five.
"""

from __future__ import annotations

import math
from typing import Any

from kopt.phases.engineers.offline.graph import POINTWISE, Graph, Node, substitute

MAX_RECOMPUTED = 8
"""Most pointwise nodes a chain may have to be computed again after the view."""
MAX_FULL_LEAVES = 2
"""Most full-size tensors the chain may read: each is read by both kernels after the view, and
with three the passes saved are spent again (3 + 1 + 2 written and read before, 3 + 4 after)."""


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


def channel_in_view(x: Node, vec: Node, v: Node, tag: str) -> tuple[list[Node], Node]:
    """Per-channel values `vec` ((C,), one per channel of `x`) in the layout of `x`'s grouped
    view `v`: (G, C / G, 1) for a 4-D view; for a 3-D one, a (C, 1) column when each row is one
    channel (`flatten(2)`), else repeated over the spatial positions, (C, S) viewed as
    (G, C / G * S): C * S values, one sample's worth, that PyTorch writes once. Returns the
    nodes to insert and the last."""
    spatial: Any = 1
    for d in x.sym[2:]:
        spatial = spatial * d
    g_sym = v.sym[1]
    origin = vec.origin
    if v.rank == 4:
        out = Node(f"{v.name}_{tag}_g", "view", [vec, [g_sym, -1, 1]], shape=(v.shape[1], v.shape[2], 1),
                   sym=(g_sym, v.sym[2], 1), dtype=vec.dtype, origin=origin)
        return [out], out
    if v.shape[1] == x.shape[1]:  # one channel a row
        out = Node(f"{v.name}_{tag}_g", "view", [vec, [-1, 1]], shape=(v.shape[1], 1),
                   sym=(v.sym[1], 1), dtype=vec.dtype, origin=origin)
        return [out], out
    col = Node(f"{v.name}_{tag}_col", "view", [vec, [-1, 1]], shape=(x.shape[1], 1),
               sym=(x.sym[1], 1), dtype=vec.dtype, origin=origin)
    rep = Node(f"{v.name}_{tag}_rep", "expand", [col, [x.sym[1], spatial]],
               shape=(x.shape[1], math.prod(x.shape[2:])), sym=(x.sym[1], spatial),
               dtype=vec.dtype, origin=origin)
    out = Node(f"{v.name}_{tag}_g", "view", [rep, [g_sym, -1]], shape=v.shape[1:],
               sym=v.sym[1:], dtype=vec.dtype, origin=origin)
    return [col, rep, out], out


def _redirect(users: dict[Node, list[Node]], old: Node, new: Node) -> None:
    for u in users[old]:
        u.args = substitute(u.args, {old: new})
        u.kwargs = {k: substitute(val, {old: new}) for k, val in u.kwargs.items()}


def bias_after_grouped_view(graph: Graph, users: dict[Node, list[Node]], conv: Node,
                            bias: Node, v: Node) -> None:
    """The bias the convolution lost, added after a grouped view `v` of its output: v's
    readers get `v + bias` in v's layout (`channel_in_view`; level-2 92's group norm read the
    conv output this way, and ATen's bias pass after cuDNN took 0.405 ms of its forward)."""
    made, gb = channel_in_view(conv, bias, v, "bias")
    add = Node(f"{v.name}_biased", "add", [v, gb], shape=v.shape, sym=v.sym, dtype=v.dtype,
               origin=f"{conv.origin}_bias")
    _redirect(users, v, add)
    at = graph.nodes.index(v) + 1
    graph.nodes[at:at] = [*made, add]


def _chain(x: Node) -> tuple[list[Node], list[Node]] | None:
    """The pointwise nodes of `x`'s shape that compute `x` (x included) and the nodes they read
    (their leaves); None when there are more than MAX_RECOMPUTED (cut short, the chain would
    read an intermediate value that then has to be written after all)."""
    chain: list[Node] = []
    leaves: list[Node] = []
    stack = [x]
    while stack:
        n = stack.pop()
        if n in chain or n in leaves:
            continue
        if any(isinstance(a, tuple) and a and a[0] in ("numel", "numel_minus") for a in n.args):
            return None  # a mean's division: its count is the reduction input's, not this one's
        if n is x or (n.op in POINTWISE and n.shape == x.shape):
            if len(chain) == MAX_RECOMPUTED:
                return None
            chain.append(n)
            stack.extend(n.inputs())
        else:
            leaves.append(n)
    return chain, leaves


def _leaf_in_view(x: Node, leaf: Node, v: Node) -> tuple[list[Node], Node] | None:
    """A value the chain reads, in the layout of `x`'s grouped view `v`: a full-size tensor
    viewed the same way, per-channel values ((C, 1, ..., 1) or (1, C, 1, ...)) as
    `channel_in_view` lays them out, one value as it is; None for anything else."""
    c, ones = x.shape[1], x.rank - 2
    if leaf.shape == x.shape:
        out = Node(f"{v.name}_{leaf.name}", "view", [leaf, list(v.args[1])], shape=v.shape,
                   sym=v.sym, dtype=leaf.dtype, origin=leaf.origin)
        return [out], out
    if math.prod(leaf.shape) == 1 and leaf.rank <= v.rank:
        return [], leaf
    if leaf.shape in ((c, *[1] * ones), (1, c, *[1] * ones)):
        flat = Node(f"{v.name}_{leaf.name}_flat", "view", [leaf, [-1]], shape=(c,), sym=(x.sym[1],),
                    dtype=leaf.dtype, origin=leaf.origin)
        made, out = channel_in_view(x, flat, v, leaf.name)
        return [flat, *made], out
    return None


def recompute_before_grouped_views(graph: Graph, outputs: set[Node]) -> int:
    """Each grouped view of a pointwise chain's result reads the chain computed again after
    it, from the chain's own inputs laid out as the view (see the module docstring). The
    chain's original nodes stay for its other readers (the group norm's map). Returns how many
    views were rewritten."""
    users = graph.users()
    done = 0
    for v in list(graph.nodes):
        x = v.args[0] if v.op == "view" and v.args and isinstance(v.args[0], Node) else None
        if x is None or x.op not in POINTWISE or v in outputs or not grouped_view(x, v) or \
                math.prod(x.shape[2:]) < 2:  # (statistics of shape (N, G, 1) view as much)
            continue
        if x not in outputs and all(u is v for u in users[x]):
            continue  # read only through the view: written once and read once already
        found = _chain(x)
        if found is None:
            continue
        chain, leaves = found
        full = sum(1 for leaf in leaves if leaf.shape == x.shape)
        laid = {leaf: _leaf_in_view(x, leaf, v) for leaf in leaves}
        if full > MAX_FULL_LEAVES or any(m is None for m in laid.values()):
            continue
        made: list[Node] = []
        env: dict[Node, Node] = {}
        for leaf, (nodes, out) in ((k, m) for k, m in laid.items() if m is not None):
            made += nodes
            env[leaf] = out
        for n in sorted(chain, key=graph.nodes.index):
            copy = Node(f"{v.name}_{n.name}", n.op, substitute(n.args, env),
                        {k: substitute(val, env) for k, val in n.kwargs.items()},
                        shape=v.shape, sym=v.sym, dtype=n.dtype, target=n.target, origin=n.origin)
            env[n] = copy
            made.append(copy)
        _redirect(users, v, env[x])
        at = graph.nodes.index(v)
        graph.nodes[at:at + 1] = made  # the view itself is read no more
        done += 1
    return done
