"""The scan template: a cumulative sum or product along one dim, one program per row.

Each program walks its row in column blocks: `tl.cumsum` (or `tl.cumprod`) of the block,
combined with the carry of the blocks before it (added, or multiplied), and the carry becomes
the block's last element (a reverse scan walks the row from its end). The scanned value is
loaded, or computed in the loop by the pointwise prologue the scan's group took over
(`cumsum(x * mask)`); the row's other coordinates come from the program id. Accumulates in
float32.
"""

from __future__ import annotations

from typing import Any

from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _decompose,
    _finish_simple,
    _Scope,
    _Writer,
)
from kopt.phases.engineers.offline.pointwise import Operand


class _ScanWriter(_Writer):
    def coord(self, k: int) -> str:
        if k == self.g.rdim:
            return "cols"
        self.coords_needed.add(k)
        return f"c{k}"

    def load_mask(self, dm: DimMap) -> str | None:
        return "cmask" if self.g.rdim in dm else None


def row_walk(w: _ScanWriter, init: list[str], reverse: bool = False) -> list[str]:
    """A row-per-program kernel's head: the row's other coordinates from the program id, the
    `init` lines, then the loop over column blocks (`cols`, `cmask`), from the row's end when
    `reverse`."""
    rd = w.g.rdim
    head = ["row = tl.program_id(0).to(tl.int64)"]
    head += _decompose("row", sorted(w.coords_needed), len(w.g.domain), "c", skip=rd)
    head += init + ["for start in range(0, n_cols, BLOCK_SIZE):"]
    if reverse:  # the row from its end: the same walk over reversed columns
        return head + ["    cols = n_cols - 1 - (start + tl.arange(0, BLOCK_SIZE))",
                       "    cmask = cols >= 0"]
    return head + ["    cols = start + tl.arange(0, BLOCK_SIZE)", "    cmask = cols < n_cols"]


def scan_kernel(group: Group, part: Partition, sym_code: Any, name: str) -> KernelSource:
    node = group.nodes[-1]  # the scan; any node before it is its pointwise prologue
    rd = group.rdim
    assert rd is not None
    w = _ScanWriter(group, part, sym_code)
    scope = _Scope()
    w.indent = 2
    x = w.operand(node.args[0], group.dmaps[node], node, scope)
    prod = node.op == "cumprod"
    w.emit(f"x = {x.as_type('tl.float32')}")
    w.emit(f"x = tl.where(cmask, x, {'1.0' if prod else '0.0'})")
    w.emit(f"s = tl.{node.op}(x, axis=0) {'*' if prod else '+'} carry")
    scope.values[("val", node)] = Operand("s", "tl.float32")
    for o, out in enumerate(group.outputs):  # the scan, and prologue values read elsewhere
        w.store(out, o, scope, "cmask")
    w.emit("carry = tl.sum(tl.where(tl.arange(0, BLOCK_SIZE) == BLOCK_SIZE - 1, s, 0.0), axis=0)")
    loop = w.lines
    r = len(group.domain)
    head = row_walk(w, [f"carry = {'1.0' if prod else '0.0'}"],
                    reverse=bool(node.kwargs.get("reverse")))
    return _finish_simple(w, group, part, name, "scan", head, loop,
                          ["n_cols"] + [f"D{k}" for k in range(r) if k != rd],
                          {"BLOCK_SIZE": [512, 1024, 2048, 4096], "num_warps": [2, 4, 8]},
                          {"BLOCK_SIZE": 2048, "num_warps": 4}, extra_constexpr=["ONE_PASS"])
