"""A leading size export fixed, made symbolic again from a second trace.

torch.export specialises an input's leading size when the model derives a Python number from
it: Swin's `window_reverse` computes `B = int(windows.shape[0] / (H * W / ws / ws))`, and every
size after that is a constant (`view(10, 8, 8, 7, 7, -1)` for a batch of 10). A candidate
written from that program runs at the traced batch only; the verifier tries others.

`generalise_lead` compares the program lowered at leading size L1 with the same model lowered
at L2 = L1 + 1. Where the two are the same program but for their sizes, every size that differs
is an affine function of the leading size (a * L + c, a and c integers or expressions of the
other input dims, fitted from the two traces) and becomes that expression of a new symbol read
from the input at run time (`x.shape[0]`). A model whose program changes with the leading size
(a Python loop over it: a recurrent model stepping over its sequence) does not compare and
stays fixed. The fit is exact on two points, not proven for all: the verifier's other
leading sizes are what check it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from kopt.phases.engineers.offline.graph import Graph, Node, Sym

LEAD_SYMBOL = "kopt_lead"
"""The symbol (a local of the candidate's forward) the generalised sizes are written in."""


class Mismatch(Exception):
    """The two traces are not the same program up to their sizes."""


@dataclass
class Fit:
    """How two traces' differing values become expressions (here: of the leading size)."""

    lead: Any = None
    """The leading size's symbol (unused by fits of other values)."""
    l1: int = 0
    l2: int = 1
    changed: int = 0
    node_sizes: bool | str = True
    """Whether each node's own sizes (`Node.sym`) are generalised too, or only its operands;
    `"where fitted"`: each size that fits, the others kept at their traced values."""

    def size(self, v1: Any, v2: Any) -> Any:
        """v1 as an expression of the lead, from its values at the two leading sizes: the two
        expressions walked in step, each integer that differs fitted as a * L + c."""
        e1, e2 = _expr(v1), _expr(v2)
        if e1 is None or e2 is None:
            raise Mismatch(f"{v1!r} / {v2!r}")
        return self._tree(e1, e2)

    def scalar(self, v1: float, v2: float) -> Any:
        """A floating-point argument that differs between the traces: never from the
        leading size."""
        raise Mismatch(f"{v1!r} / {v2!r}")

    def integer(self, i1: int, i2: int) -> Any:
        """An integer that differs between the traces as an expression of the lead."""
        slope, rest = divmod(i2 - i1, self.l2 - self.l1)
        if rest:
            raise Mismatch(f"{i1} -> {i2} is not affine in the leading size")
        return slope * self.lead + (i1 - slope * self.l1)

    def _tree(self, e1: Any, e2: Any) -> Any:
        if e1 == e2:
            return e1
        if e1.is_Integer and e2.is_Integer:
            out = self.integer(int(e1), int(e2))
            self.changed += 1
            return out
        if e1.func != e2.func or len(e1.args) != len(e2.args) or not e1.args:
            raise Mismatch(f"{e1} / {e2}")
        return e1.func(*[self._tree(a, b) for a, b in zip(e1.args, e2.args, strict=True)])


def _expr(v: Any) -> Any:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return sympy.Integer(v)
    if isinstance(v, Sym):
        return v.expr
    if isinstance(v, sympy.Expr):
        return v
    return None


def _same(v1: Any, v2: Any, fit: Fit, m1: dict[int, Node], *, size: bool) -> Any:
    """v1 with its sizes generalised, checking v2 has the same structure (nodes by position)."""
    if isinstance(v1, Node):
        if not isinstance(v2, Node) or m1.get(id(v2)) is not v1:
            raise Mismatch(f"{v1.name} / {getattr(v2, 'name', v2)!r}")
        return v1
    if isinstance(v1, (list, tuple)):
        if not isinstance(v2, (list, tuple)) or len(v1) != len(v2):
            raise Mismatch(f"{v1!r} / {v2!r}")
        out = [_same(a, b, fit, m1, size=size) for a, b in zip(v1, v2, strict=True)]
        return type(v1)(out)
    if isinstance(v1, (Sym, sympy.Expr)) or (isinstance(v1, int) and not isinstance(v1, bool)):
        if v1 == v2 and type(v1) is type(v2):
            return v1
        e = fit.size(v1, v2)
        if e == _expr(v1):
            return v1
        if size or (isinstance(v1, sympy.Expr) and v1.free_symbols):
            # (an expression of sizes, as it came: `w_size0 // 8` in a group norm's expand,
            # whose group count 8 became the constructor's num_groups; it has no one value)
            return e
        return Sym(e, v1.hint if isinstance(v1, Sym) else int(v1))
    if isinstance(v1, float) and type(v2) is float and v1 != v2 and not size:
        out = fit.scalar(v1, v2)
        fit.changed += 1
        return Sym(out, v1)
    if type(v1) is not type(v2) or v1 != v2:
        raise Mismatch(f"{v1!r} / {v2!r}")
    return v1


def _sizes_where_fitted(a: Node, b: Node, fit: Fit, m1: dict[int, Node]) -> tuple[Any, ...]:
    """a's own sizes, each that differs in b generalised where the fit finds an expression of
    it, else kept as traced (a size the other trace moved for another reason). An input's
    (a forward argument's, a weight's) are its tensor's: read from it, never fitted."""
    if a.op == "input":
        return a.sym
    if len(a.sym) != len(b.sym):
        raise Mismatch(f"{a.name}'s rank")
    out = []
    for x, y in zip(a.sym, b.sym, strict=True):
        try:
            out.append(_same(x, y, fit, m1, size=True))
        except Mismatch:
            out.append(x)
    return tuple(out)


def generalise_lead(g1: Graph, g2: Graph, l1: int, l2: int, lead_source: str) -> int:
    """Rewrite `g1` (traced at leading size `l1`) in place so that every size that differs in
    `g2` (the same model at `l2`) is an expression of the leading size, read in forward as
    `lead_source` (`x.shape[0]`). Returns how many sizes changed; raises ValueError, `g1`
    untouched, when the two are not the same program up to sizes."""
    fit = Fit(sympy.Symbol(LEAD_SYMBOL, integer=True, positive=True), l1, l2)
    generalise(g1, g2, fit, "the leading size")
    if fit.changed:
        g1.symbols[LEAD_SYMBOL] = lead_source
    return fit.changed


def generalise(g1: Graph, g2: Graph, fit: Fit, what: str) -> None:
    """Rewrite `g1` in place: every value that differs in `g2` (the same program traced at
    other sizes) becomes `fit`'s expression of it. Raises ValueError, `g1` untouched, when the
    two are not the same program up to those values (`what` names what the traces vary)."""
    if len(g1.nodes) != len(g2.nodes) or g1.symbols != g2.symbols or g1.out_spec != g2.out_spec:
        raise ValueError(f"the two traces have different programs (a loop or branch on {what}?)")
    by_id = {id(b): a for a, b in zip(g1.nodes, g2.nodes, strict=True)}
    plan: list[tuple[Node, list[Any], dict[str, Any], tuple[Any, ...]]] = []
    try:
        for a, b in zip(g1.nodes, g2.nodes, strict=True):
            # names are export's (`mul_103` in one trace, `mul_97` in another of the same
            # program): the ops, their operands by position and their values are compared
            if (a.op, str(a.target), a.dtype, a.multi, a.rank) != \
                    (b.op, str(b.target), b.dtype, b.multi, b.rank):
                raise Mismatch(f"{a.name} ({a.op}) / {b.name} ({b.op})")
            args = _same(a.args, b.args, fit, by_id, size=False)
            kwargs = {k: _same(v, b.kwargs.get(k), fit, by_id, size=False) for k, v in a.kwargs.items()}
            if set(a.kwargs) != set(b.kwargs):
                raise Mismatch(f"{a.name}'s keywords")
            sym = tuple(_same(list(a.sym), list(b.sym), fit, by_id, size=True)) \
                if fit.node_sizes is True else _sizes_where_fitted(a, b, fit, by_id) \
                if fit.node_sizes else a.sym
            plan.append((a, args, kwargs, sym))
        outs = _same(list(g1.outputs), list(g2.outputs), fit, by_id, size=False)
        for name, info in g1.inputs.items():
            other = g2.inputs.get(name)
            if other is None or (info.kind, info.key, info.index) != (other.kind, other.key, other.index):
                raise Mismatch(f"input {name}")
            if info.value is not None and (other.value is None or info.value.shape != other.value.shape):
                raise Mismatch(f"constant {name}'s shape")
    except Mismatch as err:
        raise ValueError(f"the two traces differ beyond {what} ({err})") from None
    for a, args, kwargs, sym in plan:
        a.args, a.kwargs, a.sym = list(args), kwargs, sym
    g1.outputs = list(outs)


def lead_input(graph: Graph) -> str | None:
    """`name.shape[0]` of the graph's first forward tensor argument, the leading size the
    verifier varies; None without one."""
    ranked = {n.name: n.rank for n in graph.nodes if n.op == "input"}
    args = sorted((info.index, info.key) for name, info in graph.inputs.items()
                  if info.kind == "arg" and ranked.get(name, 0) >= 1)
    return f"{args[0][1]}.shape[0]" if args else None
