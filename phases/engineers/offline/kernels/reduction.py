"""The reduction template: one program per row of the reduced dim.

When the row fits one block everything stays in registers (`ONE_PASS`), otherwise each
reduction level is a loop over column blocks and the outputs are written by a last loop. A
softmax-style `sum(exp(e - max))` shares its max's loop (online max/sum, `_OnlineSum`), and a
select (gather) picks the elements its input is computed from and evaluates it after the loop,
so cross-entropy's long rows are read once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition
from kopt.phases.engineers.offline.graph import LAYOUT, REDUCTIONS, Node
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _decompose,
    _finish_simple,
    _identity,
    _n_operands,
    _right_align,
    _Scope,
    _Writer,
)
from kopt.phases.engineers.offline.pointwise import Operand, compute_type, is_float_type, literal

_NEUTRAL = {"sum": "0.0", "select": "0.0", "amax": '-float("inf")', "amin": 'float("inf")'}
_NEG_INF = '-float("inf")'
DIRECT = "direct"
"""A select leaf read by one load at the selected column (see `emit_select`)."""


@dataclass(frozen=True)
class _OnlineSum:
    """A `sum(f(c * (e - g)))` over a long row, f = exp or exp2, c > 0 a constant, g a row
    value, whose stabilising max `amax(e)` is in the same kernel: both are computed in ONE loop
    over the row (running max, running sum rescaled whenever the max grows; Milakov and
    Gimelshein 2018, "Online normalizer calculation for softmax").

    Exact for any row value g, since sum f(c (e - g)) = f(c (m - g)) * sum f(c (e - m)) for
    the max m; c > 0 keeps the largest term at f(0) = 1 (c < 0 could overflow where the
    two-pass form would not, so it is left to the per-level loops)."""

    total: Node
    """The sum."""
    peak: Node
    """The amax of e, the running max's reduction."""
    shift: Node
    """g: the row value subtracted from e (the max itself, or logsumexp's -inf-safe max)."""
    fn: str
    """`exp` or `exp2`."""
    scale: tuple[str, str] | None
    """(`mul` | `div`, constant) applied to e - g before f, or None."""

    def arg(self, diff: str) -> str:
        """f's argument for the difference `diff` (source text)."""
        if self.scale is None:
            return diff
        op, c = self.scale
        return f"({diff}) * {c}" if op == "mul" else f"({diff}) / {c}"


@dataclass(frozen=True)
class _OnlineVar:
    """`sum((e - sum(e) / n) ** 2)` over a long row (a variance's sum of squared deviations,
    as `lower_var` writes it): accumulated in the loop of its mean's sum, per block, by Chan,
    Golub and LeVeque's pairwise update (the block's own mean and M2 from the registers, then
    merged into the running count, mean and M2), so a standardisation reads its input once for
    both statistics instead of once for the mean and again for the deviations. Stable where
    sum(x^2) - n mean^2 would cancel (a large mean over a small spread)."""

    total: Node
    """The sum of squared deviations (M2)."""
    mean_sum: Node
    """sum(e), whose loop this one shares."""
    e: Node
    """The values."""


