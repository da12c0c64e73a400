"""Attention written out by hand becomes one kernel that never stores its scores.

A model that writes attention itself (MinGPT, a hand-rolled vision transformer,
`nn.MultiheadAttention` when it must return weights) computes

    S = Q @ K^T            (batch, M, N): a library product, written to memory
    X = f(S, ...)          a scale, a mask (`masked_fill` from a causal buffer), a bias
    P = softmax(X, -1)     reads S, writes P
    O = P @ V              reads P

and its (M, N) scores cost M * N elements per head three or four times over: a level-3
problem with 16384 tokens wrote 8.6 GB of scores per forward. The flash-attention schedule
(Dao et al.) keeps a block of query rows on chip and walks the keys in blocks: scores of one
block, the pointwise chain `f` on them, a running row maximum and sum (the softmax's, rescaled
as the maximum grows), and the block's contribution to O; only O is written.

`fuse_attention` finds that pattern in the lowered graph: a `bmm` whose left operand is
(through copies, no-op expands and views) a softmax over the last dim, the softmax's input a
chain of pointwise ops over the scores of another `bmm` that nothing else reads. The chain's
other operands (a mask, a bias, a scale computed at run time) stay forward's values, loaded
per (row, key) block broadcast to the scores' shape. The second product becomes one node of op
`attention`: args `[q, kt, v, *externals]` (the products' operands: `kt` is (batch, D, N), or
the 4-D (outer, heads, ...) tensors they were merged copies of)
and `kwargs["chain"]`, a `ScoreChain` holding the pointwise nodes as they were. The kernel is
`kernels/attention.py`; its PyTorch form (the region switch) computes the same ops unfused.

What is not matched stays as it was, unfused: a softmax over another dim, a chain op that
reads a value computed from the scores by a reduction, scores read by anything but the chain,
head sizes over `MAX_HEAD` (the query block would not fit in registers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kopt.phases.engineers.offline.graph import POINTWISE, Graph, Node, simplify

ATTENTION = "attention"
"""The op of a fused attention node."""

MAX_HEAD = 256
"""The largest head size (query/key features, value features) the kernel holds per row."""

_COPIES = ("identity",)


@dataclass(frozen=True, eq=False)
class ScoreChain:
    """What an attention node applies to its raw scores before the softmax."""

    score: Node
    """The raw product (or its view split into (batch, heads)) the chain starts from."""
    nodes: tuple[Node, ...]
    """The pointwise ops on the scores, in graph order; the last is the softmax's input."""
    externals: tuple[Node, ...]
    """Other tensors the chain reads, in the order the attention node's args list them after
    q, kt and v (args[3 + i] is the current node of externals[i])."""

    def heads(self, node: Node) -> tuple[int | None, Any]:
        """Where attention `node` reads its head count at run time: (index among q, kt, v of
        a 4-D operand, whose dim 1 it is; None) or (None, the size the scores' view split
        their batch into: a Sym or an int; 1 for 3-D scores)."""
        split = next((i for i, x in enumerate(node.args[:3]) if x.rank == 4), None)
        if split is not None or self.score.rank != 4:
            return split, 1
        score = self.score
        view = score.op == "view" and isinstance(score.args[1], list)
        return None, score.args[1][1] if view else score.sym[1]

    def __repr__(self) -> str:  # stable: the ops only (tuning memory signatures read reprs)
        return f"ScoreChain({', '.join(n.op for n in self.nodes) or 'none'})"


def _scores(n: Node) -> bool:
    """`n` is a product's raw scores: a `bmm`, or a view of one."""
    return n.op == "bmm" or n.op == "view" and bool(n.args) and isinstance(n.args[0], Node) \
        and n.args[0].op == "bmm"


def _single_user(n: Node, users: dict[Node, list[Node]], user: Node) -> bool:
    return users.get(n) == [user]


def _noop_expand(n: Node) -> bool:
    return n.op == "expand" and isinstance(n.args[0], Node) and n.args[0].shape == n.shape


