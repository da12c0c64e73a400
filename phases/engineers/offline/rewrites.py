"""Algebraic rewrites of the lowered graph that hold for every input and every weight.

A rewrite changes how a value is computed, never what it is: each one is exact in real
arithmetic (only the float rounding order moves, as any reordered sum does) and reads the
weights at every call, so it stays right when the weights change. Each returns one note per
rewrite made (the engineer's log and the candidate's docstring say what was done). The
engineer runs this module's rewrite, then `sibling_products.py`'s; the optimizer's
hypothesis "algebraic rewrites off" turns both off.

- **A sum over a product's output features is a product with summed weights.** For
  `y = A @ B` (A: M x K, B: K x N) followed by per-element affine maps whose scale does not
  vary along the rows (a bias, a constant or per-feature scale or divisor, a shift, a
  negation) and a sum or mean over the N output features:

      sum_n (alpha_n * (A @ B)[m, n] + beta[m, n])
          = A @ (sum_n alpha_n * B[:, n]) + sum_n beta[m, n]

  an M x K x N product becomes one reduction over B (K x N, read once), an M x K x 1 product
  and a reduction of the shift: KernelBench's `Gemm_Divide_Sum_Scaling` does N times fewer
  FLOPs. The same holds for a convolution with one group and its output channels
  (`conv(x, W, b).mean(1)` is `conv(x, W.mean(0, keepdim=True), b.mean())`, transposed ones
  summing their weight's dim 1): one output channel instead of C. Only where nothing else
  reads the product or the values in between.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from kopt.phases.engineers.offline.graph import (
    Graph,
    Node,
    _size_step,
    broadcast_shapes,
    substitute,
)

_AFFINE = {"mul", "div", "add", "sub", "neg", "identity"}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _only_along(c: Any, rank: int, dim: int) -> bool:
    """c (broadcast against a rank-`rank` value) varies along `dim` at most."""
    if _number(c):
        return True
    if not isinstance(c, Node) or c.rank > rank:
        return False
    lead = rank - c.rank
    return all(size == 1 for j, size in enumerate(c.shape) if j + lead != dim)


@dataclass
class _Product:
    """A product whose output dim `dim` indexes its features, each feature the product with
    one slice of `weight` along `wdim`: `mm` (A @ B: B's columns) or a convolution with one
    group (its weight's output channels)."""

    node: Node
    dim: int
    weight: Node
    wdim: int
    back: list[int] | None = None
    """A permutation of the summed weight before the product reads it: a linear layer's
    B is `W.t()`, summed along W's dim 0 (coalesced column tiles; B's rows are strided)."""


def _product(n: Node) -> _Product | None:
    if n.dtype != torch.float32:
        return None
    if n.op == "mm" and n.rank == 2 and len(n.args) >= 2 and \
            all(isinstance(x, Node) and x.rank == 2 and x.dtype == torch.float32 for x in n.args[:2]):
        b = n.args[1]
        if b.op == "permute" and isinstance(b.args[0], Node) and b.args[0].rank == 2 and \
                list(b.args[1]) == [1, 0]:
            return _Product(n, 1, b.args[0], 0, [1, 0])
        return _Product(n, 1, b, 1)
    if n.op == "fallback" and "convolution" in str(n.target) and len(n.args) == 9 and n.rank >= 3:
        x, w, b, _s, _p, _d, transposed, _o, groups = n.args
        if groups == 1 and isinstance(x, Node) and isinstance(w, Node) and w.rank == n.rank and \
                w.dtype == torch.float32 and (b is None or isinstance(b, Node) and b.rank == 1):
            return _Product(n, 1, w, 1 if transposed is True else 0)
    return None


class _Emitter:
    """New nodes for one rewrite, named after the node they replace."""

    def __init__(self, graph: Graph, base: Node) -> None:
        self.graph, self.base = graph, base
        self.names = {n.name for n in graph.nodes}
        self.nodes: list[Node] = []

    def node(self, suffix: str, op: str, args: list[Any], shape: tuple[int, ...],
             sym: tuple[Any, ...], **kwargs: Any) -> Node:
        name, i = f"{self.base.name}_{suffix}", 1
        while name in self.names:
            name, i = f"{self.base.name}_{suffix}_{i}", i + 1
        self.names.add(name)
        n = Node(name, op, list(args), dict(kwargs), tuple(shape), tuple(sym), torch.float32,
                 origin=self.base.origin)
        self.nodes.append(n)
        return n

    def binary(self, op: str, a: Any, b: Any) -> Any:
        """a op b: a number when both are numbers, else a node (identities skipped)."""
        if _number(a) and _number(b):
            return {"mul": a * b, "div": a / b, "add": a + b, "sub": a - b}[op]
        if op == "mul" and (_number(a) and a == 1 or _number(b) and b == 1):
            return b if _number(a) else a
        if op in ("add", "sub") and _number(b) and b == 0:
            return a
        if op == "add" and _number(a) and a == 0:
            return b
        if op == "div" and _number(b) and b == 1:
            return a
        shape = broadcast_shapes(*[x.shape for x in (a, b) if isinstance(x, Node)])
        sym = broadcast_shapes(*[x.sym for x in (a, b) if isinstance(x, Node)])
        return self.node(op, op, [a, b], shape, sym)


def size_symbol(graph: Graph, x: Node, d: int) -> Any:
    """x's size along d as the graph reads it at run time: its symbolic size, else a symbol
    for the forward argument's or weight's size it equals by construction (registered in
    `graph.symbols`), else the traced int."""
    s = x.sym[d]
    if not isinstance(s, int):
        return s
    node, dim = x, d
    for _ in range(256):
        info = graph.inputs.get(node.name) if node.op == "input" else None
        if info is not None and info.kind in ("arg", "param", "buffer"):
            import sympy

            safe = re.sub(r"[^A-Za-z0-9_]", "_", info.key)
            if info.kind == "arg":
                name, code = f"{safe}_size{dim}", f"{info.key}.shape[{dim}]"
            else:
                getter = "get_parameter" if info.kind == "param" else "get_buffer"
                name, code = f"w_{safe}_size{dim}", f'self.{getter}("{info.key}").shape[{dim}]'
            graph.symbols.setdefault(name, code)
            return sympy.Symbol(name, integer=True, positive=True)
        step = _size_step(node, dim)
        if step is None or step[0].shape[step[1]] != x.shape[d]:
            return s
        node, dim = step
    return s


def _affine_chain(p: _Product, users: dict[Node, list[Node]], outputs: set[int]
                  ) -> tuple[list[Node], Node, Node | None] | None:
    """(the affine nodes after the product, the sum over its feature dim, the mean's division
    of that sum or None), when each value from the product to the sum has that one reader and
    is not returned."""
    chain: list[Node] = []
    node = p.node
    while True:
        if id(node) in outputs or len(users[node]) != 1:
            return None
        u = users[node][0]
        if u.op == "sum" and u.args and u.args[0] is node and u.kwargs.get("dim") == p.dim:
            readers = users[u]
            if len(readers) == 1 and readers[0].op == "div" and readers[0].args[0] is u and \
                    isinstance(readers[0].args[1], tuple) and \
                    readers[0].args[1][:2] == ("numel", p.dim) and id(u) not in outputs:
                return chain, u, readers[0]
            return chain, u, None
        if u.op not in _AFFINE or u.shape != p.node.shape or u.dtype != torch.float32:
            return None
        if sum(1 for a in u.args if a is node) != 1:
            return None
        chain.append(u)
        node = u


def _aligned(shape: tuple[Any, ...], rank: int) -> tuple[Any, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _fold_one(graph: Graph, p: _Product, chain: list[Node], total: Node, mean: Node | None
              ) -> Node | None:
    """The nodes that compute `mean or total` from the product's operands with summed weights;
    None when a map's scale varies along another dim than the features or an operand is not a
    number or a float32 node."""
    e = _Emitter(graph, total)
    y, rank, dim = p.node, p.node.rank, p.dim
    alpha: Any = 1.0
    beta: Any = 0.0
    if y.op == "fallback":  # the convolution's bias is the first shift
        bias = y.args[2]
        if isinstance(bias, Node):
            ones = [1] * (rank - 2)
            beta = e.node("bias", "view", [bias, [-1, *ones]], (bias.shape[0], *ones),
                          (bias.sym[0], *ones))
    prev = y
    for u in chain:
        i = next(k for k, a in enumerate(u.args) if a is prev)
        other = [a for k, a in enumerate(u.args) if k != i]
        c = other[0] if other else None
        if c is not None and not (_number(c) or isinstance(c, Node) and c.dtype == torch.float32):
            return None
        if u.op == "identity":
            pass
        elif u.op == "neg":
            alpha, beta = e.binary("mul", alpha, -1.0), e.binary("mul", beta, -1.0)
        elif u.op in ("mul", "div"):
            if not _only_along(c, rank, dim) or (u.op == "div" and (i != 0 or _number(c) and c == 0)):
                return None
            alpha, beta = e.binary(u.op, alpha, c), e.binary(u.op, beta, c)
        elif u.op == "add":
            beta = e.binary("add", beta, c)
        elif u.op == "sub":
            if i == 0:
                beta = e.binary("sub", beta, c)
            else:
                alpha, beta = e.binary("mul", alpha, -1.0), e.binary("sub", c, beta)
        prev = u
    w, wdim = p.weight, p.wdim
    n_size = size_symbol(graph, y, dim)
    # sum_n alpha_n * W[n]: one reduction over the weight's features (a mean's count read in
    # its kernel); alpha laid out along the weight's feature dim
    scaled = w
    if isinstance(alpha, Node) and wdim != dim + w.rank - rank:
        # alpha (features along `dim` of the product) laid along the weight's feature dim:
        # full rank, then the two dims swapped (a convolution's weight leads with them)
        while alpha.rank < rank:
            alpha = e.node("alpha_dim", "unsqueeze", [alpha, 0], (1, *alpha.shape), (1, *alpha.sym))
        perm = list(range(rank))
        perm[dim], perm[wdim] = perm[wdim], perm[dim]
        alpha = e.node("alpha", "permute", [alpha, perm], tuple(alpha.shape[j] for j in perm),
                       tuple(alpha.sym[j] for j in perm))
    if not (_number(alpha) and alpha == 1):
        scaled = e.node("scaled_w", "mul", [w, alpha], w.shape, w.sym)
    kept = tuple(1 if j == wdim else s for j, s in enumerate(w.shape))
    kept_sym = tuple(1 if j == wdim else s for j, s in enumerate(w.sym))
    weights = e.node("summed_w", "sum", [scaled], kept, kept_sym, dim=wdim, keepdim=True)
    if mean is not None:
        weights = e.node("mean_w", "div", [weights, ("numel", wdim)], weights.shape, weights.sym)
    if p.back is not None:
        weights = e.node("summed_w_t", "permute", [weights, p.back],
                         tuple(weights.shape[j] for j in p.back), tuple(weights.sym[j] for j in p.back))
    shape = tuple(1 if j == dim else s for j, s in enumerate(y.shape))
    sym = tuple(1 if j == dim else s for j, s in enumerate(y.sym))
    if y.op == "mm":
        out = e.node("product", "mm", [y.args[0], weights], shape, sym)
    else:
        out = e.node("product", "fallback", [y.args[0], weights, None, *y.args[3:]], shape, sym)
        out.target = y.target
    if not (_number(beta) and beta == 0):
        # sum_n beta[..., n, ...] over the shift's own extent (a broadcast dim stays 1)
        dom = [1] * rank
        dom_sym: list[Any] = [1] * rank
        if isinstance(beta, Node):
            dom = list(_aligned(beta.shape, rank))
            dom_sym = list(_aligned(beta.sym, rank))
        dom[dim], dom_sym[dim] = y.shape[dim], n_size
        shift = e.node("shift", "full", [beta if _number(beta) else 0.0], tuple(dom), tuple(dom_sym))
        if isinstance(beta, Node):
            shift = e.node("shift_all", "add", [shift, beta], shift.shape, shift.sym)
        red = tuple(1 if j == dim else s for j, s in enumerate(dom))
        red_sym = tuple(1 if j == dim else s for j, s in enumerate(dom_sym))
        summed = e.node("summed_shift", "sum", [shift], red, red_sym, dim=dim, keepdim=True)
        if mean is not None:
            summed = e.node("mean_shift", "div", [summed, ("numel", dim)], red, red_sym)
        out = e.node("shifted", "add", [out, summed], out.shape, out.sym)
    target = mean or total
    if not total.kwargs.get("keepdim"):
        out = e.node("squeezed", "squeeze", [out, [dim]], target.shape, target.sym)
    out.dtype = target.dtype
    at = graph.nodes.index(total)
    graph.nodes[at:at] = e.nodes
    return out


def fold_product_sums(graph: Graph) -> list[str]:
    """Sums (and means) over a product's output features (a 2-D matmul's columns, a
    convolution's output channels), through affine maps whose scale varies along the features
    only, computed from summed weights (module docstring). The values they replace are left
    for `simplify` to drop."""
    notes: list[str] = []
    users = None  # the graph's readers, recomputed only after a fold changed the graph
    for n in list(graph.nodes):
        p = _product(n)
        if p is None:
            continue
        if users is None:
            users = graph.users()
        found = _affine_chain(p, users, {id(o) for o in graph.outputs})
        if found is None:
            continue
        chain, total, mean = found
        target = mean or total
        out = _fold_one(graph, p, chain, total, mean)
        users = None  # (recomputed after any attempt: a fold may have begun to edit the graph)
        if out is None:
            continue
        swap = {target: out}
        for m in graph.nodes:
            m.args = substitute(m.args, swap)
            m.kwargs = {k: substitute(v, swap) for k, v in m.kwargs.items()}
        graph.outputs = [substitute(o, swap) for o in graph.outputs]
        what = "mean" if mean is not None else "sum"
        kind = "product" if n.op == "mm" else "convolution"
        features = "output features" if n.op == "mm" else "output channels"
        notes.append(f"{target.origin or target.name}: the {what} over the {features} of "
                     f"{n.origin or n.name} ({n.shape[p.dim]} of them) is one {kind} with the "
                     f"weights' {what}")
    return notes
