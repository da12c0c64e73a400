"""In-place ops that export can take out of place: an op such as `relu_` that writes a fresh
intermediate nothing else reads afterwards is rewritten as its out-of-place overload in the
exported program, before the decompositions (`capture._export` calls `out_of_place`)."""

from __future__ import annotations

from typing import Any

import torch


def out_of_place(gm: torch.fx.GraphModule) -> int:
    """Rewrite each in-place op on a fresh intermediate that nothing reads afterwards
    (`relu_`, `hardtanh_`, `add_` on a convolution's output: `nn.ReLU(inplace=True)`) as its
    out-of-place op; returns how many. The same values by construction: the mutated tensor is
    a new result (an op whose schema returns no alias, and whose traced value shares memory
    with no other value of the program but the in-place ops chained on it: `type_as` may
    return its input), and every other reader of it runs before the op. Why: export's
    decompositions functionalise an in-place op through a generic rule that traces its meta
    with symbolic sizes, ~1 s per op on a 2-core CPU (MobileNetV2's 35
    `ReLU6(inplace=True)`), against milliseconds for the out-of-place op."""
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    memory: dict[torch.fx.Node, Any] = {}  # node -> the memory its value lives in
    for n in nodes:
        key = _storage(n)
        if key is not None:
            memory[n] = key
    done = 0
    try:
        for node in nodes:
            functional = _functional_twin(node)
            if functional is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
                continue
            src = node.args[0]
            steps = (src, node, *_chained(node))  # the value, then each write of it in turn
            if not _fresh(src) or not _same_dtypes(node, src) or any(
                    m not in steps for m, key in memory.items() if key == memory[src]):
                continue
            # each step's value is read only before the next write
            if any(order[u] > order[b] for a, b in zip(steps, steps[1:], strict=False)
                   for u in a.users if u is not b):
                continue
            node.target = functional
            for m in steps[1:]:  # now a value of its own, written by the ops chained on it
                memory[m] = ("out of place", node)
            done += 1
    finally:
        if done:  # the module's code follows its graph, however far the loop got
            gm.recompile()
    return done


def _same_dtypes(node: torch.fx.Node, src: torch.fx.Node) -> bool:
    """Every tensor `node` reads has `src`'s dtype: an in-place op keeps its tensor's dtype
    where the out-of-place one promotes (`x.add_(y)` of float32 x and float64 y is float32,
    `x + y` float64)."""
    dtype = src.meta["val"].dtype
    reads = [*node.args[1:], *node.kwargs.values()]
    flat = [v for a in reads for v in (a if isinstance(a, (list, tuple)) else [a])]
    for v in flat:
        if not isinstance(v, torch.fx.Node):
            continue  # a Python number: no promotion an in-place op would allow
        val = v.meta.get("val")
        if not (isinstance(val, torch.Tensor) and val.dtype == dtype):
            return False
    return True


def _chained(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The in-place ops that write `node`'s result in turn (`relu_(add_(conv, x))`)."""
    out, cur = [], node
    while True:
        nxt = [u for u in cur.users if _functional_twin(u) is not None and u.args[0] is cur]
        if len(nxt) != 1:
            return out
        cur = nxt[0]
        out.append(cur)


def _storage(node: torch.fx.Node) -> Any:
    """The identity of the memory `node`'s traced value lives in (None: not one tensor)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return val.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # a value without storage: unknown
        return None


def _fresh(node: torch.fx.Node) -> bool:
    """`node` is a new tensor: the output of an op whose schema returns no alias."""
    target = node.target
    return (node.op == "call_function" and isinstance(target, torch._ops.OpOverload)
            and len(target._schema.returns) == 1 and target._schema.returns[0].alias_info is None
            and _storage(node) is not None)


def _functional_twin(node: torch.fx.Node) -> Any:
    """The out-of-place overload of an in-place op `name_.overload` that writes its first
    argument only and takes the same arguments; None for anything else."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return None
    name = target.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_"):
        return None
    schema = target._schema
    args = schema.arguments
    if not args or args[0].alias_info is None or not args[0].alias_info.is_write or any(
            a.alias_info is not None for a in args[1:]):
        return None
    packet = getattr(getattr(torch.ops, target.namespace), name[:-1], None)  # its own library's
    twin = getattr(packet, target._overloadname, None) if packet is not None else None
    if not isinstance(twin, torch._ops.OpOverload):
        return None
    theirs = twin._schema.arguments
    if [(a.name, str(a.type)) for a in theirs] != [(a.name, str(a.type)) for a in args] or any(
            a.alias_info is not None for a in theirs) or len(twin._schema.returns) != 1:
        return None
    return twin