def _positive_constant(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < float(v) < float("inf")


TILED_MIN_INNER = 16
"""A tile's narrowest BLOCK_C: a reduction whose contiguous extent after the reduced dim is
smaller, and whose (reduced x contiguous) block of one outer index fits ROW_TILE, is a row
reduction instead (each program ROWS short strided rows, which together cover contiguous
memory): as tiles, a batched (N*4096, 3) @ (3, 2) product (`F.affine_grid`) ran 8192 programs
of 16 x 16 lanes with 6 in use, 155 s of the CPU interpreter for a 2-sample smoke forward."""


def is_tiled(group: Group) -> bool:
    """A reduction over a dim that is not the innermost (`x.mean(0)`, dim 1 of (B, R, C)):
    its kernel walks 2-D tiles (see `_ReductionWriter.tiled`), unless its rows are short and
    narrow (`TILED_MIN_INNER`)."""
    rd = group.rdim
    if rd is None or rd == len(group.domain) - 1:
        return False
    inner = math.prod(group.domain[rd + 1:])
    if inner <= 1 or inner < TILED_MIN_INNER and group.domain[rd] * inner <= ROW_TILE:
        return False
    return not any(n.op == "select" for n in group.nodes)


def is_multirow(group: Group) -> bool:
    """A reduction along the innermost dim whose programs each take ROWS rows (a
    (ROWS, BLOCK_SIZE) tile, row values (ROWS, 1)): a 64-wide LayerNorm row is one program's
    2 % otherwise, on a GPU and in the CPU interpreter alike. The launcher picks ROWS from the
    row's width at run time (ROW_TILE elements per program, 1 for a row that loops). A select
    (gather) keeps one row per program."""
    return group.rdim is not None and not is_tiled(group) and \
        not any(n.op == "select" for n in group.nodes)


class _ReductionWriter(_Writer):
    one_pass = True
    split = False
    """A tiled reduction whose reduced dim may be split across programs (`_splittable`): its
    loops walk the program's own rows [lo, hi) instead of the whole extent."""
    col, col_mask = "cr", "cmask"
    """The reduced dim's coordinate and its mask in loads (a select's direct load swaps them)."""

    def __init__(self, group: Group, part: Partition, sym_code: Any) -> None:
        super().__init__(group, part, sym_code)
        self.tiled = is_tiled(group)
        self.multirow = is_multirow(group)
        """An outer or middle-dim reduction: each program reduces a (BLOCK_SIZE, BLOCK_C) tile
        per step, BLOCK_SIZE along the reduced dim and BLOCK_C along the contiguous dims after
        it (one coalesced row of BLOCK_C elements per reduced index), instead of one program
        per output element walking its column with a stride. Row values are (1, BLOCK_C)."""

    def twin(self, n: Node) -> Node | None:
        """An earlier reduction of the group with the same op over the same values and dim
        (`x.mean(0)` and the mean inside `x.std(0)`, which differ only in keepdim): its
        value is this one's, accumulated once."""
        for m in self.g.nodes:
            if m is n:
                return None
            if m.op == n.op and m.args[:2] == n.args[:2] and m.kwargs["dim"] == n.kwargs["dim"] and \
                    m.dtype == n.dtype and self.twin(m) is None:
                return m
        return None

    def red_axis(self) -> str:
        """The reduced axis as a reduction's keyword arguments (kept, as (1, BLOCK_C), when
        tiled; as (ROWS, 1) when a program takes several rows)."""
        if self.multirow:
            return "axis=1, keep_dims=True"
        return f"axis=0{', keep_dims=True' if self.tiled else ''}"

    def red(self, fn: str, x: str) -> str:
        """A reduction over the reduced axis."""
        return f"tl.{fn}({x}, {self.red_axis()})"

    def row_full(self, value: str, dtype: str) -> str:
        """A running row value's initial value."""
        if self.multirow:
            return f"tl.full([ROWS, 1], {value}, {dtype})"
        return f"tl.full([1, BLOCK_C], {value}, {dtype})" if self.tiled else value

    def acc_shape(self) -> str:
        if self.multirow:
            return "[ROWS, BLOCK_SIZE]"
        return "[BLOCK_SIZE, BLOCK_C]" if self.tiled else "[BLOCK_SIZE]"

    def col_step(self) -> list[str]:
        """The reduced coordinate and its mask for one block starting at `start`."""
        if self.tiled:  # EVEN: whole tiles only (the launcher checks), a mask folded away
            return ["cr = start + rows",
                    "if EVEN:",
                    "    cmask = tl.full([BLOCK_SIZE, BLOCK_C], 1, tl.int1)",
                    "else:",
                    f"    cmask = (cr < {'hi' if self.split else 'n_cols'}) & imask"]
        if self.multirow:
            return ["cr = start + cols", "cmask = (cr < n_cols) & rmask"]
        return ["cr = start + cols", "cmask = cr < n_cols"]

    def coord(self, k: int) -> str:
        if k == self.g.rdim:
            return self.col
        self.coords_needed.add(k)
        return f"c{k}"

    # -- a tiled reduction's flat offsets: two or more contiguous dims after the reduced one
    # read as `ci` (no coordinates divided out of it per element; Triton then sees BLOCK_C
    # contiguous addresses and vectorises the loads). With one such dim its coordinate is `ci`
    # already, and the outer coordinates are one division per program.
    def flat_inner(self) -> bool:
        return self.tiled and len(self.g.domain) - self.g.rdim - 1 >= 2

    def flat_offset(self, dm: DimMap) -> str | None:
        if not self.flat_inner() or dm != tuple(range(len(self.g.domain))):
            return None
        return f"(outer * n_cols + {self.col}) * n_inner + ci"

    def store_flat(self, n: Node, dm: DimMap) -> str | None:
        """A full-size output at the flat index; a row output (the reduced dim dropped, or
        kept as size 1) over every other dim of the domain in order at `outer * n_inner + ci`."""
        if not self.flat_inner():
            return None
        rd, r = self.g.rdim, len(self.g.domain)
        if [d for d in dm if d is not None] == [k for k in range(r) if k != rd] and \
                all(n.shape[j] == 1 for j, d in enumerate(dm) if d is None):
            return "outer * n_inner + ci"
        return super().store_flat(n, dm)

    def _inner_offsets(self, i: int, x: Node, per_dim: list[tuple[int | None, str | None]],
                       first: int = 0) -> list[tuple[str, str]]:
        """Under `X<i>_INNER <= rdim + 1`: x's offset over the dims after the reduced one (two
        or more, laid out as the domain's) is `ci`."""
        rd, r = self.g.rdim, len(self.g.domain)
        k = rd + 1
        if not self.flat_inner() or x.rank != r or k < first or \
                any(per_dim[j][0] != j for j in range(k, r)):
            return []
        if i not in self.inner_flags:
            self.inner_flags.append(i)
        terms = [t for j, (_d, t) in enumerate(per_dim) if j < k and t is not None]
        return [(f"X{i}_INNER <= {k}:  # laid out as the domain after the reduced dim", " + ".join(terms + ["ci"]))]

    def load_mask(self, dm: DimMap) -> str | None:
        if self.g.rdim in dm:
            return self.col_mask
        if self.tiled and any(d is not None and d > self.g.rdim for d in dm):
            return "imask"
        if self.multirow and any(d is not None for d in dm):
            return "rmask"
        return None

    def value(self, n: Node, scope: _Scope) -> Operand:
        if n.op not in REDUCTIONS:
            return super().value(n, scope)
        got = scope.get(("val", n))
        if got is not None:
            return got
        if not self.one_pass:
            raise EngineerError(f"internal: reduction {n.name} read before its pass")
        twin = self.twin(n)
        if twin is not None:
            op = self.value(twin, scope)
            scope.values[("val", n)] = op
            return op
        var = self.fresh("r")
        self.emit(f"{var} = {self.red(self.reduce_fn(n), self.masked_input(n, scope))}"
                  f"  # {n.origin}: {n.op} over dim {n.kwargs['dim']}")
        op = Operand(var, compute_type(n.dtype))
        scope.values[("val", n)] = op
        return op

    @staticmethod
    def reduce_fn(n: Node) -> str:
        return {"sum": "sum", "select": "sum", "amax": "max", "amin": "min"}[n.op]

    def masked_input(self, n: Node, scope: _Scope) -> str:
        x = n.args[0]
        if x in self.g.dmaps:
            xv = self.value(x, scope)
        elif x in self.part.generated:  # shape-only (`labels != -100` of an arange): recomputed
            xv = self.generated(x, _identity(x.rank), scope)
        else:
            xv = self.load(x, _identity(x.rank), scope)
        ct = compute_type(n.dtype)
        acc_t = ct if ct != "tl.int1" else "tl.int64"
        neutral = _NEUTRAL[n.op] if acc_t.startswith("tl.float") else {
            "sum": "0", "select": "0", "amax": "-9223372036854775807", "amin": "9223372036854775807"}[n.op]
        cond = "cmask"
        if n.op == "select":
            idx = self.operand(n.args[1], self.g.dmaps[n], n, scope)
            cond = f"cmask & (cr == {idx.as_type('tl.int64')})"
        return f"tl.where({cond}, {xv.as_type(acc_t)}, {neutral})"

    # -- the looped path's plan: which reductions share a loop -----------------------------
    def reads(self, v: Any, memo: dict[Node, frozenset[Node]] | None = None) -> frozenset[Node]:
        """The group's reductions whose values computing `v` reads (not through another one)."""
        memo = {} if memo is None else memo
        if not isinstance(v, Node) or v not in self.g.dmaps:
            return frozenset()
        if v.op in REDUCTIONS:
            return frozenset([v])
        if v not in memo:
            memo[v] = frozenset().union(*[self.reads(i, memo) for i in v.inputs()])
        return memo[v]

    def online_sum(self, s: Node) -> _OnlineSum | None:
        """`s` as an online sum (see `_OnlineSum`) when it has that exact form, else None."""
        dm = self.g.dmaps
        if s.op != "sum" or compute_type(s.dtype) != "tl.float32":
            return None
        f = s.args[0]
        if not isinstance(f, Node) or f not in dm or f.op not in ("exp", "exp2"):
            return None
        arg, scale = f.args[0], None
        if isinstance(arg, Node) and arg in dm and arg.op in ("mul", "div"):
            a, b = arg.args[0], arg.args[1]
            if _positive_constant(b):
                arg, scale = a, (arg.op, literal(float(b)))
            elif arg.op == "mul" and _positive_constant(a):
                arg, scale = b, ("mul", literal(float(a)))
        if not isinstance(arg, Node) or arg not in dm or arg.op != "sub":
            return None
        e, g = arg.args[0], arg.args[1]
        if not isinstance(e, Node) or not isinstance(g, Node) or g not in dm or self.g.rdim in dm[g]:
            return None
        if e not in dm and (e.rank != len(self.g.domain) or dm[arg] != _identity(e.rank)):
            return None  # a loaded e must be read at the same coordinates by the max and the sub
        peak = next((m for m in self.g.nodes if m.op == "amax" and m.args[0] is e
                     and compute_type(m.dtype) == "tl.float32"), None)
        if peak is None or self.reads(g) != {peak}:
            return None
        return _OnlineSum(s, peak, g, f.op, scale)

    def select_leaves(self, sel: Node) -> list[tuple[str, Node, DimMap]]:
        """The scope keys of the column-varying loads (and shape-only values) that a select's
        input is computed from: selecting those and evaluating the input after the loop gives
        the same value (exactly one column matches the index)."""
        out: list[tuple[str, Node, DimMap]] = []
        seen: set[Node] = set()

        def leaf(a: Node, adm: DimMap) -> None:
            key = ("gen" if a in self.part.generated else "load", a, adm)
            if self.g.rdim in adm and key not in out:
                out.append(key)

        def visit(n: Node) -> None:
            if n in seen or n.op in REDUCTIONS:
                return
            seen.add(n)
            if n.op in LAYOUT:
                visit(n.args[0])
                return
            for a in n.args[:_n_operands(n)]:
                if isinstance(a, Node):
                    if a in self.g.dmaps:
                        visit(a)
                    else:
                        leaf(a, _right_align(a, self.g.dmaps[n], n.rank))

        x = sel.args[0]
        if x in self.g.dmaps:
            visit(x)
        else:
            out.append(("load", x, _identity(x.rank)))
        return out

    def online_var(self, ss: Node) -> _OnlineVar | None:
        """`ss` as an online variance (see `_OnlineVar`) when it has that exact form, else None."""
        dm = self.g.dmaps
        if ss.op != "sum" or compute_type(ss.dtype) != "tl.float32":
            return None
        dev = _squared_deviation(ss)
        if dev is None or ss.args[0] not in dm or dev not in dm:
            return None
        e, m = dev.args[0], dev.args[1]
        if not isinstance(e, Node) or not isinstance(m, Node) or m not in dm or m.op != "div" or \
                not (isinstance(m.args[1], tuple) and m.args[1][0] == "numel"):
            return None
        s1 = m.args[0]
        if not isinstance(s1, Node) or s1 not in dm or s1.op != "sum" or s1.args[0] is not e or \
                s1.kwargs["dim"] != ss.kwargs["dim"] or compute_type(s1.dtype) != "tl.float32":
            return None
        if e not in dm and (e.rank != len(self.g.domain) or dm[dev] != _identity(e.rank)):
            return None  # a loaded e must be read at the same coordinates by both sums
        return _OnlineVar(ss, s1, e)

    def emit_online_var(self, v: _OnlineVar, scope: _Scope, inits: list[str]) -> None:
        """One loop step of an online variance: each lane of the block keeps its own count,
        mean and M2 (Welford), with no reduction across lanes inside the loop; the lanes are
        merged once after it (`finish_online_var`). A merge per block (three block-wide sums
        in every step) left level-2 92's group norm statistics, 2048 rows of 63504 elements,
        at 1.49 ms on an H200 where torch.compile's lane-wise Welford took 0.30 ms."""
        n, mean, m2 = (f"lane_{v.total.name}_{k}" for k in ("n", "mean", "m2"))
        inits += [f"{a} = tl.zeros({self.acc_shape()}, tl.float32)" for a in (n, mean, m2)]
        ev = (self.value(v.e, scope) if v.e in self.g.dmaps else
              self.load(v.e, _identity(v.e.rank), scope)).as_type("tl.float32")
        e, tot, delta = (self.fresh("w") for _ in range(3))
        self.emit(f"# {v.total.origin}: sum of squared deviations, each lane's Welford step")
        # The loop walks the row in order and only its last block is partial, so a lane's
        # count at the step that reads it is the step's number: one reciprocal per step
        # replaces a division per element.
        step = f"lane_{v.total.name}_step"
        inits.append(f"{step} = 0.0")
        self.emit(f"{step} += 1.0")
        if self.tiled:
            # Whole tiles (EVEN): no mask either. The statistics pass of a 65536x4096 float32
            # column standardisation on an H200: 0.2465 ms against 0.2600 (a division per
            # element) and 0.3240 (masked, division per element); torch.compile's 0.2626
            # (2026-11-29, benchmarks/column_stats_gpu.py).
            self.emit("if EVEN:")
            self.emit(f"    {delta} = {ev} - {mean}")
            self.emit(f"    {mean} = {mean} + {delta} * (1.0 / {step})")
            self.emit(f"    {m2} = {m2} + {delta} * ({ev} - {mean})")
            self.emit("else:")
            self.indent += 1
        self.emit(f"{e} = tl.where(cmask, {ev}, 0.0)")
        self.emit(f"{tot} = {n} + cmask.to(tl.float32)")
        self.emit(f"{delta} = {e} - {mean}")
        self.emit(f"{mean} = {mean} + tl.where(cmask, {delta} * (1.0 / {step}), 0.0)")
        self.emit(f"{m2} = {m2} + tl.where(cmask, {delta} * ({e} - {mean}), 0.0)")
        self.emit(f"{n} = {tot}")
        if self.tiled:
            self.indent -= 1

    def finish_online_var(self, v: Node) -> str:
        """After the loop: the lanes of online variance `v` merged; its M2's name."""
        self.helpers.add("_welford_combine")
        lanes = ", ".join(f"lane_{v.name}_{k}" for k in ("mean", "m2", "n"))
        out = ", ".join(f"acc_{v.name}_{k}" for k in ("mean", "m2", "n"))
        if self.tiled:  # whole tiles: each lane's count is the steps taken
            self.emit("if EVEN:")
            self.emit(f"    lane_{v.name}_n = tl.zeros({self.acc_shape()}, tl.float32) + lane_{v.name}_step")
        self.emit(f"{out} = tl.reduce(({lanes}), {self.red_axis()}, combine_fn=_welford_combine)"
                  f"  # {v.origin}: the lanes merged")
        return f"acc_{v.name}_m2"

    def loop_levels(self, online: dict[Node, _OnlineSum],
                    welford: dict[Node, _OnlineVar] | None = None) -> dict[Node, int]:
        """Which loop over the row each reduction is accumulated in (1 = the first).

        A reduction joins the first loop after every reduction it reads inside the loop; what
        it reads only after the loop may be in the same one. An online sum reads e inside
        (like its max) and g after; a select reads its index inside and its input after (the
        input is evaluated once, on the selected elements)."""
        eff: dict[Node, int] = {}
        for n in self.g.nodes:
            if n.op not in REDUCTIONS:
                continue
            if n in online:
                inside, after = self.reads(online[n].peak.args[0]), self.reads(online[n].shift)
            elif welford and n in welford:
                inside, after = self.reads(welford[n].e), frozenset()
            elif n.op == "select":
                inside, after = self.reads(n.args[1]), self.reads(n.args[0])
            else:
                inside, after = self.reads(n.args[0]), frozenset()
            eff[n] = max([1] + [eff[r] + 1 for r in inside] + [eff[r] for r in after])
        return eff

    def emit_online(self, peak: Node, sums: list[_OnlineSum], scope: _Scope, inits: list[str]) -> None:
        """One loop step of an amax and the online sums that it stabilises, per block: the
        block's max first, then one f per element against the running max (scalars)."""
        acc_m = f"acc_{peak.name}"
        inits.append(f"{acc_m} = {self.row_full(_NEG_INF, 'tl.float32')}")
        inits += [f"acc_{o.total.name} = {self.row_full('0.0', 'tl.float32')}" for o in sums]
        e = self.fresh("e")
        self.emit(f"{e} = {self.masked_input(peak, scope)}")
        self.emit("# online (single-pass) max/sum per block: the running max takes the block's max, the")
        self.emit("# running sum is rescaled by f(c * (old max - new max)) and gains the block's terms;")
        self.emit("# while the max is -inf it shifts by 0 instead (no -inf - -inf = NaN)")
        # Per block, not per lane: cross-entropy's 32000-wide float32 rows ran 0.1924 ms (91.6%
        # of the floor) with 4096-wide blocks and 8 warps vs 0.1957 ms for a running max and sum
        # per lane (two f per element) at its best configuration, both with the selected column's
        # one load (H100, 2026-11-23, call 18,
        # benchmarks/xent_gpu.py). One f per lane and element, with a select for which side
        # grew, was slower still (0.226 ms, call 16): the loop is bound by its ALU work.
        m_new, m_safe = self.fresh("m"), self.fresh("m")
        self.emit(f"{m_new} = tl.maximum({acc_m}, {self.red('max', e)})  # {peak.origin}: amax (running)")
        self.emit(f"{m_safe} = tl.where({m_new} == {_NEG_INF}, 0.0, {m_new})")
        for o in sums:
            acc = f"acc_{o.total.name}"
            terms = self.red("sum", f"tl.{o.fn}({o.arg(e + ' - ' + m_safe)})")
            self.emit(f"{acc} = {acc} * tl.{o.fn}({o.arg(f'{acc_m} - {m_safe}')}) + "
                      f"{terms}  # {o.total.origin}: sum (running)")
        self.emit(f"{acc_m} = {m_new}")

    def emit_select(self, sel: Node, idx: Operand, scope: _Scope,
                    inits: list[str]) -> list[tuple[Any, str | None, Operand]]:
        """One loop step of a select: pick the elements its input is computed from at the
        selected column `idx`. Returns (scope key, accumulator, None for a constant or DIRECT
        for an input loaded once after the loop, operand or the index)."""
        picked: list[tuple[Any, str | None, Operand]] = []
        hit = ""
        for i, key in enumerate(self.select_leaves(sel)):
            kind, node, dm = key
            if kind == "load":  # an input: one load at the selected column after the loop
                picked.append((key, DIRECT, idx))
                continue
            if not hit:
                hit = self.fresh("hit")
                self.emit(f"{hit} = cmask & (cr == {idx.as_type('tl.int64')})  # {sel.origin}: the selected column")
            op = self.generated(node, dm, scope)
            if op.ctype is None:
                picked.append((key, None, op))
                continue
            acc_t = op.ctype if is_float_type(op.ctype) else "tl.int64"
            acc = f"acc_{sel.name}_{i}"
            inits.append(f"{acc} = tl.zeros([BLOCK_SIZE], {acc_t})")
            zero = "0.0" if is_float_type(acc_t) else "0"
            self.emit(f"{acc} += tl.where({hit}, {op.as_type(acc_t)}, {zero})  # {sel.origin}: {node.name} there")
            picked.append((key, acc, op))
        return picked

    def finish_select(self, sel: Node, picked: list[tuple[Any, str | None, Operand]], top: _Scope) -> Operand:
        """After the loop: the select's input evaluated on the picked elements."""
        sub = _Scope(top)
        for key, acc, op in picked:
            if acc is None:
                sub.values[key] = op
                continue
            if acc == DIRECT:
                # one load at the selected column instead of a compare-select-add per element
                # in the loop; an index outside the row reads 0, as no column matching would
                _, node, dm = key
                col, ok = self.fresh("ci"), self.fresh("cimask")
                self.emit(f"{col} = {op.as_type('tl.int64')}  # {sel.origin}: the selected column")
                self.emit(f"{ok} = ({col} >= 0) & ({col} < n_cols)")
                self.col, self.col_mask = col, ok
                try:
                    sub.values[key] = self.load(node, dm, _Scope(top))
                finally:
                    self.col, self.col_mask = "cr", "cmask"
                continue
            r = self.fresh("r")
            self.emit(f"{r} = tl.sum({acc}, axis=0)")
            ct = op.ctype or "tl.float32"
            acc_t = ct if is_float_type(ct) else "tl.int64"
            text = f"({r} != 0)" if ct == "tl.int1" else (r if ct == acc_t else f"{r}.to({ct})")
            sub.values[key] = Operand(text, ct)
        x = sel.args[0]
        xv = self.value(x, sub) if x in self.g.dmaps else sub.values[("load", x, _identity(x.rank))]
        ct = compute_type(sel.dtype)
        var = self.fresh("r")
        self.emit(f"{var} = {xv.as_type(ct if ct != 'tl.int1' else 'tl.int64')}  # {sel.origin}: select over "
                  f"dim {sel.kwargs['dim']} (its input on the selected elements)")
        return Operand(var, ct)


def reduction_kernel(group: Group, part: Partition, sym_code: Any, name: str) -> KernelSource:
    w = _ReductionWriter(group, part, sym_code)
    full = [o for o in group.outputs if group.rdim in group.dmaps[o]]
    rows = [o for o in group.outputs if group.rdim not in group.dmaps[o]]
    outs = {o: i for i, o in enumerate(group.outputs)}
    # one pass: the whole row is in registers
    w.indent = 2
    w.one_pass = True
    scope = _Scope()
    for o in full:
        w.store(o, outs[o], scope, "cmask")
    for o in rows:
        w.store(o, outs[o], scope, _row_mask(w))
    one = w.lines
    # looped: one loop per level of `loop_levels` (an amax, the online sums it stabilises, the
    # selects and the other reductions that only need the row share one), then one loop that
    # writes the full-size outputs
    w.lines = []
    w.one_pass = False
    top = _Scope()
    twins = {n: t for n in group.nodes if n.op in ("sum", "amax", "amin") and (t := w.twin(n)) is not None}
    online = {n: o for n in group.nodes if n not in twins and (o := w.online_sum(n)) is not None}
    sums_of: dict[Node, list[_OnlineSum]] = {}
    for o in online.values():
        sums_of.setdefault(o.peak, []).append(o)
    welford = {n: v for n in group.nodes if n not in twins and (v := w.online_var(n)) is not None}
    vars_of: dict[Node, list[_OnlineVar]] = {}
    for v in welford.values():
        vars_of.setdefault(twins.get(v.mean_sum, v.mean_sum), []).append(v)
    levels = w.loop_levels(online, welford)
    w.split = w.tiled and _splittable(group, twins, online, welford, levels)
    if w.split:
        w.helpers.add("_tiled_split")
    loop_range = "range(lo, hi, BLOCK_SIZE)" if w.split else "range(0, n_cols, BLOCK_SIZE)"
    finals: list[tuple[str, Node, tuple[str, ...]]] = []
    """What a split's partial program stores and its combining program reads back, per
    reduction: ("sum" | "amax" | "amin", node, (its value's name,)) or ("welford", node,
    (mean, m2, n names))."""
    for level in sorted(set(levels.values())):
        reds = [n for n in group.nodes if levels.get(n) == level]
        # a select's index is a row value: read once, before the loop
        index = {n: w.operand(n.args[1], group.dmaps[n], n, top) for n in reds if n.op == "select"}
        at, inits = len(w.lines), []
        w.emit(f"for start in {loop_range}:")
        w.indent += 1
        for line in w.col_step():
            w.emit(line)
        loop = _Scope(top)
        picked = {}
        for red in reds:
            if red in online or red in welford or red in twins:
                continue  # accumulated beside its max / its mean's sum / as its twin
            if red in sums_of:
                w.emit_online(red, sums_of[red], loop, inits)
            elif red.op == "select":
                picked[red] = w.emit_select(red, index[red], loop, inits)
            else:
                acc_t = "tl.float32" if compute_type(red.dtype).startswith("tl.float") else "tl.int64"
                neutral = _NEUTRAL[red.op] if acc_t == "tl.float32" else "0"
                inits.append(f"acc_{red.name} = tl.zeros({w.acc_shape()}, {acc_t})" if red.op == "sum" else
                             f"acc_{red.name} = tl.full({w.acc_shape()}, {neutral}, {acc_t})")
                x = w.masked_input(red, loop)
                if red.op == "sum":
                    w.emit(f"acc_{red.name} += {x}  # {red.origin}: {red.op}")
                else:
                    fn = "maximum" if red.op == "amax" else "minimum"
                    w.emit(f"acc_{red.name} = tl.{fn}(acc_{red.name}, {x})  # {red.origin}: {red.op}")
                for v in vars_of.get(red, []):
                    w.emit_online_var(v, loop, inits)
        w.indent -= 1
        w.lines[at:at] = ["    " * w.indent + line for line in inits]
        m_safe: dict[Node, str] = {}
        for red in reds:  # in graph order: what a reduction reads after the loop is ready
            if red in picked:
                top.values[("val", red)] = w.finish_select(red, picked[red], top)
                continue
            if red in welford:
                top.values[("val", red)] = Operand(w.finish_online_var(red), "tl.float32")
                finals.append(("welford", red, tuple(f"acc_{red.name}_{k}" for k in ("mean", "m2", "n"))))
                continue
            if red in twins:
                top.values[("val", red)] = top.values[("val", twins[red])]
                continue
            var = w.fresh("r")
            if red in online:
                o = online[red]
                ms = m_safe[o.peak]
                w.emit(f"{var} = acc_{red.name}  # {red.origin}: the sum at the row's max")
                g = w.value(o.shift, top).as_type("tl.float32")
                shift, total = w.fresh("r"), w.fresh("r")
                w.emit(f"{shift} = tl.{o.fn}({o.arg(f'{ms} - {g}')})  # {red.origin}: the shift to the "
                       "model's own row value (1.0 where that is the max)")
                # a +inf max: the sum is that one term, f(c * (inf - g)), +inf (logsumexp's g = 0)
                # or NaN (g = the max, as in softmax), as PyTorch computes it
                w.emit(f'{total} = tl.where({ms} == float("inf"), {shift}, {var} * {shift})  # {red.origin}: sum')
                top.values[("val", red)] = Operand(total, compute_type(red.dtype))
                continue
            if red in sums_of:  # the running max is a scalar already
                w.emit(f"{var} = acc_{red.name}  # {red.origin}: the row's max")
            else:
                w.emit(f"{var} = {w.red(w.reduce_fn(red), f'acc_{red.name}')}")
                finals.append((red.op, red, (var,)))
            top.values[("val", red)] = Operand(var, compute_type(red.dtype))
            if red in sums_of:
                ms = w.fresh("m")
                w.emit(f"{ms} = tl.where({var} == {_NEG_INF}, 0.0, {var})  # a row of only -inf: shift by 0")
                m_safe[red] = ms
    stats, w.lines = w.lines, []
    if full:
        w.emit(f"for start in {loop_range}:")
        w.indent += 1
        for line in w.col_step():
            w.emit(line)
        loop = _Scope(top)
        for o in full:
            w.store(o, outs[o], loop, "cmask")
        w.indent -= 1
    for o in rows:  # a split's row values are stored by its first program only (a select, not
        # `imask & (ps == 0)`: triton 3.9.0's interpreter widens a block mask and-ed with a scalar
        # condition to int64 and then refuses it as a mask)
        w.store(o, outs[o], top, "tl.where(ps == 0, imask, False)" if w.split else _row_mask(w))
    looped = _split_phases(w, finals, stats, w.lines) if w.split else stats + w.lines
    r = len(group.domain)
    sizes = ["n_cols"] + [f"D{k}" for k in range(r) if k != group.rdim]
    if w.inner_flags:
        w.helpers.add("_laid_from")
    if w.tiled:
        head = tile_head(group, w.coords_needed, even=True)
        if w.split:
            head += _SPLIT_HEAD
        head += ["if ONE_PASS:  # the reduced extent fits one tile: read once, keep it in registers",
                 "    cr = rows", "    cmask = (cr < n_cols) & imask"]
        body = one + ["    else:  # a long row along the reduced dim: loops over (BLOCK_SIZE, BLOCK_C) tiles, then the outputs"]
        return _finish_simple(w, group, part, name, "tiled_reduction", head, body + looped, sizes,
                              _tiled_tunables(group), _tiled_default(group, split=w.split),
                              extra_constexpr=["ONE_PASS", "EVEN"] + (["PHASE", "SPLIT_P"] if w.split else []),
                              blocks=["BLOCK_SIZE", "BLOCK_C"],
                              split_slots=sum(3 if kind == "welford" else 1 for kind, _, _ in finals)
                              if w.split else 0)
    if w.multirow:
        others = [f"D{k}" for k in range(r) if k != group.rdim]
        head = ["row = (tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS))[:, None]",
                f"rmask = row < {' * '.join(others) or '1'}  # ROWS rows per program"]
        head += _decompose("row", sorted(w.coords_needed), r, "c", skip=group.rdim)
        head += ["cols = tl.arange(0, BLOCK_SIZE)[None, :]",
                 "if ONE_PASS:  # the rows fit one block: read once, keep them in registers",
                 "    cr = cols", "    cmask = (cr < n_cols) & rmask"]
        body = one + ["    else:  # a long row (ROWS is 1): loops over column blocks (online max/sum), "
                      "then the outputs"] + looped
        return _finish_simple(w, group, part, name, "reduction", head, body, sizes,
                              _reduction_tunables(group), _reduction_default(group),
                              extra_constexpr=["ONE_PASS", "ROWS"])
    head = ["row = tl.program_id(0).to(tl.int64)"]
    head += _decompose("row", sorted(w.coords_needed), r, "c", skip=group.rdim)
    head += ["cols = tl.arange(0, BLOCK_SIZE)",
             "if ONE_PASS:  # the row fits one block: read once, keep it in registers",
             "    cr = cols", "    cmask = cr < n_cols"]
    body = one + ["    else:  # a long row: loops over column blocks (online max/sum), then the outputs"] + looped
    return _finish_simple(w, group, part, name, "reduction", head, body, sizes,
                          _reduction_tunables(group), _reduction_default(group),
                          extra_constexpr=["ONE_PASS"])


_SPLIT_HEAD = [
    "ps = tl.program_id(1)  # this program's split of the reduced dim (PHASE 0: the only one)",
    "chunk = tl.cdiv(tl.cdiv(n_cols, n_split), BLOCK_SIZE) * BLOCK_SIZE",
    "lo = ps * chunk",
    "hi = tl.minimum(lo + chunk, n_cols)",
    "pcol = outer * n_inner + ci  # the partials' column",
]
"""The head of a tiled reduction that may split its reduced dim across programs: the rows
[lo, hi) this program walks (the whole extent when n_split is 1)."""


def _splittable(group: Group, twins: dict[Node, Node], online: dict[Node, Any],
                welford: dict[Node, Any], levels: dict[Node, int]) -> bool:
    """Whether a tiled reduction may split its reduced dim across programs: one loop level,
    and every reduction a float32 sum, max or min or an online variance (whose partials
    combine exactly: sums add, Welford triples merge), none an online softmax sum or a
    select."""
    if online or len(set(levels.values())) > 1:
        return False
    for n in group.nodes:
        if n.op not in REDUCTIONS or n in twins or n in welford:
            continue
        if n.op not in ("sum", "amax", "amin") or \
                not compute_type(n.dtype).startswith("tl.float"):
            return False
    return any(n.op in REDUCTIONS for n in group.nodes)


def _split_phases(w: _ReductionWriter, finals: list[tuple[str, Node, tuple[str, ...]]],
                  stats: list[str], outputs: list[str]) -> list[str]:
    """The looped part of a splittable tiled reduction as three launches of one kernel
    (PHASE, a constexpr): 0, unsplit, as before; 1, each split's partial statistics of its rows
    [lo, hi) stored per (slot, split, column); 2, each split combines all splits' partials into
    the statistics (the same names the loop would have set) and writes its own rows."""
    pad = "    "
    store, combine = [], []
    slot = 0
    for kind, n, names in finals:
        for name in names:
            off = f"part_ptr + ({slot} * n_split + ps).to(tl.int64) * n_all + pcol"
            store.append(f"tl.store({off}, {name}, mask=imask)  # {n.origin}: this split's {kind}")
            slot += 1
        first = slot - len(names)
        loads = [f"tl.load(part_ptr + ({first + i} * n_split + sp).to(tl.int64) * n_all + pcol, mask=pmask, "
                 f"other={_NEUTRAL.get(kind, '0.0') if kind != 'welford' else '0.0'})"
                 for i in range(len(names))]
        if kind == "welford":
            combine.append(f"{', '.join(names)} = tl.reduce(({', '.join(loads)}), axis=0, "
                           f"keep_dims=True, combine_fn=_welford_combine)  # {n.origin}: the splits merged")
        else:
            fn = {"sum": "sum", "amax": "max", "amin": "min"}[kind]
            combine.append(f"{names[0]} = tl.{fn}({loads[0]}, axis=0, keep_dims=True)"
                           f"  # {n.origin}: the splits' {kind}")
    out = [pad * 2 + "if PHASE == 2:  # the splits' partials combined",
           pad * 3 + "sp = tl.arange(0, SPLIT_P)[:, None]",
           pad * 3 + "pmask = (sp < n_split) & imask"]
    out += [pad * 3 + line for line in combine]
    out += [pad * 2 + "else:"] + [pad + line for line in stats]
    out += [pad * 3 + "if PHASE == 1:  # this split's partials, for PHASE 2"]
    out += [pad * 4 + line for line in store]
    out += [pad * 2 + "if PHASE != 1:"] + [pad + line for line in outputs]
    return out


def _row_mask(w: _ReductionWriter) -> str | None:
    """The mask of a per-row output's store."""
    return "imask" if w.tiled else "rmask" if w.multirow else None


def _decompose_dims(flat: str, needed: list[int], dims: list[int], prefix: str) -> list[str]:
    """Coordinates of `needed` from a flat row-major index over `dims` (in order)."""
    if not needed:
        return []
    lo = min(dims.index(k) for k in needed)
    lines = [f"rem = {flat}"]
    for pos in range(len(dims) - 1, lo - 1, -1):
        k = dims[pos]
        if pos == 0:
            lines.append(f"{prefix}{k} = rem")
        else:
            lines.append(f"{prefix}{k} = rem % D{k}")
            if pos > lo:
                lines.append(f"rem = rem // D{k}")
    return lines


TILE_ELEMENTS = 4096
"""Elements per (BLOCK_SIZE, BLOCK_C) tile of an outer reduction when it loops: 16 KB of
float32 per step, what a row kernel's 4096-wide blocks hold (LOOP_DEFAULT)."""
TILE_ONE_PASS = 8192
"""The largest tile kept in registers whole (a reduced extent read once)."""
TILE_PROGRAMS = 264
"""Programs an outer reduction aims for: two per H100 SM (132); BLOCK_C halves (down to 16)
until the grid has that many, since one program walks the whole reduced extent."""


def tile_head(group: Group, coords_needed: set[int], even: bool = False) -> list[str]:
    """The head of a kernel over (BLOCK_SIZE, BLOCK_C) tiles of a non-innermost reduced dim:
    the program's block of the contiguous dims after it (`ci`, `imask`), the coordinates it
    needs (`c<k>`) and the tile's row offsets (`rows`). `even`: under the EVEN constexpr (the
    launcher's: BLOCK_C divides the contiguous dims, each split's rows are whole tiles) the
    column mask is a constant, which Triton folds out of every load, store and select."""
    rd, r = group.rdim, len(group.domain)
    assert rd is not None
    inner = list(range(rd + 1, r))
    head = ["pid = tl.program_id(0).to(tl.int64)",
            f"n_inner = {' * '.join(f'D{k}' for k in inner)}  # the contiguous dims after the reduced one",
            "n_iblocks = tl.cdiv(n_inner, BLOCK_C)",
            "outer = pid // n_iblocks",
            "ci = ((pid % n_iblocks) * BLOCK_C + tl.arange(0, BLOCK_C))[None, :]",
            "imask = ci < n_inner"]
    if even:
        head += ["if EVEN:  # whole tiles only (the launcher checks the sizes): no mask to apply",
                 "    imask = tl.full([1, BLOCK_C], 1, tl.int1)"]
    needed = sorted(coords_needed)
    head += _decompose_dims("ci", [k for k in needed if k > rd], inner, "c")
    head += _decompose_dims("outer", [k for k in needed if k < rd], list(range(rd)), "c")
    return head + ["rows = tl.arange(0, BLOCK_SIZE)[:, None]"]


def _tiled_default(group: Group, split: bool = False) -> dict[str, int]:
    """BLOCK_C: 64 contiguous elements per reduced index (256-byte float32 rows), fewer when
    the grid would have under TILE_PROGRAMS programs (unless the kernel splits its reduced dim
    across programs: `split`); BLOCK_SIZE: the whole reduced extent when the tile fits
    TILE_ONE_PASS, else TILE_ELEMENTS / BLOCK_C rows per step."""
    rd = group.rdim
    n_cols = group.domain[rd]
    inner, outer = math.prod(group.domain[rd + 1:]), math.prod(group.domain[:rd])
    block_c = min(64, max(16, _next_pow2(inner)))
    # a split needs SPLIT_MIN_TILES (4) tiles per split and at least two splits (_tiled_split)
    splits = split and n_cols >= 8 * (TILE_ELEMENTS // block_c)
    while not splits and block_c > 16 and outer * -(-inner // block_c) < TILE_PROGRAMS:
        block_c //= 2
    rows = max(16, _next_pow2(n_cols))
    if rows * block_c > TILE_ONE_PASS:
        rows = max(16, TILE_ELEMENTS // block_c)
    return {"BLOCK_SIZE": rows, "BLOCK_C": block_c, "num_warps": 8 if rows * block_c >= 8192 else 4}


def _tiled_tunables(group: Group) -> dict[str, list[int]]:
    default = _tiled_default(group)
    return {"BLOCK_SIZE": sorted({16, 32, 64, 128, 256, default["BLOCK_SIZE"]}),
            "BLOCK_C": sorted({16, 32, 64, 128, default["BLOCK_C"]}), "num_warps": [4, 8]}


ROW_BLOCK = 16384
"""The longest row a reduction keeps in registers in one block (the generated file's
MAX_ROW_BLOCK); longer rows loop."""

ROW_TILE = 2048
"""Elements of the (ROWS, BLOCK_SIZE) tile a row reduction's program takes when its rows are
narrower (the generated file's ROW_TILE): rows of 2048 or more keep a program each (every
bundled row kernel's figure stands), a 64-wide row shares one with 31 others."""

LOOP_DEFAULT = {"BLOCK_SIZE": 4096, "num_warps": 8}
"""Rows longer than one block (ROW_BLOCK) loop: cross_entropy's 32000-wide float32 rows ran
0.1924 ms with 4096-wide blocks and 8 warps (block-wise online max/sum; 2048 x 8: 0.1928,
1024 x 8: 0.2138, 1024 x 16: 0.3415; H100, 2026-11-23, call 18, benchmarks/xent_gpu.py)."""


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _row_width(group: Group) -> int:
    return group.domain[group.rdim] if group.rdim is not None else 0


def _one_pass_warps(n_cols: int) -> int:
    """Warps for a row held in registers: about 32 row elements per thread, 4 to 16 warps.
    H100, 2026-11-24 (call 20, benchmarks/tunables_gpu.py): layernorm_gelu's 4096-wide bf16
    rows 0.1016 ms with 4 warps vs 0.1078 (8) and 0.1179 (2); causal_softmax's 2048-wide rows
    0.7145 ms with 4 vs 0.7858 (8); softmax's 8192 fp32 rows 0.1870 ms with 8, within 1% of
    the best (16). The file is generated at the traced width; the accelerator tunes from here."""
    return max(4, min(16, _next_pow2(n_cols) // 1024))


LOOP_VARIANCE_DEFAULT = {"BLOCK_SIZE": 2048, "num_warps": 8}
"""Rows longer than one block whose kernel keeps an online variance (three Welford lanes
beside the sum): group norm statistics of float32 rows, H200, 2026-12-02
(benchmarks/online_var_gpu.py, one reciprocal per step): 1024 x 59400 0.098 ms with 2048 x 8
against 0.197 (4096 x 8) and 0.124 (2048 x 4); 2048 x 63504 0.168 against 0.170 and 0.164."""


def _squared_deviation(ss: Node) -> Node | None:
    """The deviation `x - m` when `ss` sums its square ((x - m) * (x - m) or square(x - m)): a
    variance's sum; else None."""
    sq = ss.args[0] if ss.op == "sum" and ss.args else None
    if not isinstance(sq, Node) or not (
            (sq.op == "mul" and sq.args[0] is sq.args[1]) or sq.op == "square"):
        return None
    dev = sq.args[0]
    return dev if isinstance(dev, Node) and dev.op == "sub" else None


def _keeps_variance(group: Group) -> bool:
    """Whether a sum in `group` adds squared deviations: a variance."""
    return any(_squared_deviation(n) is not None for n in group.nodes)


def _reduction_default(group: Group) -> dict[str, int]:
    """The launch default at the traced row width: the whole row in one block, or
    LOOP_DEFAULT (LOOP_VARIANCE_DEFAULT with a variance) for longer rows."""
    n_cols = _row_width(group)
    if n_cols > ROW_BLOCK:
        return dict(LOOP_VARIANCE_DEFAULT if _keeps_variance(group) else LOOP_DEFAULT)
    return {"BLOCK_SIZE": ROW_BLOCK, "num_warps": _one_pass_warps(n_cols)}


def _reduction_tunables(group: Group) -> dict[str, list[int]]:
    """The accelerator's search space at the traced row width, holding only values that
    launch different kernels there. A row in one block has nothing to gain from a smaller
    block (it would loop, reading the row up to three times), so only its warps vary:
    those giving each thread 1 to 64 of the row's elements (a 64-wide row: 1 or 2 warps
    besides the default 4)."""
    n_cols = _row_width(group)
    if n_cols > ROW_BLOCK:
        return {"BLOCK_SIZE": [1024, 2048, 4096, 8192, 16384], "num_warps": [4, 8, 16]}
    block = max(16, _next_pow2(n_cols))
    warps = [w for w in (1, 2, 4, 8, 16, 32) if 1 <= block // (32 * w) <= 64]
    default = _one_pass_warps(n_cols)
    return {"num_warps": sorted(set(warps) | {default})}
