"""Integer values over the last dim's pairs: what a pointwise kernel that walks its elements
two at a time knows about the index arithmetic a strided assignment builds.

A pointwise kernel in pair mode (`kernels/pointwise.py`) walks the flat index as pairs `pp`
(a (BLOCK_SIZE // 2, 1) block) and the pair's two elements `jj` (a (1, 2) block); the last
dim's coordinate is `c = 2 q + jj`, with q the pair's place along that dim. An integer value
computed from shapes alone that is `a * q + f[jj]` (f one integer for each of the two
elements) is written from q and jj, so that a value the same for both elements of a pair
(`c // 2`, `2 * (c // 2) + 1`) is a (BLOCK_SIZE // 2, 1) block: a take at such an index loads
once per pair, and the pair's two results meet in one `tl.where` on jj, a (BLOCK, 2) block
stored at consecutive addresses.

Why: an interleaved assignment (`out[..., 0::2] = x1 * cos - x2 * sin; out[..., 1::2] = x1 *
sin + x2 * cos`, GPT-J's rotary embedding) walked element by element loads x, cos and sin at
`c // 2` for each element, twice the loads and none of them vector loads. On one H200 (torch
2.11, Triton 3.6, 2026-12-04, `triton.testing.do_bench`, x 8x32x2048x128 float32): the
element-wise kernel 0.208 ms, the same arithmetic over pairs 0.146 ms (a hand-written `tl.join`
of the pair 0.148, with constexpr sizes 0.132).

Only exact rules: a division or remainder by m needs `a % m == 0` (then `(a q + f) // m = (a
/ m) q + f // m`), a truncating one also needs every term >= 0 (q is); comparisons and logic
need values without q. Anything else is written as it is over the (BLOCK, 2) block.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from kopt.phases.engineers.offline.pointwise import Operand, literal


@dataclass(frozen=True)
class Pair:
    """The value `a * q + f[jj]` (booleans when `boolean`, then a is 0)."""

    a: int
    f: tuple[int, int]
    boolean: bool = False

    @property
    def per_pair(self) -> bool:
        """The same for both elements of a pair: a (BLOCK // 2, 1) block."""
        return self.f[0] == self.f[1]


COORDINATE = Pair(2, (0, 1))
"""The last dim's coordinate, 2 q + jj."""

_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}
_LOGIC = {"logical_and": operator.and_, "logical_or": operator.or_, "logical_xor": operator.xor}


def _of(v: Any) -> Pair | None:
    """An operand as a Pair: a pair value, or a Python int constant (the same for both)."""
    if isinstance(v, Operand):
        if v.pair is not None:
            return v.pair
        v = v.scalar if v.ctype is None else None
    if isinstance(v, bool):
        return Pair(0, (int(v), int(v)), boolean=True)
    if isinstance(v, int):
        return Pair(0, (v, v))
    return None


def pair_op(op: str, args: list[Any]) -> Pair | None:
    """`op` on `args` (Operands or constants) as a Pair, or None where no exact rule applies."""
    ps = [_of(a) for a in args]
    if not ps or any(p is None for p in ps):
        return None
    if op == "logical_not" and len(ps) == 1 and ps[0].a == 0:
        return Pair(0, (int(not ps[0].f[0]), int(not ps[0].f[1])), boolean=True)
    if len(ps) != 2:
        return None
    x, y = ps
    if op in ("add", "sub") and not (x.boolean or y.boolean):
        sign = 1 if op == "add" else -1
        return Pair(x.a + sign * y.a, (x.f[0] + sign * y.f[0], x.f[1] + sign * y.f[1]))
    if op == "mul" and not (x.boolean or y.boolean):
        if y.a == 0 and y.per_pair:
            x, y = y, x
        if x.a == 0 and x.per_pair:
            k = x.f[0]
            return Pair(k * y.a, (k * y.f[0], k * y.f[1]))
        return None
    if op in ("truediv_floor", "truediv_trunc", "remainder", "fmod"):
        if x.boolean or y.a != 0 or not y.per_pair or y.f[0] <= 0:
            return None
        m = y.f[0]
        if x.a % m:
            return None
        if op in ("truediv_trunc", "fmod") and (x.a < 0 or min(x.f) < 0):
            return None  # truncation and floor differ on negative values
        if op.startswith("truediv"):
            return Pair(x.a // m, (x.f[0] // m, x.f[1] // m))
        return Pair(0, (x.f[0] % m, x.f[1] % m))
    if op in _COMPARE and x.a == 0 and y.a == 0:
        f = _COMPARE[op]
        return Pair(0, (int(f(x.f[0], y.f[0])), int(f(x.f[1], y.f[1]))), boolean=True)
    if op in _LOGIC and x.a == 0 and y.a == 0 and x.boolean and y.boolean:
        f = _LOGIC[op]
        return Pair(0, (f(x.f[0], y.f[0]), f(x.f[1], y.f[1])), boolean=True)
    return None


def pair_operand(p: Pair, ctype: str | None) -> Operand:
    """The Operand that writes `p` from q and jj (a constant where it is one)."""
    if p.a == 0 and p.per_pair:
        v: Any = bool(p.f[0]) if p.boolean else p.f[0]
        return Operand(literal(v), None, v)
    if p.boolean:
        return Operand(f"(jj == {1 if p.f[1] else 0})", "tl.int1", pair=p)
    terms = []
    if p.a:
        terms.append("q" if p.a == 1 else f"q * {p.a}")
    if not p.per_pair:
        d = p.f[1] - p.f[0]
        terms.append("jj" if d == 1 else f"jj * {d}")
    if p.f[0]:
        terms.append(str(p.f[0]))
    return Operand(f"({' + '.join(terms)})", ctype, pair=p)
