"""Products that read one input, merged into one product over their concatenated weights.

Attention's query, key and value projections and a gated MLP's gate and up projections are
two or more `x @ W_i.t()` with the same `x` and weights of the model: one `x @ cat(W_i).t()`
computes them all, and product `i` is a column slice of it. Exact: every output element is the
same dot product of the same row and column (only the library's choice of algorithm for the
wider product can move the float rounding, as any change of launch does). A wide product fills
the GPU where narrow ones leave it idle: LLaMA's key and value projections (1024 x 4096 x 1024
each) are a quarter of a wave of output tiles on an H100 on their own.

The concatenated weight is made on the host and kept on the module (`_merged_weight` in the
candidate), made again when any weight's storage or version changes (`load_state_dict` and an
optimizer step bump the version; the graph replay's key holds the same versions, so a replay
never reads an old copy). It costs the merged weights' memory a second time; merges larger
than `MAX_MERGED_BYTES` are not made. A write through `param.data` bumps no version and is not
seen, as for every weight-derived copy (the channels_last weights of `codegen._NHWC_CONV`).

Only products that cuBLAS computes (`fusion.library_product`: float32 at `strict` precision,
or large enough) are merged: their pointwise epilogue is a kernel of its own either way, where
a Triton product's epilogue runs inside it and a slice of a merged one would move it out.
Products with a bias after them are left alone: cuBLAS adds a bias inside its product
(`torch.addmm`), which a slice of a merged product would move into a pass of its own.
"""

from __future__ import annotations

from typing import Any

import torch

from kopt.phases.engineers.offline.fusion import library_product
from kopt.phases.engineers.offline.graph import MERGED_WEIGHT, Graph, Node, substitute
from kopt.phases.engineers.offline.rewrites import size_symbol

MAX_MERGED_BYTES = 2 << 30
"""The largest concatenated weight made (its memory is paid twice)."""

HELPER = '''
def _merged_weight(module, key, weights):
    """`weights` concatenated along their rows (the output features of the products that read
    one input: offline.merged_products), kept on `module` under `key` and made again when a
    weight's storage, version, device, dtype or shape changes."""
    cache = module.__dict__.setdefault("_kopt_merged_weights", {})
    tag = tuple((w.data_ptr(), w._version, w.device, w.dtype, tuple(w.shape)) for w in weights)
    hit = cache.get(key)
    if hit is None or hit[0] != tag:
        merged = torch.empty((sum(w.shape[0] for w in weights), weights[0].shape[1]),
                             device=weights[0].device, dtype=weights[0].dtype)
        row = 0
        for w in weights:  # copies into one buffer (torch.cat, as a op, would count as compute)
            merged[row:row + w.shape[0]].copy_(w.detach())
            row += w.shape[0]
        hit = (tag, merged)
        cache[key] = hit
    return hit[1]
'''


def _weight_of(graph: Graph, b: Any) -> Node | None:
    """W when `b` is `W.permute(1, 0)` of a 2-D parameter W (a linear layer's right operand)."""
    if not (isinstance(b, Node) and b.op == "permute" and list(b.args[1]) == [1, 0]):
        return None
    w = b.args[0]
    info = graph.inputs.get(w.name) if isinstance(w, Node) and w.op == "input" else None
    return w if info is not None and info.kind == "param" and w.rank == 2 else None


def _operand_key(a: Node) -> tuple[Any, ...]:
    """Equal for operands that are the same value: a node, or views of one node to one shape
    (export writes `h.view(-1, d)` once per projection)."""
    if a.op == "view" and isinstance(a.args[0], Node):
        return ("view", id(a.args[0]), tuple(a.shape), tuple(map(str, a.sym)))
    return ("node", id(a))


def _biased(users: list[Node], graph: Graph) -> bool:
    """Whether a product is read by an add of a 1-D parameter (a linear layer's bias)."""
    for u in users:
        if u.op == "add":
            for a in u.args:
                info = graph.inputs.get(a.name) if isinstance(a, Node) and a.op == "input" else None
                if info is not None and info.kind == "param" and a.rank == 1:
                    return True
    return False


def merge_products(graph: Graph, precision: str = "strict") -> list[str]:
    """Every set of two or more weight products that read the same operand, merged (module
    docstring; `precision`: the case's, which decides the products cuBLAS computes); one note
    per merge."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs if isinstance(o, Node)}
    sets: dict[tuple[Any, ...], list[tuple[Node, Node]]] = {}
    for n in graph.nodes:
        if n.op != "mm" or n.rank != 2 or len(n.args) != 2 or not isinstance(n.args[0], Node):
            continue
        w = _weight_of(graph, n.args[1])
        if w is None or n.dtype != w.dtype or id(n) in outputs or _biased(users[n], graph) \
                or not library_product(n, precision):
            continue  # (a returned product would come back as a strided slice)
        key = (_operand_key(n.args[0]), w.dtype, w.shape[1])
        if all(w is not v for _m, v in sets.get(key, [])):
            sets.setdefault(key, []).append((n, w))
    notes: list[str] = []
    for members in sets.values():
        weights = [w for _n, w in members]
        size = sum(w.shape[0] * w.shape[1] for w in weights)
        if len(members) < 2 or size * weights[0].dtype.itemsize > MAX_MERGED_BYTES:
            continue
        _merge(graph, members)
        names = ", ".join(graph.inputs[w.name].key for w in weights)
        notes.append(f"{', '.join(n.origin or n.name for n, _w in members)}: {len(members)} "
                     f"products of one input are one product over their weights concatenated "
                     f"({names}; the copy is kept and remade when a weight changes)")
    return notes


def _merge(graph: Graph, members: list[tuple[Node, Node]]) -> None:
    """One MERGED_WEIGHT, its product, and a column slice of it in place of each member's."""
    first = members[0][0]
    a = first.args[0]
    weights = [w for _n, w in members]
    rows = [size_symbol(graph, w, 0) for w in weights]
    total = sum(w.shape[0] for w in weights)
    total_sym = sum(rows[1:], rows[0])
    base = first.name
    merged = Node(f"{base}_merged_w", MERGED_WEIGHT, list(weights), {}, (total, weights[0].shape[1]),
                  (total_sym, weights[0].sym[1]), weights[0].dtype, origin=first.origin)
    back = Node(f"{base}_merged_w_t", "permute", [merged, [1, 0]], {}, (merged.shape[1], total),
                (merged.sym[1], total_sym), merged.dtype, origin=first.origin)
    product = Node(f"{base}_merged", "mm", [a, back], {}, (first.shape[0], total),
                   (first.sym[0], total_sym), first.dtype, origin=first.origin)
    new = [merged, back, product]
    swap: dict[Node, Node] = {}
    start: Any = 0
    for (n, _w), rows_i in zip(members, rows, strict=True):
        end = start + rows_i
        piece = Node(f"{n.name}_part", "slice", [product, 1, start, end, 1], {}, n.shape,
                     (n.sym[0], rows_i), n.dtype, target=torch.ops.aten.slice.Tensor,
                     origin=n.origin)
        new.append(piece)
        swap[n] = piece
        start = end
    at = graph.nodes.index(first)
    graph.nodes[at:at] = new
    for m in graph.nodes:
        if m not in new:
            m.args = substitute(m.args, swap)
            m.kwargs = {k: substitute(v, swap) for k, v in m.kwargs.items()}
    graph.outputs = [substitute(o, swap) for o in graph.outputs]
