"""Values a model derives from its constructor, made expressions of it from a second trace.

torch.export writes what the model computes from its constructor's integers as plain numbers:
`nn.MultiheadAttention(128, 4)` scales its queries by `0.1767766952966369` (its head size 32,
`(128 // 4) ** -0.5`), a model that views `x` as `(B, T, self.n_head, C // self.n_head)` keeps
`8`. A candidate written from that program is right at the traced constructor only, and the
verifier builds both models at every declared input set's own arguments (a KernelBench import's
smoke set shrinks them: `embed_dim` 128 -> 4 makes that scale 1.0).

`generalise_constructor` compares the program lowered at one input set with the same model
lowered at another whose constructor integers differ. Where the two are the same program but
for some numbers, each integer that differs is fitted as `c * a`, `c * a * b` or `c * a // b`
(`a`, `b` constructor arguments, `c` rational; `//` where the quotient must stay an integer),
and each float as `c * m ** p` (`m` one of those monomials, `p` in +-1, +-1/2): the first form
that gives both traces' values. It becomes that expression of the arguments, read in forward
from attributes ModelNew keeps (`self._kopt_embed_dim`). The fit is exact on two points, not
proven for all: the verifier's input sets are what check it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

import sympy
from torch.utils._sympy.functions import FloatPow, FloorDiv, IntTrueDiv

from kopt.phases.engineers.offline.graph import Graph, Node, Sym, constructor_symbol, keep_argument
from kopt.phases.engineers.offline.lead import Fit, Mismatch, generalise

MAX_DENOMINATOR = 64
"""Largest denominator of a fitted integer's rational coefficient (`hidden // 4`)."""
POWERS = (1, -1, Fraction(1, 2), Fraction(-1, 2))
"""Exponents a fitted float's monomial may carry (a scale is `d ** -0.5`, `1 / d`, ...)."""


@dataclass
class _Monomial:
    names: tuple[tuple[str, int], ...]
    """(argument, exponent +-1) pairs."""

    def value(self, ints: dict[str, int]) -> Fraction:
        out = Fraction(1)
        for name, e in self.names:
            out *= Fraction(ints[name]) ** e
        return out


@dataclass
class ConstructorFit(Fit):
    """Integers and floats that differ between traces at two constructor argument sets, as
    expressions of those arguments."""

    ints1: dict[str, int] = field(default_factory=dict)
    ints2: dict[str, int] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    @cached_property
    def _monomials(self) -> list[_Monomial]:
        moved = [k for k in self.ints1 if k in self.ints2 and self.ints1[k] != self.ints2[k]]
        out = [_Monomial(((a, 1),)) for a in moved]
        for a, b in itertools.permutations(moved, 2):
            out.append(_Monomial(((a, 1), (b, -1))))
        for a, b in itertools.combinations(moved, 2):
            out.append(_Monomial(((a, 1), (b, 1))))
        return out

    def _symbol(self, name: str) -> Any:
        self.used.add(name)
        return constructor_symbol(name)

    def integer(self, i1: int, i2: int) -> Any:
        # an argument itself before any multiple of one: 128 -> 96 is `out_channels` (128 ->
        # 96), not `2 * in_channels` (64 -> 48), though both give the two traces' values
        plain = [m for m in self._monomials
                 if m.value(self.ints1) == i1 and m.value(self.ints2) == i2]
        for m in plain + self._monomials:
            v1, v2 = m.value(self.ints1), m.value(self.ints2)
            c = Fraction(i1) / v1
            if c * v2 != i2 or c.denominator > MAX_DENOMINATOR or c.numerator == 0:
                continue
            num = sympy.Integer(c.numerator)
            den = sympy.Integer(c.denominator)
            for name, e in m.names:
                if e > 0:
                    num *= self._symbol(name)
                else:
                    den *= self._symbol(name)
            return num if den == 1 else FloorDiv(num, den)
        raise Mismatch(f"{i1} -> {i2} follows no constructor argument")

    def scalar(self, v1: float, v2: float) -> Any:
        if not (math.isfinite(v1) and math.isfinite(v2)) or v1 == 0 or v2 == 0:
            raise Mismatch(f"{v1!r} / {v2!r}")
        for m in self._monomials:
            m1, m2 = float(m.value(self.ints1)), float(m.value(self.ints2))
            for p in POWERS:
                c = v1 / m1 ** float(p)
                if not math.isclose(c * m2 ** float(p), v2, rel_tol=1e-9):
                    continue
                num, den = sympy.Integer(1), sympy.Integer(1)
                for name, e in m.names:
                    if e > 0:
                        num *= self._symbol(name)
                    else:
                        den *= self._symbol(name)
                # printed as `(kopt_a / kopt_b) ** -0.5`: torch's printer writes no rational power
                expr = FloatPow(IntTrueDiv(num, den), sympy.Float(float(p)))
                return expr if math.isclose(c, 1.0, rel_tol=1e-12) else sympy.Float(c, 17) * expr
        raise Mismatch(f"{v1!r} -> {v2!r} follows no constructor argument")


