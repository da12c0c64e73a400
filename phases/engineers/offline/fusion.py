"""Fusion groups: which lowered nodes run together in one Triton kernel.

A group owns a *domain*: the index space its kernel walks (a pointwise group's output shape,
a reduction group's pre-reduction shape, a matmul's output). Every member has a *dim map*:
for each of its own dims, the domain dim it indexes (None for a size-1 dim), so a member may
be full-size, a per-row value of a reduction, or a broadcast. Values that are not members
(graph inputs, other groups' outputs, views PyTorch makes for free) are loaded at the
coordinates the consumer's dim map gives them; shape-only values (`arange`, `full` and what
is computed from them) are recomputed from the coordinates inside the kernel.

Nodes join greedily in graph order: a pointwise node joins the group of a producer, a
reduction joins the group that computes its input (the prologue), a matmul anchors its own
group that takes its pointwise epilogue, a convolution that no pointwise op or reduction
reads anchors a `conv` group of its own (the implicit GEMM of `kernels/convolution.py`). A join is refused when it would make the group
graph cyclic or the dim maps disagree; the node then starts a group or stays in PyTorch.
Afterwards, a matmul epilogue that only feeds another matmul's epilogue moves into it (the
gated MLP's SiLU of the gate product runs where it meets the up product).

Before the joins, pointwise ops move to where a kernel can take them: across a reshape into
the reduction that reads it (`reshapes.py`: a softmax over flattened spatial dims takes the
clamp before its view and the scale after it) and into the taps of a pooling that reads them
(`window_prologues.py`: a convolution's epilogue computed where the pooling loads it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from kopt.phases.engineers.offline.attention import ATTENTION, fuse_attention
from kopt.phases.engineers.offline.convolution import conv_group_refusal
from kopt.phases.engineers.offline.graph import (
    ARG_REDUCTIONS,
    CACHED_CAT,
    GENERATORS,
    LAYOUT,
    MATMUL,
    POINTWISE,
    REDUCTIONS,
    SCANS,
    TAKE,
    WINDOW_TAP,
    Graph,
    Node,
    fold_flipped_scans,
    simplify,
    substitute,
)
from kopt.phases.engineers.offline.grouped_views import bias_after_grouped_view, grouped_view
from kopt.phases.engineers.offline.recurrent import recurrent_kind
from kopt.phases.engineers.offline.reshapes import CHEAP, move_pointwise_across_views, reshapes
from kopt.phases.engineers.offline.window_prologues import compute_at_taps, exact_tap

DimMap = tuple[int | None, ...]


@dataclass(frozen=True)
class FusionPolicy:
    """How aggressively to fuse (later optimizer iterations back off after a failure)."""

    pointwise: bool = True
    """Merge pointwise nodes into their producer's group."""
    reduction_prologue: bool = True
    """Let a reduction take over the pointwise group that computes its input."""
    matmul_epilogue: bool = True
    """Fuse pointwise consumers of a matmul into the matmul kernel, and hand-written attention
    (product, chain, softmax, product) into one kernel (`attention.py`)."""


@dataclass(eq=False)
class Group:
    """One kernel's worth of nodes."""

    index: int
    kind: str
    """`pointwise`, `reduction`, `matmul`, `scan`, `arg_reduction`, `conv` or `attention`."""
    domain: tuple[int, ...]
    domain_sym: tuple[Any, ...]
    nodes: list[Node] = field(default_factory=list)
    dmaps: dict[Node, DimMap] = field(default_factory=dict)
    rdim: int | None = None
    """The reduced domain dim (reduction groups)."""
    anchor: Node | None = None
    """The mm/bmm node (matmul groups), ATen's convolution node (conv groups) or the attention
    node (attention groups)."""
    epi_view: Node | None = None
    """A view of the matmul result that the epilogue continues on (matmul groups)."""
    nhwc: bool = False
    """A pointwise epilogue of a channels_last convolution: walks (hw, channel) tiles."""
    outputs: list[Node] = field(default_factory=list)
    inputs: list[Node] = field(default_factory=list)
    laid_like: dict[Node, Node] = field(default_factory=dict)
    """Outputs written in the memory layout of a full-size input (output -> that input) where
    it is a permuted view: see `_outputs_in_input_layout`."""
    copy_of: Node | None = None
    """A lone copy (`contiguous()`) of a library call's result: the forward launches it only
    where that value is not laid out contiguously already, else takes the value itself
    (`_copies_when_needed`)."""
    walk: tuple[int, ...] | None = None
    """A copy's output memory order, outermost dim first, where it is not row-major: a copy
    only products read, written without its last two dims' transpose (`_products_take_it_transposed`)."""

    @property
    def name(self) -> str:
        return f"g{self.index}"

    def __repr__(self) -> str:
        return f"Group({self.name}:{self.kind} {[n.name for n in self.nodes]})"


@dataclass
class Partition:
    """The graph cut into kernels and PyTorch steps, in an executable order."""

    graph: Graph
    groups: list[Group]
    steps: list[Group | Node]
    """Groups and forward-side nodes (inputs excluded) in execution order."""
    generated: set[Node]
    """Shape-only nodes recomputed inside kernels."""
    unfused: list[dict[str, str]]
    """Ops left to PyTorch: {"op", "node", "reason"}."""
    notes: list[str] = field(default_factory=list)
    """What partitioning did beyond grouping (an attention fused whole), for the engineer's notes."""


def shape_only(graph: Graph) -> set[Node]:
    """Nodes whose values depend only on shapes (recomputable from coordinates)."""
    gen: set[Node] = set()
    for n in graph.nodes:
        if n.op in GENERATORS:
            gen.add(n)
        elif (n.op in POINTWISE | {"unsqueeze", "squeeze", "permute", "expand"}
              or n.op in ("view", "flatten") and _size_one_reshape(n)) and n.inputs() and \
                all(i in gen for i in n.inputs()):
            gen.add(n)  # (a view that adds or drops size-1 dims: bilinear resampling's weights)
    return gen


