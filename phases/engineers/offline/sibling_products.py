"""Products that read the same activation become one product over their weights side by side.

A decoder block projects one normalised activation three times (`wq(h)`, `wk(h)`, `wv(h)`):
three library products, each reading `h` and launching on its own. With grouped-query
attention the key and value products are narrow (LLaMA-7B's 1024 output features against
the query's 4096): over a short sequence each fills a fraction of the GPU's SMs. One product
over the weights concatenated along their output features,

    [y_1 | y_2 | ... | y_n] = h @ [W_1; W_2; ...; W_n].t()

computes the same columns (each output element is the same dot product) and hands each
reader a view, `y_i = Y[:, offset_i : offset_i + N_i]`. Measured on one H200 (torch 2.11,
2026-11-29, `benchmarks/horizontal_gemm_gpu.py`, bf16, cuBLAS; launched from Python / replayed
as a CUDA graph, as a candidate's forward is): GPT-2-width q/k/v (768 -> 768 x3) over 1024
tokens 2.11x / 1.71x, over 8192 tokens 1.23x / 1.07x; LLaMA-7B's q/k/v over 1024 tokens
1.15x / 1.02x. Large products gain nothing or lose: LLaMA's q/k/v over 8192 tokens 0.99x /
0.94x, its gate and up products (11008 wide each) 0.94-0.99x. Hence the rule: only products
whose smallest member does under `SIBLING_MAX_FLOPS` at the traced sizes. In LLaMA's whole
block (device time per forward, `benchmarks/kernel_ab_gpu.py --without siblings`) it is
0.5203 -> 0.5188 ms: the rule pays where the products are small, and most where a forward is
launched op by op.

The concatenated weight is made on the first call and kept on the module (`_cached_cat` in
the candidate file), made again whenever one of its weights changes storage, version, device,
dtype or shape: a `load_state_dict` (which the verifier does between input sets) or an
optimizer step writes in place and bumps the version. It costs memory: one more copy of those
weights. Parameters only (a buffer or an activation would be concatenated at every call).
"""

from __future__ import annotations

from typing import Any

import torch

from kopt.phases.engineers.offline.graph import CACHED_CAT, Graph, Node, substitute
from kopt.phases.engineers.offline.rewrites import size_symbol

SIBLING_MAX_FLOPS = 2**34
"""Products share one library call only when the smallest of them does fewer FLOPs than this
(2 * M * N * K, about 17 GFLOP) at the traced sizes: LLaMA-7B's key and value products over
1024 tokens (8.6 GFLOP each) and GPT-2's over 8192 (9.7) gain; LLaMA's over 8192 tokens (69
GFLOP for the narrow ones) lose (module docstring)."""


def _linear_weight(graph: Graph, mm: Node) -> Node | None:
    """The parameter W of a product `A @ W.t()` (a linear layer's (N, K) weight), else None."""
    if mm.op != "mm" or mm.rank != 2 or len(mm.args) != 2:
        return None
    b = mm.args[1]
    if not isinstance(b, Node) or b.op != "permute" or list(b.args[1]) != [1, 0]:
        return None
    w = b.args[0]
    info = graph.inputs.get(w.name) if isinstance(w, Node) and w.op == "input" else None
    if info is None or info.kind != "param" or w.rank != 2 or w.dtype != mm.dtype:
        return None
    return w


def _operand_key(a: Any) -> Any:
    """Two views of one value to the same shape are the same operand (export traces a view of
    the activation per projection)."""
    if isinstance(a, Node) and a.op == "view" and isinstance(a.args[0], Node):
        return ("view", id(a.args[0]), a.shape, a.dtype)
    return ("node", id(a))


def fuse_sibling_products(graph: Graph) -> list[str]:
    """Products `A @ W_i.t()` of one activation A and parameters W_i of the same dtype become
    one product over the W_i concatenated (module docstring), where the smallest does under
    SIBLING_MAX_FLOPS; each former product is a column slice of the new one. One note per
    group made."""
    siblings: dict[Any, list[tuple[Node, Node]]] = {}
    for n in graph.nodes:
        w = _linear_weight(graph, n)
        if w is not None:
            siblings.setdefault((_operand_key(n.args[0]), w.shape[1], n.dtype), []).append((n, w))
    notes: list[str] = []
    names = {n.name for n in graph.nodes}
    for members in siblings.values():
        weights = [w for _, w in members]
        if len(members) < 2 or len({id(w) for w in weights}) < len(weights):
            continue
        first = members[0][0]
        m, k = first.shape[0], first.args[0].shape[1]
        if min(2 * m * mm.shape[1] * k for mm, _ in members) >= SIBLING_MAX_FLOPS:
            continue
        fused = _fuse(graph, members, names)
        notes.append(f"{', '.join(mm.origin or mm.name for mm, _ in members)}: one product over "
                     f"their {len(members)} weights side by side ({fused.shape[1]} output "
                     f"features), each a column slice of it")
    return notes


def _fresh(names: set[str], base: str) -> str:
    name, i = base, 1
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    return name


def _fuse(graph: Graph, members: list[tuple[Node, Node]], names: set[str]) -> Node:
    first = members[0][0]
    a, dtype = first.args[0], first.dtype
    sizes = [size_symbol(graph, w, 0) for _, w in members]
    total = sum(w.shape[0] for _, w in members)
    total_sym = sum(sizes[1:], sizes[0])
    k, k_sym = members[0][1].shape[1], members[0][1].sym[1]
    base = first.name
    # kwargs["key"]: where the module keeps it (`_cached_cat`), named after its weights
    key = "+".join(graph.inputs[w.name].key for _, w in members)
    cat = Node(_fresh(names, f"{base}_siblings_w"), CACHED_CAT, [[w for _, w in members]],
               {"dim": 0, "key": key}, (total, k), (total_sym, k_sym), dtype, origin=first.origin)
    perm = Node(_fresh(names, f"{base}_siblings_wt"), "permute", [cat, [1, 0]], {}, (k, total),
                (k_sym, total_sym), dtype, origin=first.origin)
    product = Node(_fresh(names, f"{base}_siblings"), "mm", [a, perm], {}, (first.shape[0], total),
                   (first.sym[0], total_sym), dtype, origin=first.origin)
    nodes, swap = [cat, perm, product], {}
    offset: Any = 0
    for (mm, _w), size in zip(members, sizes, strict=True):
        end = offset + size
        piece = Node(_fresh(names, f"{mm.name}_slice"), "slice", [product, 1, offset, end, 1], {},
                     mm.shape, mm.sym, dtype, target=torch.ops.aten.slice.Tensor, origin=mm.origin)
        nodes.append(piece)
        swap[mm] = piece
        offset = end
    at = min(graph.nodes.index(mm) for mm, _ in members)
    graph.nodes[at:at] = nodes
    for n in graph.nodes:
        n.args = substitute(n.args, swap)
        n.kwargs = {key: substitute(v, swap) for key, v in n.kwargs.items()}
    graph.outputs = [substitute(o, swap) for o in graph.outputs]
    gone = set(swap)
    graph.nodes = [n for n in graph.nodes if n not in gone]
    return product