def _softmax_of(p: Node, users: dict[Node, list[Node]], bmm2: Node) -> tuple[Node, list[Node]] | None:
    """(softmax input X, the nodes from the softmax to bmm2's operand) when `p`, bmm2's left
    operand, is a last-dim softmax seen through copies, casts to the product's dtype (the
    kernel gives the second product its probabilities in that dtype), no-op expands and views
    that only restore its 3-D shape."""
    path: list[Node] = []
    user = bmm2
    while p.op in ("view", "expand", "cast", *_COPIES):
        if not _single_user(p, users, user) or p.op == "expand" and not _noop_expand(p):
            return None
        if p.op == "cast" and p.dtype != bmm2.dtype:  # (`softmax(s.float()).to(v.dtype)`)
            return None
        if p.op == "view" and (len(p.args[0].shape) < 3 or
                               p.args[0].shape[-2:] != p.shape[-2:]):
            return None
        path.append(p)
        user, p = p, p.args[0]
    if p.op != "div" or len(p.args) != 2 or not _single_user(p, users, user):
        return None
    e, s = p.args
    if not (isinstance(e, Node) and isinstance(s, Node) and e.op == "exp" and s.op == "sum"):
        return None
    last = e.rank - 1
    if s.args[0] is not e or s.kwargs.get("dim") != last or not s.kwargs.get("keepdim"):
        return None
    sh = e.args[0]
    if not (isinstance(sh, Node) and sh.op == "sub" and len(sh.args) == 2):
        return None
    x, m = sh.args
    if not (isinstance(x, Node) and isinstance(m, Node) and m.op == "amax" and m.args[0] is x
            and m.kwargs.get("dim") == last and m.kwargs.get("keepdim")):
        return None
    if sorted(map(id, users.get(e, []))) != sorted((id(s), id(p))) or users.get(s) != [p] or \
            users.get(sh) != [e] or users.get(m) != [sh]:
        return None
    if sorted(map(id, users.get(x, []))) != sorted((id(m), id(sh))):
        return None
    return x, [m, sh, e, s, p, *path]


def _score_view(score: Node, bmm1: Node, users: dict[Node, list[Node]]) -> bool:
    """`score` is bmm1 itself or its one view splitting the batch into (batch, heads)."""
    if score is bmm1:
        return True
    return score.op == "view" and score.args[0] is bmm1 and _single_user(bmm1, users, score) \
        and score.rank == 4 and score.shape[-2:] == bmm1.shape[-2:] \
        and score.shape[0] * score.shape[1] == bmm1.shape[0]


def _chain(x: Node, users: dict[Node, list[Node]]) -> tuple[Node, Node, list[Node], list[Node]] | None:
    """(bmm1, score, chain nodes in graph order, externals) for the softmax input x."""
    chain: list[Node] = []
    externals: list[Node] = []
    score: Node | None = None
    stack = [x]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if _scores(n):
            if score is not None and score is not n:
                return None
            score = n
            continue
        if n.op not in POINTWISE or n.shape != x.shape or len(chain) > 32:
            return None
        chain.append(n)
        for a in n.inputs():
            if _scores(a) and a.shape == x.shape:
                stack.append(a)
            elif a.op in POINTWISE and a.shape == x.shape and _reads_product(a):
                stack.append(a)
            elif a not in externals:
                externals.append(a)
    if score is None:
        return None
    bmm1 = score if score.op == "bmm" else score.args[0]
    if not _score_view(score, bmm1, users):
        return None
    inside = {id(n) for n in chain} | {id(score)}
    for n in chain:  # nothing outside reads a chain value (the softmax reads x only)
        if n is not x and any(id(u) not in inside for u in users.get(n, [])):
            return None
    if score is not x and any(id(u) not in inside for u in users.get(score, [])):
        return None
    for ext in externals:
        if ext.rank > x.rank or any(s not in (1, x.shape[k + x.rank - ext.rank])
                                    for k, s in enumerate(ext.shape)):
            return None
        if _upstream(ext, lambda m: m is score):  # computed from the scores
            return None
    return bmm1, score, chain, externals