def _trivial_view(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    return [s for s in src if s != 1] == [s for s in dst if s != 1]


def _size_one_reshape(n: Node) -> bool:
    """A view or flatten that only adds or drops dims of size 1 (`kernels.writer.trivial_back`
    recomputes such a view in a kernel)."""
    x = n.args[0] if n.args else None
    return isinstance(x, Node) and _trivial_view(x.shape, n.shape)


class _Partitioner:
    def __init__(self, graph: Graph, policy: FusionPolicy) -> None:
        self.graph = graph
        self.policy = policy
        self.gen = shape_only(graph)
        self.owner: dict[Node, Group] = {}
        self.groups: list[Group] = []
        self.unfused: list[dict[str, str]] = []

    # -- dependencies -------------------------------------------------------------------
    def _unit(self, n: Node) -> Group | Node:
        return self.owner.get(n, n)

    def _users(self) -> dict[Node, list[Node]]:
        """graph.users(), computed again only when the graph gained or lost nodes (a merge
        asked for it once per broadcast producer: 107 full walks for ResNet101)."""
        key = (len(self.graph.nodes), id(self.graph.nodes[-1]) if self.graph.nodes else 0)
        if getattr(self, "_users_key", None) != key:
            self._users_key = key
            self._users_map = self.graph.users()
        return self._users_map

    def _deps(self, unit: Group | Node) -> list[Group | Node]:
        members = unit.nodes if isinstance(unit, Group) else [unit]
        out: list[Group | Node] = []
        for m in members:
            for i in m.inputs():
                if i in self.gen or (isinstance(unit, Group) and self.owner.get(i) is unit):
                    continue
                u = self._unit(i)
                if u not in out:
                    out.append(u)
        return out

    def _reaches(self, start: Group | Node, target: Group) -> bool:
        seen: set[int] = set()
        stack = [start]
        while stack:
            u = stack.pop()
            if u is target:
                return True
            if id(u) in seen:
                continue
            seen.add(id(u))
            stack.extend(self._deps(u))
        return False

    def _acyclic(self, n: Node, g: Group) -> bool:
        for i in n.inputs():
            if i in self.gen or self.owner.get(i) is g:
                continue
            if self._reaches(self._unit(i), g):
                return False
        return True

    # -- dim maps -----------------------------------------------------------------------
    def _consistent(self, n: Node, g: Group, dm: list[int | None]) -> DimMap | None:
        used = [d for d in dm if d is not None]
        if len(used) != len(set(used)):
            return None
        for j, d in enumerate(dm):
            want = 1 if d is None else g.domain[d]
            if n.shape[j] != want and not (d is None and n.shape[j] == 1):
                return None
        return tuple(dm)

    def _pointwise_dmap(self, n: Node, g: Group) -> DimMap | None:
        r = n.rank
        dm: list[int | None] = [None] * r
        for i in n.inputs():
            if self.owner.get(i) is not g:
                continue
            idm, off = g.dmaps[i], r - i.rank
            if off < 0:
                return None
            for j in range(i.rank):
                if i.shape[j] == 1 or idm[j] is None:
                    continue
                if dm[off + j] is None:
                    dm[off + j] = idm[j]
                elif dm[off + j] != idm[j]:
                    return None
        for j in range(r):
            if dm[j] is None and n.shape[j] != 1:
                # a dim only external inputs carry: the domain dim at the same place
                if r != len(g.domain) or g.domain[j] != n.shape[j] or j in dm:
                    return None
                dm[j] = j
        return self._consistent(n, g, dm)

    def _layout_dmap(self, n: Node, g: Group) -> DimMap | None:
        x = n.args[0]
        xdm = list(g.dmaps[x])
        if n.op == "unsqueeze":
            d = n.args[1]
            dm = xdm[:d] + [None] + xdm[d:]
        elif n.op == "squeeze":
            dm = [e for j, e in enumerate(xdm) if j not in n.args[1]]
        elif n.op == "permute":
            dm = [xdm[p] for p in n.args[1]]
        elif n.op == "expand":
            off = n.rank - x.rank
            dm = [None] * off + xdm
            for j in range(n.rank):
                if dm[j] is None and n.shape[j] != 1:
                    if n.rank != len(g.domain) or g.domain[j] != n.shape[j] or j in dm:
                        return None
                    dm[j] = j
        elif n.op == "view" and _trivial_view(x.shape, n.shape):
            it = iter([e for j, e in enumerate(xdm) if x.shape[j] != 1])
            dm = [None if s == 1 else next(it) for s in n.shape]
        else:
            return None
        return self._consistent(n, g, dm)

    # -- joins --------------------------------------------------------------------------
    def _add(self, g: Group, n: Node, dm: DimMap) -> None:
        g.nodes.append(n)
        g.dmaps[n] = dm
        self.owner[n] = g

    def _new(self, kind: str, n: Node, domain: tuple[int, ...], domain_sym: tuple[Any, ...]) -> Group:
        g = Group(len(self.groups), kind, domain, domain_sym)
        self.groups.append(g)
        return g

    def _producer_groups(self, n: Node) -> list[Group]:
        out: list[Group] = []
        for i in n.inputs():
            g = self.owner.get(i)
            if g is not None and g not in out:
                out.append(g)
        return out

    def _try_pointwise(self, n: Node, g: Group) -> bool:
        if g.kind in ("scan", "arg_reduction", "conv", "attention") or not self._acyclic(n, g):
            return False
        if g.kind == "matmul":
            if not self.policy.matmul_epilogue:
                return False
            shapes = {g.domain} | ({g.epi_view.shape} if g.epi_view is not None else set())
            if n.shape not in shapes:
                return False
            for i in n.inputs():
                if self.owner.get(i) is g and i.shape != n.shape:
                    return False
                if i in self.gen and not _filled(i):
                    return False  # a range or index over the product's coordinates: not here
            self._add(g, n, tuple(range(n.rank)))
            return True
        mandatory = any(isinstance(a, tuple) and a and a[0] in ("numel", "numel_minus") for a in n.args)
        if not (self.policy.pointwise or mandatory):
            return False
        if g.kind == "reduction" and not (self.policy.reduction_prologue or mandatory):
            return False
        dm = self._pointwise_dmap(n, g)
        if dm is None:
            return False
        self._add(g, n, dm)
        return True

    def _merge(self, target: Group, h: Group, consumer: Node) -> bool:
        """Move pointwise group `h` into `target` unless the group graph would become cyclic;
        True when merged. `h` has the same domain, or a smaller one that broadcasts into it
        whose values only full-size pointwise consumers like `consumer` read (recomputed per
        element there: a few ALU ops in a memory-bound kernel, against a launch and a write and
        read of the values)."""
        if h.kind != "pointwise" or target.kind in ("matmul", "attention"):
            return False
        if any(m.op in (TAKE, WINDOW_TAP) and self.owner.get(m.args[0]) in (target, h)
               for m in (*target.nodes, *h.nodes)):
            return False  # a value loaded at other coordinates than its own: never computed here
        if h.domain == target.domain and h.domain_sym == target.domain_sym:
            align = list(range(len(h.domain)))
        else:
            off = len(target.domain) - len(h.domain)
            if off < 0 or any(s not in (1, target.domain[k + off]) for k, s in enumerate(h.domain)):
                return False
            users = self._users()
            if any(self.owner.get(u) is not h and u is not consumer and
                   (u.op not in POINTWISE or u.shape != target.domain) for m in h.nodes for u in users[m]) or \
                    any(m in self.graph.outputs for m in h.nodes):
                return False
            align = [None if s == 1 else k + off for k, s in enumerate(h.domain)]
        for m in h.nodes:
            self._add(target, m, tuple(None if d is None else align[d] for d in h.dmaps[m]))
        if any(self._reaches(d, target) for d in self._deps(target) if d is not target):
            self._unmerge(target, h)
            return False
        self.groups.remove(h)
        return True

    def _unmerge(self, target: Group, h: Group) -> None:
        for m in h.nodes:
            target.nodes.remove(m)
            del target.dmaps[m]
            self.owner[m] = h
        if h not in self.groups:
            self.groups.append(h)

    def _join_merged(self, n: Node, groups: list[Group]) -> bool:
        """A pointwise node with several producer groups: the pointwise ones merge into one
        (a reduction's or matmul's group when a producer is one) and `n` joins it, so a DAG of
        pointwise nodes over one domain is one kernel however many producers each node has
        (`a * sigmoid(a) + tanh(b)`: the two branches meet at the add), and a norm's epilogue
        takes a consumer that reads another input (`layer_norm(x) * silu(y)`)."""
        anchors = [g for g in groups if g.kind != "pointwise"]
        target = anchors[-1] if anchors else groups[0]
        merged: list[Group] = []
        for h in groups:
            if h is not target and h.kind == "pointwise" and self._merge(target, h, n):
                merged.append(h)
        if merged and self._try_pointwise(n, target):
            return True
        for h in reversed(merged):
            self._unmerge(target, h)
        return False

    def place(self, n: Node) -> None:
        if n.op == "input" or n in self.gen:
            return
        if n.op == TAKE:  # loads x at the indices' values: x is loaded, never computed here
            g = self._new("pointwise", n, n.shape, n.sym)
            self._add(g, n, tuple(range(n.rank)))
            return
        if n.op == WINDOW_TAP:  # reads x's neighbours: x is loaded, never computed here
            g = self.owner.get(n.args[0])
            # the walk of `_acyclic` last: a group that taps the same x is rare, the walk is
            # not (an unrolled loop of 256 steps: 65,536 walks, 4 minutes of codegen)
            h = next((h for h in reversed(self.groups) if h.kind == "pointwise" and h is not g
                      and h.domain == n.shape and self.policy.pointwise
                      and any(m.op == WINDOW_TAP and m.args[0] is n.args[0] for m in h.nodes)
                      and self._acyclic(n, h)), None)
            if h is None:
                h = self._new("pointwise", n, n.shape, n.sym)
            self._add(h, n, tuple(range(n.rank)))
            return
        if n.op in POINTWISE:
            producers = self._producer_groups(n)
            if len(producers) > 1 and self.policy.pointwise and self._join_merged(n, producers):
                return
            for g in reversed(producers):
                if self._try_pointwise(n, g):
                    return
            if any(isinstance(a, tuple) and a and a[0] in ("numel", "numel_minus") for a in n.args):
                raise AssertionError(f"{n.name}: a mean/var division left its reduction's kernel")
            g = self._new("pointwise", n, n.shape, n.sym)
            self._add(g, n, tuple(range(n.rank)))
            if self.policy.pointwise:
                # a producer over fewer elements that broadcasts into n (ALiBi's per-head
                # distance bias added to the scores) is recomputed here, as `_join_merged`
                # does when two producers meet: no launch, no write and read of its values.
                # Only a cheap one (`CHEAP`): CBAM's sigmoid gate over (N, 1, H, W) recomputed
                # for each of 256 channels would be an exp and a division per element of x
                for h in producers:
                    if h.domain != g.domain and all(m.op in CHEAP or m.op in LAYOUT for m in h.nodes):
                        self._merge(g, h, n)
        elif n.op in REDUCTIONS:
            self._place_reduction(n)
        elif n.op in ARG_REDUCTIONS:  # its own kernel, like a scan; the row's index is stored
            g = self._new("arg_reduction", n, n.args[0].shape, n.args[0].sym)
            g.rdim = n.kwargs["dim"]
            self._add(g, n, self._reduced_dmap(tuple(range(n.args[0].rank)), n))
        elif n.op in SCANS:
            self._place_scan(n)
        elif n.op in MATMUL:
            g = self._new("matmul", n, n.shape, n.sym)
            g.anchor = n
            self._add(g, n, tuple(range(n.rank)))
        elif n.op == ATTENTION:  # softmax(chain(q @ kt)) @ v: a template of its own
            g = self._new("attention", n, n.shape, n.sym)
            g.anchor = n
            self._add(g, n, tuple(range(n.rank)))
        elif n.op in LAYOUT:
            x = n.args[0] if n.args and isinstance(n.args[0], Node) else None
            g = self.owner.get(x) if x is not None else None
            if g is not None and self._acyclic(n, g):
                if g.kind in ("reduction", "pointwise") and self.policy.pointwise:
                    dm = self._layout_dmap(n, g)
                    if dm is not None:
                        self._add(g, n, dm)
                        return
                if g.kind == "matmul" and n.op == "view" and g.epi_view is None and \
                        self.policy.matmul_epilogue and x.shape == g.domain:
                    g.epi_view = n
                    self._add(g, n, tuple(range(n.rank)))
                    return
        elif n.op == "fallback" and "convolution" in str(n.target):
            reason = conv_group_refusal(n, self._users())
            if reason is None:  # the implicit-GEMM template computes it, bias included
                g = self._new("conv", n, n.shape, n.sym)
                g.anchor = n
                self._add(g, n, tuple(range(n.rank)))
            else:
                self.unfused.append({"op": str(n.target), "node": n.origin, "reason": reason})
        elif n.op not in ("getitem", "split_item", CACHED_CAT) and recurrent_kind(n) is None:
            # (weights side by side: forward's; a recurrent layer: its own kernels, `_recurrent`)
            self.unfused.append({"op": str(n.target), "node": n.origin,
                                 "reason": _fallback_reason(n)})

    def _place_reduction(self, n: Node) -> None:
        x, d = n.args[0], n.kwargs["dim"]
        g = self.owner.get(x)
        ok = g is not None and g.kind in ("pointwise", "reduction") and self._acyclic(n, g)
        if ok and g.kind == "pointwise":
            ok = self.policy.reduction_prologue and g.dmaps[x] == tuple(range(len(g.domain))) \
                and x.shape == g.domain and all(_broadcast_map(dm) for dm in g.dmaps.values())
            if ok:
                sibling = self._row_sibling(g, d)
                if sibling is not None and self._merge(sibling, g, n):
                    g = sibling  # its prologue joins a reduction over the same rows
                else:
                    g.kind, g.rdim = "reduction", d
        elif ok:
            ok = self.policy.reduction_prologue and g.dmaps[x][d] == g.rdim
        if ok and n.op == "select":
            idx = n.args[1]
            if self.owner.get(idx) is g:
                ok = g.dmaps[idx] == self._reduced_dmap(g.dmaps[x], n)
        if not ok:
            # horizontal fusion: an independent reduction over the same rows joins their kernel
            # (cross-entropy's sum of losses and count of valid targets: one final kernel)
            h = next((h for h in reversed(self.groups) if h.kind == "reduction" and h.domain == x.shape
                      and h.rdim == d and self.policy.reduction_prologue and self._acyclic(n, h)), None)
            if h is not None:
                self._add(h, n, self._reduced_dmap(tuple(range(x.rank)), n))
                return
            g = self._new("reduction", n, x.shape, x.sym)
            g.rdim = d
            dmx = tuple(range(x.rank))
        else:
            dmx = g.dmaps[x]
        self._add(g, n, self._reduced_dmap(dmx, n))

    def _row_sibling(self, g: Group, d: int) -> Group | None:
        """An earlier reduction over the same rows as pointwise group `g` reduced along `d`:
        the two reductions share one kernel, each row read once (TripletMarginLoss's two
        distances from the anchor: one kernel, not two that each read it)."""
        return next((h for h in reversed(self.groups)
                     if h is not g and h.kind == "reduction" and h.rdim == d
                     and h.domain == g.domain and h.domain_sym == g.domain_sym), None)

    def _place_scan(self, n: Node) -> None:
        """A scan is its own kernel; a pointwise group over the scan's whole domain that
        computes the scanned value becomes its prologue (`cumsum(x * mask)`: one kernel that
        loads x and mask), its other outputs stored from the same loop. Window taps load at
        their own shifted, masked coordinates in the row loop too (a concatenation before
        the scan: the exclusive cumsum of `scan_after_fill`)."""
        x, ident = n.args[0], tuple(range(n.rank))
        g = self.owner.get(x)
        if not (g is not None and g.kind == "pointwise" and self.policy.reduction_prologue
                and x.shape == g.domain == n.shape and self._acyclic(n, g)
                and all(dm == ident for dm in g.dmaps.values())):
            g = self._new("scan", n, n.shape, n.sym)
        g.kind, g.rdim = "scan", n.kwargs["dim"]
        self._add(g, n, ident)

    @staticmethod
    def _reduced_dmap(dmx: DimMap, n: Node) -> DimMap:
        d = n.kwargs["dim"]
        if n.kwargs.get("keepdim"):
            return dmx[:d] + (None,) + dmx[d + 1:]
        return dmx[:d] + dmx[d + 1:]


def _broadcast_map(dm: DimMap) -> bool:
    """Whether a node with dim map `dm` is the group's domain or a broadcast of it (its dims
    the domain's in order, a size-1 dim where it has none): computed at the row loop's
    coordinates like a full-size value (a position embedding added to a token embedding
    before a layer norm)."""
    dims = [d for d in dm if d is not None]
    return dims == sorted(set(dims))


def _filled(n: Node) -> bool:
    """A shape-only value that is one constant everywhere (`full`, `scalar_tensor`, and views
    of them): any kernel writes it as a literal, whatever its coordinates. A matmul epilogue
    takes it (`att.masked_fill(mask, -inf)` after `q @ k.T`: the fill value)."""
    while n.op in LAYOUT and n.args and isinstance(n.args[0], Node):
        n = n.args[0]
    return n.op == "full"


def _fallback_reason(n: Node) -> str:
    name = str(n.target)
    if "convolution" in name:
        return "convolution stays in cuDNN; its pointwise epilogue is fused"
    if any(f"aten.{r}." in name for r in ("lstm", "gru", "rnn_tanh", "rnn_relu")):
        return "a recurrent layer with keyword arguments stays in cuDNN (its fused cells)"
    if "embedding" in name or "index" in name or "gather" in name or "scatter" in name:
        return "data-dependent indexing stays in PyTorch"
    if "max.dim" in name or "min.dim" in name or "argmax" in name or "argmin" in name:
        return "reductions that return indices are not generated"
    if "cat" in name or "stack" in name:
        return "a concatenation of more than 8 parts stays in PyTorch (one copy of each part)"
    if any(f"aten.{r}." in name for r in ("sum", "mean", "amax", "amin", "var", "std", "var_mean", "logsumexp")):
        return "a reduction over several non-trivial dims at once is not generated"
    if "group_norm" in name or "batch_norm" in name or "instance_norm" in name:
        return "this norm is not lowered to reductions yet (layer norm is)"
    if "pool" in name:
        return ("pooling in ceil mode, with a divisor override, an uncounted padding, its "
                "indices read, or over 512 taps is not generated")
    if "view_as_real" in name:
        return "a complex value's real view (no copy); the kernels read its parts"
    if "aten.complex." in name:
        return "a complex value rebuilt for a complex op PyTorch runs (complex_values.py)"
    return "no Triton template for this op"


NHWC_CONV = "conv2d_nhwc"
"""The op of a 2-D convolution run by cuDNN in channels_last, its bias left to the epilogue."""


def split_conv_bias(graph: Graph, policy: FusionPolicy, precision: str = "strict") -> list[Node]:
    """Convolutions (1-, 2- or 3-D, transposed or not) whose users are pointwise ops,
    reductions or a group norm's grouped view lose their bias to an `add` that opens the
    kernel reading their output (after the view: `grouped_views.bias_after_grouped_view`; at
    the taps of a pooling: `window_prologues`; across a view or flatten into the reduction
    that reads it: `reshapes`; a view that a product or a library call reads keeps ATen's
    pass, and the convolution its `conv` group): ATen
    adds a cuDNN convolution's bias in a pass of its own over the whole output (0.09-0.29 ms
    of KernelBench level-2 6 and 48's 0.9-3.4 ms on the H100, 2026-11-26), which the fused
    kernel after it does for free: a pointwise epilogue, or the load of a reduction such as a
    softmax over the channels. A 2-D one (groups=1, not transposed) whose every user is
    pointwise also becomes `conv2d_nhwc` when its products run on tensor cores (bf16 or fp16, or
    float32 under the `tf32` precision): cuDNN runs those channels_last convolutions faster
    without a bias (0.166 vs 0.237 ms on conv2d_relu_bias's bf16 H100 shape), and the epilogue
    then reads NHWC once and writes the model's NCHW layout. A float32 one under `strict`
    precision stays NCHW: cuDNN's channels_last float32 kernel without TF32 is a generic one
    (KernelBench level-2 82 on the H100, 2026-11-28: 4.33 ms NHWC against 2.66 ms NCHW).
    Returns the bias adds of the channels_last ones (each starts its epilogue's group)."""
    if not policy.pointwise:
        return []
    users = graph.users()
    outputs = {o for o in graph.outputs if isinstance(o, Node)}
    adds: list[Node] = []
    for n in list(graph.nodes):
        if n.op != "fallback" or "convolution" not in str(n.target) or len(n.args) != 9:
            continue
        x, w, b, _stride, _pad, _dil, transposed, _out_pad, groups = n.args
        if n.rank not in (3, 4, 5) or not isinstance(w, Node) or w.rank != n.rank or \
                not isinstance(b, Node) or n in outputs or not users[n] or \
                not n.dtype.is_floating_point:
            continue
        grouped = [u for u in users[n] if grouped_view(n, u) and u not in outputs]
        parts = [u for u in users[n] if _channel_part(u, n) and u not in outputs]
        if any(u.op not in POINTWISE and u.op not in REDUCTIONS and u not in grouped
               and u not in parts and not exact_tap(u, n)
               and not (reshapes(u) and any(r.op in REDUCTIONS for r in users[u]))
               for u in users[n]):
            continue  # (another view or a library call after it would only move ATen's pass)
        pointwise_users = all(u.op in POINTWISE for u in users[n])
        ones = [1] * (n.rank - 2)
        bview = Node(f"{n.name}_bias_view", "view", [b, [-1, *ones]], shape=(n.shape[1], *ones),
                     sym=(n.sym[1], *ones), dtype=b.dtype, origin=f"{n.origin}_bias")
        add = Node(f"{n.name}_bias", "add", [n, bview], shape=n.shape, sym=n.sym, dtype=n.dtype,
                   origin=f"{n.origin}_bias")
        for u in users[n]:
            if u not in grouped and u not in parts:
                u.args = substitute(u.args, {n: add})
                u.kwargs = {k: substitute(v, {n: add}) for k, v in u.kwargs.items()}
        n.args = [x, w, None, *n.args[3:]]
        if len(grouped) + len(parts) < len(users[n]):  # (read only through grouped views or
            at = graph.nodes.index(n) + 1  # parts: no add, or it is dead and its kernel has no output)
            graph.nodes[at:at] = [bview, add]
        for u in parts:
            _bias_after_channel_part(graph, users, n, b, u)
        for v in grouped:
            bias_after_grouped_view(graph, users, n, b, v)
        tensor_cores = n.dtype in (torch.bfloat16, torch.float16) or precision == "tf32"
        if n.rank == 4 and not transposed and groups == 1 and pointwise_users and tensor_cores:
            n.op = NHWC_CONV
            adds.append(add)
    return adds


def _channel_part(t: Node, x: Node) -> bool:
    """Whether `t` is a concatenation's part of `x` along the channels (dim 1): a tap that only
    shifts dim 1 and fills 0 outside x (`graph.lower_cat`)."""
    return t.op == WINDOW_TAP and bool(t.args) and t.args[0] is x and x.rank >= 3 and \
        t.kwargs.get("fill") == 0.0 and not t.kwargs.get("ceil") and \
        all(spec[0] == 1 and spec[1] == 1 and spec[2] == 1 and spec[4] == 0 and spec[5] == 1
            for spec in t.kwargs["taps"])


def _bias_after_channel_part(graph: Graph, users: dict[Node, list[Node]], conv: Node,
                             bias: Node, part: Node) -> None:
    """A convolution's bias added after its concatenation part (`part` reads the convolution
    without it now): part(x + b) is part(x) + part(b) with b as (1, C, 1, ...), since the part
    is a shift along the channels that fills 0 elsewhere. The concatenation's kernel adds it as
    it copies (a SqueezeNet fire module's two expand convolutions: ATen's bias pass over each
    output saved)."""
    ones = [1] * (conv.rank - 2)
    b4 = Node(f"{part.name}_bias_c", "view", [bias, [1, -1, *ones]], shape=(1, conv.shape[1], *ones),
              sym=(1, conv.sym[1], *ones), dtype=bias.dtype, origin=f"{conv.origin}_bias")
    tap = Node(f"{part.name}_bias_part", WINDOW_TAP, [b4], dict(part.kwargs),
               shape=(1, part.shape[1], *ones), sym=(1, part.sym[1], *ones), dtype=bias.dtype,
               origin=f"{conv.origin}_bias")
    add = Node(f"{part.name}_biased", "add", [part, tap], shape=part.shape, sym=part.sym,
               dtype=part.dtype, origin=f"{conv.origin}_bias")
    for u in users[part]:
        u.args = substitute(u.args, {part: add})
        u.kwargs = {k: substitute(v, {part: add}) for k, v in u.kwargs.items()}
    at = graph.nodes.index(part) + 1
    graph.nodes[at:at] = [b4, tap, add]


def partition(graph: Graph, policy: FusionPolicy | None = None,
              precision: str = "strict") -> Partition:
    """Cut `graph` into fusion groups and PyTorch steps. `precision` (the case's) says which
    products default to cuBLAS (`library_product`): their epilogues may move
    into the row reduction that reads them."""
    fold_flipped_scans(graph)
    simplify(graph)
    attention = fuse_attention(graph) if (policy or FusionPolicy()).matmul_epilogue else []
    p = _Partitioner(graph, policy or FusionPolicy())
    bias_adds = split_conv_bias(graph, p.policy, precision)
    if p.policy.pointwise and move_pointwise_across_views(graph, pinned=set(bias_adds)) + \
            compute_at_taps(graph, pinned=set(bias_adds)):
        simplify(graph)  # what the moved ops read before is dead
    for n in graph.nodes:
        p.place(n)
    _forward_convolutions_to_cudnn(p)
    users = graph.users()
    outputs = {o for o in graph.outputs if isinstance(o, Node)}
    # Shape-only nodes that something outside the kernels needs get a kernel of their own.
    # So does one that a pad or take shifts (a tap loads its source from memory), unless it is
    # one constant everywhere (a concatenation's part of zeros: the tap writes the literal).
    for n in graph.nodes:
        if n in p.gen and (n in outputs or any(u not in p.gen and u not in p.owner for u in users[n])
                           or not _filled(n) and any(u.op in (WINDOW_TAP, TAKE) and u.args[0] is n
                                                     for u in users[n])):
            if n.op in LAYOUT and n.args and p.owner.get(n.args[0]) is not None:
                # a view of a range already stored (`pos[None, :]` beside `pos`): PyTorch's
                # view of that tensor, read from memory by the kernels too
                p.gen.discard(n)
                continue
            g = p._new("pointwise", n, n.shape, n.sym)
            p._add(g, n, tuple(range(n.rank)))
            g.nodes = [n]
    _inline_row_values(p, graph, users, outputs)
    _sink_matmul_epilogues(p, users, outputs)
    _epilogues_into_rows(p, users, outputs, precision)
    _copies_when_needed(p, outputs, users)
    generated = {n for n in p.gen if n not in p.owner}
    for g in p.groups:
        g.nodes.sort(key=graph.nodes.index)
        g.outputs = [m for m in g.nodes if m in outputs or any(p.owner.get(u) is not g for u in users[m])]
        if g.kind == "matmul" and g.outputs == []:
            g.outputs = [g.nodes[-1]]
    dead = [g for g in p.groups if not g.outputs]
    if dead:  # nothing reads them (a rewrite left their values dead): no kernel without output
        gone = {m for g in dead for m in g.nodes}
        graph.nodes = [n for n in graph.nodes if n not in gone]
        for m in gone:
            del p.owner[m]
        p.groups = [g for g in p.groups if g.outputs]
        for i, g in enumerate(p.groups):
            g.index = i
    for g in p.groups:
        ins: list[Node] = []
        stack = [i for m in g.nodes for i in m.inputs()]
        stack.reverse()
        while stack:
            i = stack.pop()
            if i in generated:  # recomputed in the kernel: what it reads is loaded there
                stack.extend(reversed(i.inputs()))
            elif p.owner.get(i) is not g and i not in ins:
                ins.append(i)
        g.inputs = ins
    _outputs_in_input_layout(p, users, outputs)
    for add in bias_adds:
        g = p.owner.get(add)
        if g is not None and g.kind == "pointwise" and g.domain == add.shape:
            g.nhwc = True
    steps = _schedule(p, graph, generated)
    return Partition(graph, p.groups, steps, generated, p.unfused, attention)


FORWARD_CONV_TO_CUDNN = ("a forward convolution that nothing fused reads stays in cuDNN "
                         "beside the model's other kernels")


def _forward_convolutions_to_cudnn(p: _Partitioner) -> None:
    """The implicit-GEMM template of a forward (not transposed) convolution lost to cuDNN's
    strict float32 kernels on every shape measured: KernelBench level-1 2-D convolutions at
    0.35-0.68x with TF32x3 products (H200, 2026-11-30, `benchmarks/f32_dot_gpu.py`), and a
    GoogLeNet's inception branches (3x3 and 5x5 convolutions read only by a concatenation or
    the next convolution) at 6.37 ms for the forward against 3.17 ms with them on cuDNN
    (`benchmarks/profile_kb_gpu.py --families`). So where the model has other kernels, such a
    convolution is a library call again; a model that is one convolution (and what only views
    read) keeps the template, so that the candidate exists and the outcome compares it with
    cuDNN. Transposed convolutions keep theirs (cuDNN's walks every zero tap)."""
    forward = [g for g in p.groups if g.kind == "conv" and g.anchor is not None
               and g.anchor.args[6] is False]
    if not forward or len(forward) == len(p.groups):
        return
    for g in forward:
        del p.owner[g.anchor]
        p.unfused.append({"op": str(g.anchor.target), "node": g.anchor.origin,
                          "reason": FORWARD_CONV_TO_CUDNN})
    p.groups = [g for g in p.groups if g not in forward]
    for i, g in enumerate(p.groups):
        g.index = i


def _inline_row_values(p: _Partitioner, graph: Graph, users: dict[Node, list[Node]],
                       outputs: set[Node]) -> None:
    """Pointwise groups that only compute small values from graph inputs (cross-entropy's
    `where(target != ignore_index, target, 0)` per row) and feed only larger reduction kernels
    are recomputed inside those kernels instead of launching a kernel and writing a tensor."""
    for g in list(p.groups):
        if g.kind != "pointwise" or any(m in outputs for m in g.nodes):
            continue
        if any(i.op != "input" and i not in p.gen and p.owner.get(i) is not g for m in g.nodes for i in m.inputs()):
            continue
        if any(m.op in ("view", "flatten") and not _size_one_reshape(m) for m in g.nodes):
            continue  # recomputed in a kernel, a view may only add or drop dims of size 1
        views = []  # unsqueeze/squeeze/permute/expand of the values, run in forward: recomputed too
        frontier = list(g.nodes)
        while frontier:
            m = frontier.pop()
            for u in users[m]:
                if u not in p.owner and u.op in ("unsqueeze", "squeeze", "permute", "expand") and \
                        u not in views and u not in outputs:
                    views.append(u)
                    frontier.append(u)
        inlined = set(g.nodes) | set(views)
        consumers = {p.owner.get(u) for m in inlined for u in users[m] if u not in inlined}
        size = math.prod(g.domain)
        if not consumers or any(c is None or c.kind != "reduction" or math.prod(c.domain) < 8 * size
                                for c in consumers):
            continue
        for m in g.nodes:
            del p.owner[m]
        p.gen |= inlined
        p.groups.remove(g)
    for i, g in enumerate(p.groups):
        g.index = i


def _copies_when_needed(p: _Partitioner, outputs: set[Node], users: dict[Node, list[Node]]) -> None:
    """A kernel that would only copy a library call's result (`attn.transpose(1, 2)
    .contiguous()` after attention, which export writes as a `clone`) runs only where a copy
    is needed: the forward checks the value's layout first and takes the value itself when
    it is contiguous already, as PyTorch's `contiguous()` does (cuDNN's and flash attention's
    outputs are, for a query made from a (B, S, H, D) view: torch.compile copies nothing
    there, kopt's copy kernel cost GPT-2's block 0.006 ms on an H200). Where a copy is needed
    the generated kernel makes it: PyTorch's own copy of a permuted 4-D view is its generic
    strided loop (KernelBench level-3 50's four head copies, 0.217 ms on an H200 against
    torch.compile's 0.098 ms). Only for a value that is not returned and not a forward input;
    where every kernel would be such a copy, the last one always runs."""
    for g in p.groups:
        if g.kind != "pointwise" or len(g.nodes) != 1:
            continue
        (n,) = g.nodes
        x = n.args[0] if n.op == "identity" and n.args else None
        if not isinstance(x, Node) or x in p.gen or x in p.owner or \
                n in outputs or x.dtype != n.dtype or x.shape != n.shape:
            continue
        src = x
        while src.op in LAYOUT and src.args and isinstance(src.args[0], Node):
            src = src.args[0]
        if src.op == "input":
            continue  # contiguous() of a view of an input may be that input: keep the copy
        g.copy_of = x
        if _products_take_it_transposed(p, users, n, x):
            r = n.rank
            g.walk = (*range(r - 2), r - 1, r - 2)
            g.laid_like[n] = x
    if p.groups and all(g.copy_of is not None for g in p.groups):
        p.groups[-1].copy_of = None  # one kernel that always runs: the candidate launches Triton


def _memory_order(n: Node) -> tuple[int, ...] | None:
    """`n`'s dims in memory, outermost first, read off the layout ops between it and a value
    laid out row-major (any other op: kernels and products write row-major; where one does
    not, a layout chosen from this is slower, never wrong); None where a view regroups dims
    that are not row-major."""
    if n.op not in LAYOUT:
        return tuple(range(n.rank))
    x = n.args[0] if n.args and isinstance(n.args[0], Node) else None
    if n.op == "split_item" and x is not None and x.op == "layout_fallback":
        x = x.args[0] if x.args and isinstance(x.args[0], Node) else None  # a piece of a split
    inner = _memory_order(x) if x is not None else None
    if inner is None:
        return None
    if n.op == "permute":
        perm = [int(d) % n.rank for d in n.args[1]]
        where = {src: j for j, src in enumerate(perm)}
        return tuple(where[d] for d in inner)
    if n.op in ("expand", "slice", "split_item") and n.rank == x.rank:
        return inner
    if n.op == "view" and inner == tuple(range(x.rank)):
        return tuple(range(n.rank))
    return None


def _products_take_it_transposed(p: _Partitioner, users: dict[Node, list[Node]], n: Node,
                                 x: Node) -> bool:
    """The copy `n` of `x` transposes its last two dims against x's memory (`k.transpose(-2,
    -1)` copied for `q @ k.T`, which export writes as expand, clone, view, bmm), and only
    products read it, through views that keep its last two dims: written without the
    transpose (dense in x's order of those two dims), each program's loads and stores run
    along the same contiguous dim, and the product reads the transposed matrix as it is
    (cuBLAS and the Triton template take either layout). PyTorch's copy, and a copy written
    row-major, read or write across rows: KernelBench level-3 44's key copy took 0.32 ms on an
    H200 against torch.compile's 0.10 ms."""
    r = n.rank
    order = _memory_order(x)
    if r < 2 or order is None or order[-1] != r - 2:
        return False
    seen, stack = 0, list(users[n])
    while stack:
        u = stack.pop()
        g = p.owner.get(u)
        if g is not None and g.kind == "matmul" and u is g.anchor:
            seen += 1
        elif g is None and u.op == "view" and u.shape[-2:] == n.shape[-2:]:
            stack += users[u]
        else:
            return False
    return seen > 0


def _sink_matmul_epilogues(p: _Partitioner, users: dict[Node, list[Node]],
                           outputs: set[Node]) -> None:
    """A matmul whose epilogue only feeds another matmul's epilogue over the same domain (the
    gated MLP: `silu(x @ Wg) * (x @ Wu)`) hands its epilogue to that consumer. Its own kernel
    then writes the bare product (cuBLAS: no kernel at all) and the consumer applies both
    epilogues in one pass, reading both products once: for LLaMA-7B's MLP on 8192 tokens
    540 MB of pointwise traffic instead of 900 MB (write silu, re-read it for the product).
    The same holds through the products' views to (B, S, N) (a transformer's MLP on 3-D
    activations), when both views have that shape and nothing runs between a product and its
    view: LLaMA's block spent 0.013 ms (H200) in a separate SiLU kernel torch.compile did not."""
    order = {n: i for i, n in enumerate(p.graph.nodes)}
    for g in p.groups:
        if g.kind != "matmul" or len(g.nodes) < 2 or g.anchor in outputs:
            continue
        view = g.epi_view
        epilogue = [m for m in g.nodes if m is not g.anchor and m is not view]
        if not epilogue or view is not None and (
                any(order[m] < order[view] for m in epilogue) or view in outputs
                or any(p.owner.get(u) is not g for u in users[view])):
            continue  # (an op between the product and its view stays with the product)
        dom = view.shape if view is not None else g.domain
        ident = tuple(range(len(dom)))
        if any(m in outputs or m.shape != dom or g.dmaps[m] != ident for m in epilogue):
            continue
        if any(p.owner.get(u) is not g for u in users[g.anchor]):
            continue  # the bare product is read elsewhere too: keep it where it is
        consumers = {p.owner.get(u) for m in epilogue for u in users[m] if p.owner.get(u) is not g}
        if len(consumers) != 1:
            continue
        h = consumers.pop()
        if h is None or h.kind != "matmul" or \
                (h.epi_view.shape if h.epi_view is not None else h.domain) != dom or \
                any(u is h.anchor for m in epilogue for u in users[m]):
            continue  # only into the epilogue of a matmul over the same domain
        for m in epilogue:
            g.nodes.remove(m)
            del g.dmaps[m]
            p._add(h, m, ident)


CUBLAS_MIN_WORK = 2 ** 30
"""M*N*K (times batch) from which a bf16/fp16 product defaults to cuBLAS: there Triton's
non-persistent template reaches ~70% of an H100's peak and cuBLAS ~80%."""


MATVEC_ROWS = 16
"""Fewer rows or columns than this make a product a matrix-vector one (`library_product`)."""


def library_product(mm: Node, precision: str = "strict") -> bool:
    """Whether product `mm` defaults to cuBLAS (see `matmul_backend`): M*N*K (times batch) of
    at least CUBLAS_MIN_WORK, except float32 at `strict` precision, which starts on Triton's
    template with TF32x3 products (`kernels.writer.STRICT_FLOAT32_DOT`) against cuBLAS's FMA
    kernels. H200, 2026-11-30 (`benchmarks/f32_dot_gpu.py`): a GEMM with its epilogue (KernelBench
    level-2 12 and 76) 1.96 / 1.93 ms against cuBLAS + epilogue 2.91 / 2.90 and eager 2.78 /
    2.85; a lone product with B transposed 1.79 against 2.81; but square, irregular and
    tall-skinny lone products 0.45-0.71x of cuBLAS. The region search and the accelerator time
    cuBLAS's product (`BACKEND`) and keep the faster. A product with fewer than
    MATVEC_ROWS rows or columns is a matrix-vector product in effect (bound by reading the
    matrix, and the template's 16-wide tiles would be mostly padding): cuBLAS's (level-2 14's
    summed-weight product, M=1024 N=1 K=8192, took its forward from 22.9x to 9.4x eager on the
    template)."""
    a = mm.args[0]
    if a.dtype == torch.float32 and precision == "strict":
        return min(mm.shape[-2], mm.shape[-1]) < MATVEC_ROWS
    work = 1
    for s in mm.shape:
        work *= s
    return work * a.shape[-1] >= CUBLAS_MIN_WORK


STRIDED_LIBRARY_OPS = ("scaled_dot_product_attention",)
"""Library calls that read their tensor arguments at any strides without a copy."""


def _outputs_in_input_layout(p: _Partitioner, users: dict[Node, list[Node]],
                             outputs: set[Node]) -> None:
    """A pointwise kernel whose full-size input is a permuted view (attention's query, a
    (B, S, H, D) projection seen as (B, H, S, D)) writes its output in that input's memory
    layout where only kernels and attention read the output. Attention then gets a query laid
    out as (B, S, H, D) and returns its output so (cuDNN and flash attention follow the
    query), and the `transpose(1, 2).contiguous()` after it copies nothing: LLaMA's block
    copied attention's output in a 0.012 ms pass (H200) that torch.compile does not make. The
    launcher allocates `empty_like` that input (dense views keep their strides, others come
    out contiguous) and the kernel stores at the coordinates times the output's strides."""
    for g in p.groups:
        if g.kind != "pointwise" or g.nhwc:
            continue
        ident = tuple(range(len(g.domain)))
        full = [i for i in g.inputs if i.shape == g.domain and i.op == "permute"]
        if not full:
            continue
        for n in g.outputs:
            if n in outputs or g.dmaps[n] != ident or n.shape != g.domain:
                continue
            readers = [u for u in users[n] if p.owner.get(u) is not g]
            if readers and all(p.owner.get(u) is not None or (
                    u.op == "fallback" and any(k in str(u.target) for k in STRIDED_LIBRARY_OPS))
                    for u in readers):
                g.laid_like[n] = full[0]


def _epilogues_into_rows(p: _Partitioner, users: dict[Node, list[Node]], outputs: set[Node],
                         precision: str) -> None:
    """A product that cuBLAS computes (`library_product`) hands its pointwise
    epilogue to the row reduction that reads it over the same domain: a transformer's
    `layer_norm(x + (h @ W + b))` is then cuBLAS's bare product and ONE kernel that adds the
    bias and the residual, stores the sum (the next residual reads it) and normalises it,
    where the epilogue kernel would write the sum and the norm read it back (one launch and
    two passes over the activations fewer; torch.compile fuses the same way). What moves is
    the epilogue over the reduction's domain (after the product's view to (B, S, N), when
    there is one); at most one op stays (the bias add, which `torch.addmm` takes). Only when
    one reduction over that domain reads it, the reduction's members all walk the domain in
    order, and the group graph stays acyclic."""
    order = {n: i for i, n in enumerate(p.graph.nodes)}
    for g in list(p.groups):
        if g.kind != "matmul" or not library_product(g.anchor, precision) or g.anchor in outputs:
            continue
        view = g.epi_view
        after = order[view] if view is not None else -1
        moved = [m for m in g.nodes if m is not g.anchor and m is not view and order[m] > after]
        kept = [m for m in g.nodes if m is not g.anchor and m is not view and m not in moved]
        if not moved or len(kept) > 1 or any(m in outputs for m in kept):
            continue  # (what stays is at most the bias add cuBLAS's addmm takes)
        domain = view.shape if view is not None else g.domain
        if any(m.shape != domain or m.op not in POINTWISE for m in moved):
            continue
        readers = {p.owner.get(u) for m in moved for u in users[m] if p.owner.get(u) is not g}
        rows = [h for h in readers if h is not None and h.kind == "reduction"
                and h.domain == domain and h.domain_sym == tuple(moved[-1].sym)]
        ident = tuple(range(len(domain)))
        if len(rows) != 1 or any(len(dm) == len(domain) and m.shape == domain and dm != ident
                                 for m, dm in rows[0].dmaps.items()):
            continue
        h = rows[0]
        for m in moved:
            g.nodes.remove(m)
            del g.dmaps[m]
            p._add(h, m, ident)
        if any(p._reaches(d, h) for d in p._deps(h) if d is not h):
            for m in moved:  # a cycle: put everything back
                h.nodes.remove(m)
                del h.dmaps[m]
                p._add(g, m, ident)


def _schedule(p: _Partitioner, graph: Graph, generated: set[Node]) -> list[Group | Node]:
    units: list[Group | Node] = []
    for n in graph.nodes:
        if n.op == "input" or n in generated or n.op is None:
            continue
        u = p._unit(n)
        if u not in units:
            units.append(u)
    order = {id(u): i for i, u in enumerate(units)}
    done: set[int] = set()
    steps: list[Group | Node] = []
    remaining = list(units)
    while remaining:
        for u in remaining:
            deps = [d for d in p._deps(u) if not (isinstance(d, Node) and (d.op == "input" or d in generated))]
            if all(id(d) in done for d in deps):
                steps.append(u)
                done.add(id(u))
                remaining.remove(u)
                break
        else:
            raise AssertionError("fusion produced a cyclic group graph")
    del order
    return steps
