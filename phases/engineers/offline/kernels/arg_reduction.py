"""The arg-reduction template: argmax or argmin along one dim, one program per row.

Each program walks its row in column blocks, keeping the best value seen and its index;
`tl.argmax`/`tl.argmin` pick the first best element of a block and a later block replaces the
best only when strictly better, so ties resolve to the first index, as in PyTorch.
"""

from __future__ import annotations

from typing import Any

from kopt.phases.engineers.offline.fusion import Group, Partition
from kopt.phases.engineers.offline.kernels.scan import _ScanWriter, row_walk
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _finish_simple,
    _Scope,
)
from kopt.phases.engineers.offline.pointwise import Operand


def arg_reduction_kernel(group: Group, part: Partition, sym_code: Any, name: str) -> KernelSource:
    (node,) = group.nodes
    rd = group.rdim
    assert rd is not None
    w = _ScanWriter(group, part, sym_code)
    scope = _Scope()
    w.indent = 2
    x = w.load(node.args[0], tuple(range(len(group.domain))), scope)  # the row, not broadcast
    biggest = node.op == "argmax"
    worst = '-float("inf")' if biggest else 'float("inf")'
    w.emit(f"x = tl.where(cmask, {x.as_type('tl.float32')}, {worst})")
    w.emit(f"m = tl.{'max' if biggest else 'min'}(x, axis=0)")
    w.emit(f"i = tl.{node.op}(x, axis=0).to(tl.int64) + start")
    w.emit(f"better = m {'>' if biggest else '<'} best")
    w.emit("best_i = tl.where(better, i, best_i)")
    w.emit("best = tl.where(better, m, best)")
    w.indent = 1
    scope.values[("val", node)] = Operand("best_i", "tl.int64")
    w.store(node, 0, scope, None)
    body = w.lines
    r = len(group.domain)
    head = row_walk(w, [f"best = tl.full((), {worst}, tl.float32)",
                        "best_i = tl.full((), 0, tl.int64)"])
    return _finish_simple(w, group, part, name, "arg_reduction", head, body,
                          ["n_cols"] + [f"D{k}" for k in range(r) if k != rd],
                          {"BLOCK_SIZE": [512, 1024, 2048, 4096], "num_warps": [2, 4, 8]},
                          {"BLOCK_SIZE": 1024, "num_warps": 4}, extra_constexpr=["ONE_PASS"])