def generalise_constructor(g1: Graph, g2: Graph, ints1: dict[str, int], ints2: dict[str, int]) -> int:
    """Rewrite `g1` (lowered at constructor integers `ints1`) in place so that every number that
    differs in `g2` (the same model lowered at `ints2`) is an expression of the constructor's
    arguments, kept as ModelNew attributes. Returns how many numbers changed; raises
    ValueError, `g1` untouched, when the two are not the same program up to such numbers."""
    # its operands (view sizes, scales, slice bounds) are fitted, and so are a node's own sizes
    # where they fit: those a weight or an input decides are symbols read at run time already
    # (`Builder.runtime_size`), the same in both traces; what the model computes from its
    # constructor alone (an `arange(freq_dim // 2)`, a concatenation of two such) is a number
    # in each, and stays fixed where no constructor expression gives both
    fit = ConstructorFit(node_sizes="where fitted", ints1=ints1, ints2=ints2)
    generalise(g1, g2, fit, "a constructor argument")
    for name in sorted(fit.used):
        keep_argument(g1.attributes, g1.symbols, name)
    return fit.changed


def has_constructor_numbers(graph: Graph, ints: dict[str, int]) -> bool:
    """Whether `graph` holds a number one of the constructor arguments `ints` (those another
    input set moves) may have set: in a view's or an
    expansion's size list, a size its input does not have at that position (the candidate reads
    those from the input) equal to an argument, or to the quotient or product of two; or a float
    operand, not a whole number, that is such a value's +-1 or +-1/2 power. Cheap: decides whether a second trace is
    worth its export (ResNet101's is seconds of a 2-core CPU)."""
    values = {v for v in ints.values() if v > 1}
    pairs = [(a, b) for a, b in itertools.permutations(values, 2)]
    values |= {a // b for a, b in pairs if a % b == 0 and a // b > 1} | {a * b for a, b in pairs}
    floats = {float(v) ** float(p) for v in values for p in POWERS}

    def own_sizes(n: Node) -> list[Any]:
        """A view's or expansion's sizes but those its input has at the same position from the
        front or the back."""
        x, sizes = n.args[0], n.args[1]
        if not isinstance(x, Node) or not isinstance(sizes, (list, tuple)):
            return []
        k = min(len(sizes), len(x.sym))
        shared = {j for j in range(k) if sizes[j] == x.sym[j]} | \
            {len(sizes) - j for j in range(1, k + 1) if sizes[-j] == x.sym[-j]}
        return [v for j, v in enumerate(sizes) if j not in shared]

    def holds(v: Any) -> bool:
        """An integer among `values`, or a size expression with one among its numbers (a
        view's `T // 64` where the model splits T into blocks of its `block_len`)."""
        if type(v) is int:
            return v in values
        expr = v.expr if isinstance(v, Sym) else v if isinstance(v, sympy.Expr) else None
        return expr is not None and any(int(a) in values for a in expr.atoms(sympy.Integer))

    for n in graph.nodes:
        if n.op in ("view", "expand") and len(n.args) >= 2 and any(holds(v) for v in own_sizes(n)):
            return True
        # whole floats are left out: a pool's divisor 8.0 is sqrt(64) of a channel count by
        # chance far more often than a scale the constructor sets (KernelBench level-2 38)
        if any(isinstance(a, float) and not a.is_integer() and
               any(math.isclose(a, f, rel_tol=1e-9) for f in floats) for a in n.args):
            return True
    return False