def _reads_product(n: Node, depth: int = 0) -> bool:
    """Whether pointwise `n` is computed from a product's scores (through pointwise ops)."""
    if depth > 32:
        return False
    for a in n.inputs():
        if _scores(a):
            return True
        if a.op in POINTWISE and a.shape == n.shape and _reads_product(a, depth + 1):
            return True
    return False


def _upstream(start: Node, found: Any) -> bool:
    """Whether `start` or a value it is computed from satisfies `found`."""
    stack, seen = [start], set()
    while stack:
        n = stack.pop()
        if found(n):
            return True
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.inputs())
    return False


def constant(n: Node) -> bool:
    """A constant tensor of one number (`masked_fill`'s -inf): a literal where it is read."""
    return n.op == "full" and n.rank == 0 and isinstance(n.args[0], (int, float))


def _unmerged(y: Node, score: Node, users: dict[Node, list[Node]], user: Node) -> Node:
    """A product's 3-D operand read where it lies: the (outer, heads, rows, cols) tensor it is
    a merged copy of (`view(clone(expand(x)))`, what export writes for `q @ k.transpose(-2,
    -1)` over 4-D heads) when the scores are 4-D with the same leading sizes, so the kernel
    loads through x's strides and no copy is made; else `y` itself."""
    if score.rank != 4 or y.op != "view" or not _single_user(y, users, user):
        return y
    x, prev = y.args[0], y
    while isinstance(x, Node) and (x.op in _COPIES or _noop_expand(x)) and _single_user(x, users, prev):
        prev, x = x, x.args[0]
    if not isinstance(x, Node) or x.rank != 4 or x.shape[:2] != score.shape[:2] or \
            x.shape[2:] != y.shape[1:]:
        return y
    return x


def _head_sizes_fit(bmm1: Node, bmm2: Node) -> bool:
    return isinstance(bmm1.args[0], Node) and bmm1.args[0].shape[-1] <= MAX_HEAD and \
        bmm2.shape[-1] <= MAX_HEAD


def fuse_attention(graph: Graph) -> list[str]:
    """Each hand-written attention of `graph` as one `attention` node (in place); a note per
    fused attention."""
    notes: list[str] = []
    users = graph.users()
    returned = {id(o) for o in graph.outputs if isinstance(o, Node)}
    for bmm2 in [n for n in graph.nodes if n.op == "bmm"]:
        if not isinstance(bmm2.args[0], Node) or bmm2.dtype != bmm2.args[0].dtype:
            continue
        found = _softmax_of(bmm2.args[0], users, bmm2)
        if found is None:
            continue
        x, soft = found
        got = _chain(x, users)
        if got is None:
            continue
        bmm1, score, chain, externals = got
        if any(id(n) in returned for n in [bmm1, score, *chain, *soft]):
            continue  # forward returns a value inside: it must be in memory
        q, kt = (_unmerged(a, score, users, bmm1) for a in bmm1.args[:2])
        v = _unmerged(bmm2.args[1], score, users, bmm2)
        if not (isinstance(q, Node) and isinstance(kt, Node) and isinstance(v, Node)) or \
                not _head_sizes_fit(bmm1, bmm2) or bmm1.dtype != q.dtype or \
                q.dtype != kt.dtype or q.dtype != v.dtype or not q.dtype.is_floating_point:
            continue
        # a constant tensor (`masked_fill`'s -inf) is a literal in the kernel, not an operand
        externals = [e for e in externals if not constant(e)]
        if not all(_upstream(e, lambda m: m.op == "input") for e in externals):
            continue  # a mask made from shapes alone (arange, full): not loaded, not handled
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        chain.sort(key=lambda n: order[id(n)])
        gone = {id(n) for n in [bmm1, *chain, *soft]} | {id(score)}
        bmm2.op = ATTENTION
        bmm2.args = [q, kt, v, *externals]
        bmm2.kwargs = {"chain": ScoreChain(score, tuple(chain), tuple(externals))}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        users = graph.users()
        ops = ", ".join(n.op for n in chain) or "no op"
        notes.append(f"{bmm2.origin or bmm2.name}: attention (product, {ops}, softmax, product) "
                     "as one kernel: its scores never leave the chip")
    if notes:
        simplify(graph)  # what only the fused products read is dead now
    return notes
