"""Triton source for one fusion group: the `@triton.jit` kernel and its launcher.

Three templates share one expression writer (`_Writer`):
- pointwise: a flat 1-D walk of the domain; coordinates are decomposed from the flat index
  only where a broadcast or strided operand needs them (a contiguous full-size operand is
  loaded at the flat index, a constexpr fast path chosen at launch);
- reduction: one program per row of the reduced dim; when the row fits one block everything
  stays in registers (`ONE_PASS`), otherwise each reduction level is a loop over column
  blocks and the outputs are written by a last loop. A softmax-style `sum(exp(e - max))`
  shares its max's loop (online max/sum, `_OnlineSum`), and a select (gather) picks the
  elements its input is computed from and evaluates it after the loop, so cross-entropy's
  long rows are read once;
- matmul: the grouped-ordering tile loop of the Triton tutorial, fp32 accumulator, then the
  pointwise epilogue on the accumulator tile before the one store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition
from kopt.phases.engineers.offline.graph import LAYOUT, MATMUL, REDUCTIONS, Node, Sym
from kopt.phases.engineers.offline.pointwise import (
    TL_TYPES,
    Operand,
    compute_type,
    emit_pointwise,
    is_float_type,
    literal,
)

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


@dataclass
class KernelSource:
    """One group's emitted code and what the candidate file needs to know about it."""

    name: str
    """Kernel function name (`_g0_layer_norm_gelu_kernel`)."""
    launcher: str
    """Launcher function name (`_launch_g0`)."""
    kind: str
    kernel_code: str
    launcher_code: str
    call_args: list[str]
    """Forward-side expressions passed to the launcher, in order."""
    fuses: list[str]
    """Graph nodes this kernel computes."""
    tunables: dict[str, list[Any]]
    config: dict[str, Any]
    helpers: set[str] = field(default_factory=set)


def kernel_label(group: Group) -> str:
    seen: list[str] = []
    # a matmul's kernel is named after its product first (a sunk epilogue precedes it in graph order)
    first = [group.anchor] if group.anchor is not None else []
    for n in first + [m for m in group.nodes if m is not group.anchor]:
        base = re.sub(r"(_\d+)+$", "", n.origin or n.name)
        base = base.lstrip("_").replace("native_", "")
        if base in ("view", "unsqueeze", "squeeze", "expand", "permute", "getitem", "clone", "alias"):
            continue
        if base not in seen:
            seen.append(base)
    label = "_".join(seen[:3]) or group.kind
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)[:40]


class _Scope:
    def __init__(self, parent: _Scope | None = None) -> None:
        self.parent = parent
        self.values: dict[Any, Operand] = {}

    def get(self, key: Any) -> Operand | None:
        s: _Scope | None = self
        while s is not None:
            if key in s.values:
                return s.values[key]
            s = s.parent
        return None


class _Writer:
    """Emits the body of one kernel: loads, expressions, reductions and stores."""

    def __init__(self, group: Group, part: Partition, sym_code: Any) -> None:
        self.g = group
        self.part = part
        self.sym_code = sym_code
        self.lines: list[str] = []
        self.indent = 1
        self.helpers: set[str] = set()
        self.counter = 0
        self.coords_needed: set[int] = set()
        self.scalar_args: list[tuple[str, str]] = []
        """(kernel param, forward expression) for run-time scalars."""
        self.input_index = {n: i for i, n in enumerate(group.inputs)}
        self.dim_sources: dict[int, tuple[int, int]] = {}
        self.contig_flags: list[int] = []

    # -- helpers ------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def coord(self, k: int) -> str:  # overridden per template
        raise NotImplementedError

    def load_mask(self, dm: DimMap) -> str | None:
        raise NotImplementedError

    def flat_offset(self, dm: DimMap) -> str | None:
        return None

    # -- operands -----------------------------------------------------------------------
    def load(self, x: Node, dm: DimMap, scope: _Scope) -> Operand:
        key = ("load", x, dm)
        got = scope.get(key)
        if got is not None:
            return got
        i = self.input_index[x]
        for j, d in enumerate(dm):
            if d is not None and x.shape[j] == self.g.domain[d] and x.shape[j] != 1:
                self.dim_sources.setdefault(d, (i, j))
        terms = [f"{self.coord(d)} * x{i}_s{j}" for j, d in enumerate(dm) if d is not None]
        offset = " + ".join(terms) if terms else "0"
        mask = self.load_mask(dm) if terms else None  # a broadcast scalar: one unmasked load
        m = f", mask={mask}, other=0" if mask else ""
        var = self.fresh("x")
        flat = self.flat_offset(dm) if x.rank == len(self.g.domain) else None
        if flat is not None:
            if i not in self.contig_flags:
                self.contig_flags.append(i)
            self.emit(f"if X{i}_CONTIG:  # contiguous and full-size: load at the flat index")
            self.emit(f"    {var} = tl.load(x{i}_ptr + {flat}{m})")
            self.emit("else:")
            self.emit(f"    {var} = tl.load(x{i}_ptr + {offset}{m})")
        else:
            self.emit(f"{var} = tl.load(x{i}_ptr + {offset}{m})")
        ct = compute_type(x.dtype)
        if TL_TYPES[x.dtype] != ct:
            self.emit(f"{var} = {var}.to({ct})")
        op = Operand(var, ct)
        scope.values[key] = op
        return op

    def generated(self, n: Node, dm: DimMap, scope: _Scope) -> Operand:
        """A shape-only value recomputed from coordinates."""
        key = ("gen", n, dm)
        got = scope.get(key)
        if got is not None:
            return got
        ct = compute_type(n.dtype)
        if n.op == "full":
            v = n.args[0]
            if isinstance(v, Sym):
                return self.scalar(v)
            if ct == "tl.int1":
                v = bool(v)
            elif ct.startswith("tl.float"):
                v = float(v)
            else:
                v = int(v)
            return Operand(literal(v), None, v)
        if n.op == "arange":
            start, step = (self.scalar(a).text if isinstance(a, Sym) else literal(a) for a in n.args[:2])
            d = dm[0] if dm else None
            text = start if d is None else f"({self.coord(d)} * {step} + {start})"
            op = Operand(text, "tl.int64" if ct != "tl.float32" else None, None)
            if ct == "tl.float32":
                op = Operand(f"({text}).to(tl.float32)" if d is not None else f"{text} * 1.0", "tl.float32")
        elif n.op in ("unsqueeze", "squeeze", "permute", "expand"):
            x = n.args[0]
            op = self.generated(x, _back_layout(n, dm), scope)
            scope.values[key] = op
            return op
        else:
            ops = [self.operand(a, dm, n, scope) for a in n.args if not isinstance(a, torch.dtype)]
            text = emit_pointwise(n.op, ops, n.dtype, n.args[1:], self.helpers)
            var = self.fresh("s")
            self.emit(f"{var} = {text}  # {n.origin} (from shapes)")
            op = Operand(var, ct)
        scope.values[key] = op
        return op

    def scalar(self, s: Sym) -> Operand:
        name = f"sym{len(self.scalar_args)}"
        self.scalar_args.append((name, self.sym_code(s)))
        return Operand(name, "tl.int64")

    def operand(self, a: Any, dm: DimMap, consumer: Node, scope: _Scope) -> Operand:
        if isinstance(a, Node):
            if self.part_owner(a) is self.g:
                return self.value(a, scope)
            adm = _right_align(a, dm, consumer.rank)
            if a in self.part.generated:
                return self.generated(a, adm, scope)
            return self.load(a, self.load_dmap(a, adm), scope)
        if isinstance(a, Sym):
            return self.scalar(a)
        if isinstance(a, tuple) and a and a[0] == "numel":
            return Operand("n_cols", "tl.int32")
        if isinstance(a, tuple) and a and a[0] == "numel_minus":
            return Operand(f"tl.maximum(n_cols.to(tl.float32) - {literal(float(a[2]))}, 0.0)", "tl.float32")
        if a is None:
            return Operand("None", None, None)
        return Operand(literal(a), None, a)

    def load_dmap(self, a: Node, adm: DimMap) -> DimMap:
        return adm

    def part_owner(self, n: Node) -> Group | None:
        return self.g if n in self.g.dmaps else None

    # -- values -------------------------------------------------------------------------
    def value(self, n: Node, scope: _Scope) -> Operand:
        got = scope.get(("val", n))
        if got is not None:
            return got
        dm = self.g.dmaps[n]
        if n.op in LAYOUT:
            op = self.value(n.args[0], scope)
        elif n.op in MATMUL:
            op = Operand("acc", "tl.float32")
        elif n.op in REDUCTIONS:
            raise EngineerError(f"internal: reduction {n.name} read before its pass")
        else:
            ops = [self.operand(a, dm, n, scope) for a in n.args[:_n_operands(n)]]
            text = emit_pointwise(n.op, ops, n.dtype, n.args[_n_operands(n):], self.helpers)
            key = ("text", text, compute_type(n.dtype))
            op = scope.get(key)  # the same expression already computed (common subexpression)
            if op is None:
                var = self.fresh("v")
                self.emit(f"{var} = {text}  # {n.origin}: {n.op}")
                op = Operand(var, compute_type(n.dtype))
                scope.values[key] = op
        scope.values[("val", n)] = op
        return op

    def store(self, n: Node, o: int, scope: _Scope, mask: str | None) -> None:
        v = self.value(n, scope) if ("val", n) not in scope.values and scope.get(("val", n)) is None \
            else scope.get(("val", n))
        dm = self.g.dmaps[n]
        flat = self.flat_offset(dm) if n.rank == len(self.g.domain) else None
        terms = [f"{self.coord(d)} * y{o}_s{j}" for j, d in enumerate(dm) if d is not None]
        offset = flat if flat is not None and dm == tuple(range(len(self.g.domain))) else \
            (" + ".join(terms) if terms else "0")
        if offset == "0" and mask:  # one element: a block of one address for the mask
            offset = f"({mask}) * 0"
        val = v.as_type(compute_type(n.dtype)) if v.ctype is not None else v.text
        m = f", mask={mask}" if mask else ""
        if v.ctype is None:  # a constant: broadcast it over the offsets
            val = f"(({offset}) * 0 + {val})"
        if n.dtype == torch.bfloat16:
            self.helpers.add("_to_bf16")
            self.emit(f"tl.store(y{o}_ptr + {offset}, _to_bf16({val}){m})")
        else:
            self.emit(f"tl.store(y{o}_ptr + {offset}, {val}.to({_store_type(n.dtype)}){m})")


def _store_type(dtype: torch.dtype) -> str:
    """Round to nearest even when narrowing (the interpreter would otherwise truncate)."""
    if dtype in (torch.float16, torch.bfloat16):
        return f'{TL_TYPES[dtype]}, fp_downcast_rounding="rtne"'
    return TL_TYPES[dtype]


def _positive_constant(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < float(v) < float("inf")


def _n_operands(n: Node) -> int:
    return {"leaky_relu": 1, "elu": 1, "softplus": 1}.get(n.op, len(n.args))


def _right_align(a: Node, dm: DimMap, rank: int) -> DimMap:
    off = rank - a.rank
    return tuple(None if a.shape[j] == 1 else dm[off + j] for j in range(a.rank))


def _back_layout(n: Node, dm: DimMap) -> DimMap:
    """The dim map of a layout node's input, given the node's own."""
    x = n.args[0]
    if n.op == "unsqueeze":
        d = n.args[1]
        return dm[:d] + dm[d + 1:]
    if n.op == "squeeze":
        out = list(dm)
        for d in sorted(n.args[1]):
            out.insert(d, None)
        return tuple(out[: x.rank])
    if n.op == "permute":
        out: list[int | None] = [None] * x.rank
        for i, p in enumerate(n.args[1]):
            out[p] = dm[i]
        return tuple(out)
    off = n.rank - x.rank
    return tuple(None if x.shape[j] == 1 else dm[off + j] for j in range(x.rank))


def _origins(group: Group) -> list[str]:
    out: list[str] = []
    for n in group.nodes:
        if n.origin not in out:
            out.append(n.origin)
    return out


def _identity(r: int) -> DimMap:
    return tuple(range(r))


def _signature(params: list[tuple[str, str]]) -> list[str]:
    out = []
    for p, comment in params:
        out.append(f"    {p},{'  # ' + comment if comment else ''}")
    return out


def _input_params(w: _Writer, inputs: list[Node], prefix: str = "x") -> tuple[list[tuple[str, str]], list[str]]:
    params, args = [], []
    for i, x in enumerate(inputs):
        strides = ", ".join(f"{prefix}{i}_s{j}" for j in range(x.rank))
        dims = ", ".join(str(s) for s in x.shape)
        params.append((f"{prefix}{i}_ptr" + (f", {strides}" if strides else ""),
                       f"({dims}) {str(x.dtype).removeprefix('torch.')}: {x.name}"))
        args.append(f"{prefix}{i}" + (f", *{prefix}{i}.stride()" if x.rank else ""))
    return params, args


class _PointwiseWriter(_Writer):
    def coord(self, k: int) -> str:
        self.coords_needed.add(k)
        return f"c{k}"

    def load_mask(self, dm: DimMap) -> str | None:
        return "mask"

    def flat_offset(self, dm: DimMap) -> str | None:
        return "offs" if dm == _identity(len(self.g.domain)) else None


class _ReductionWriter(_Writer):
    one_pass = True
    col, col_mask = "cr", "cmask"
    """The reduced dim's coordinate and its mask in loads (a select's direct load swaps them)."""

    def coord(self, k: int) -> str:
        if k == self.g.rdim:
            return self.col
        self.coords_needed.add(k)
        return f"c{k}"

    def load_mask(self, dm: DimMap) -> str | None:
        return self.col_mask if self.g.rdim in dm else None

    def value(self, n: Node, scope: _Scope) -> Operand:
        if n.op not in REDUCTIONS:
            return super().value(n, scope)
        got = scope.get(("val", n))
        if got is not None:
            return got
        if not self.one_pass:
            raise EngineerError(f"internal: reduction {n.name} read before its pass")
        var = self.fresh("r")
        self.emit(f"{var} = tl.{self.reduce_fn(n)}({self.masked_input(n, scope)}, axis=0)"
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

    def loop_levels(self, online: dict[Node, _OnlineSum]) -> dict[Node, int]:
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
        inits.append(f"{acc_m} = {_NEG_INF}")
        inits += [f"acc_{o.total.name} = 0.0" for o in sums]
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
        self.emit(f"{m_new} = tl.maximum({acc_m}, tl.max({e}, axis=0))  # {peak.origin}: amax (running)")
        self.emit(f"{m_safe} = tl.where({m_new} == {_NEG_INF}, 0.0, {m_new})")
        for o in sums:
            acc = f"acc_{o.total.name}"
            self.emit(f"{acc} = {acc} * tl.{o.fn}({o.arg(f'{acc_m} - {m_safe}')}) + "
                      f"tl.sum(tl.{o.fn}({o.arg(f'{e} - {m_safe}')}), axis=0)  # {o.total.origin}: sum (running)")
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


def pointwise_kernel(group: Group, part: Partition, sym_code: Any, name: str) -> KernelSource:
    w = _PointwiseWriter(group, part, sym_code)
    scope = _Scope()
    for o, out in enumerate(group.outputs):
        w.store(out, o, scope, "mask")
    body = w.lines
    r = len(group.domain)
    head = ["if INDEX_64:  # offsets past 2**31: 64-bit index maths",
            "    pid = tl.program_id(0).to(tl.int64)",
            "else:  # 32-bit: the coordinate divisions below stay cheap (int64 division is emulated)",
            "    pid = tl.program_id(0)",
            "offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
            "mask = offs < n_elements"]
    head += _decompose("offs", sorted(w.coords_needed), r, "c")
    if group.nhwc:
        # a channels_last convolution's epilogue: a (BLOCK_HW, BLOCK_C) tile per program reads
        # the NHWC input along channels and writes the NCHW output along hw (a fused transpose;
        # a flat walk would read NHWC with a stride of C elements)
        head = ["if INDEX_64:  # offsets past 2**31: 64-bit index maths",
                "    c0 = tl.program_id(2).to(tl.int64)",
                "else:",
                "    c0 = tl.program_id(2)",
                "hw = tl.program_id(0) * BLOCK_HW + tl.arange(0, BLOCK_HW)[:, None]",
                "c1 = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]",
                "mask = (hw < D2 * D3) & (c1 < D1)",
                "offs = (c0 * D1 + c1) * (D2 * D3) + hw  # the NCHW-contiguous output's index",
                "c2 = hw // D3",
                "c3 = hw % D3"]
        return _finish_simple(w, group, part, name, "pointwise", head, body,
                              ["n_elements"] + [f"D{k}" for k in range(r)],
                              {"BLOCK_HW": [32, 64, 128], "BLOCK_C": [32, 64, 128], "num_warps": [4, 8]},
                              # 32 hw x 64 channels, 4 warps: the accelerator's best of 12 tiles
                              # on conv2d_relu_bias (H100, 2026-11-23: 0.233 ms whole forward;
                              # 64x64 read 0.354 ms there, 8 warps 0.34-0.36 ms)
                              {"BLOCK_HW": 32, "BLOCK_C": 64, "num_warps": 4},
                              extra_constexpr=["INDEX_64"], blocks=["BLOCK_HW", "BLOCK_C"])
    return _finish_simple(w, group, part, name, "pointwise", head, body,
                          ["n_elements"] + [f"D{k}" for k in range(r)],
                          {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096], "num_warps": [2, 4, 8]},
                          {"BLOCK_SIZE": 1024, "num_warps": 4}, extra_constexpr=["INDEX_64"])


def _decompose(flat: str, needed: list[int], rank: int, prefix: str, skip: int | None = None) -> list[str]:
    """Coordinates of the dims in `needed` from a flat row-major index (dim `skip` excluded)."""
    if not needed:
        return []
    dims = [k for k in range(rank) if k != skip]
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
        w.store(o, outs[o], scope, None)
    one = w.lines
    # looped: one loop per level of `loop_levels` (an amax, the online sums it stabilises, the
    # selects and the other reductions that only need the row share one), then one loop that
    # writes the full-size outputs
    w.lines = []
    w.one_pass = False
    top = _Scope()
    online = {n: o for n in group.nodes if (o := w.online_sum(n)) is not None}
    sums_of: dict[Node, list[_OnlineSum]] = {}
    for o in online.values():
        sums_of.setdefault(o.peak, []).append(o)
    levels = w.loop_levels(online)
    for level in sorted(set(levels.values())):
        reds = [n for n in group.nodes if levels.get(n) == level]
        # a select's index is a row value: read once, before the loop
        index = {n: w.operand(n.args[1], group.dmaps[n], n, top) for n in reds if n.op == "select"}
        at, inits = len(w.lines), []
        w.emit("for start in range(0, n_cols, BLOCK_SIZE):")
        w.indent += 1
        w.emit("cr = start + cols")
        w.emit("cmask = cr < n_cols")
        loop = _Scope(top)
        picked = {}
        for red in reds:
            if red in online:
                continue  # accumulated beside its max
            if red in sums_of:
                w.emit_online(red, sums_of[red], loop, inits)
            elif red.op == "select":
                picked[red] = w.emit_select(red, index[red], loop, inits)
            else:
                acc_t = "tl.float32" if compute_type(red.dtype).startswith("tl.float") else "tl.int64"
                neutral = _NEUTRAL[red.op] if acc_t == "tl.float32" else "0"
                inits.append(f"acc_{red.name} = tl.zeros([BLOCK_SIZE], {acc_t})" if red.op == "sum" else
                             f"acc_{red.name} = tl.full([BLOCK_SIZE], {neutral}, {acc_t})")
                x = w.masked_input(red, loop)
                if red.op == "sum":
                    w.emit(f"acc_{red.name} += {x}  # {red.origin}: {red.op}")
                else:
                    fn = "maximum" if red.op == "amax" else "minimum"
                    w.emit(f"acc_{red.name} = tl.{fn}(acc_{red.name}, {x})  # {red.origin}: {red.op}")
        w.indent -= 1
        w.lines[at:at] = ["    " * w.indent + line for line in inits]
        m_safe: dict[Node, str] = {}
        for red in reds:  # in graph order: what a reduction reads after the loop is ready
            if red in picked:
                top.values[("val", red)] = w.finish_select(red, picked[red], top)
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
                w.emit(f"{var} = tl.{w.reduce_fn(red)}(acc_{red.name}, axis=0)")
            top.values[("val", red)] = Operand(var, compute_type(red.dtype))
            if red in sums_of:
                ms = w.fresh("m")
                w.emit(f"{ms} = tl.where({var} == {_NEG_INF}, 0.0, {var})  # a row of only -inf: shift by 0")
                m_safe[red] = ms
    if full:
        w.emit("for start in range(0, n_cols, BLOCK_SIZE):")
        w.indent += 1
        w.emit("cr = start + cols")
        w.emit("cmask = cr < n_cols")
        loop = _Scope(top)
        for o in full:
            w.store(o, outs[o], loop, "cmask")
        w.indent -= 1
    for o in rows:
        w.store(o, outs[o], top, None)
    looped = w.lines
    r = len(group.domain)
    head = ["row = tl.program_id(0).to(tl.int64)"]
    head += _decompose("row", sorted(w.coords_needed), r, "c", skip=group.rdim)
    head += ["cols = tl.arange(0, BLOCK_SIZE)",
             "if ONE_PASS:  # the row fits one block: read once, keep it in registers",
             "    cr = cols", "    cmask = cr < n_cols"]
    body = one + ["    else:  # a long row: loops over column blocks (online max/sum), then the outputs"] + looped
    return _finish_simple(w, group, part, name, "reduction", head, body,
                          ["n_cols"] + [f"D{k}" for k in range(r) if k != group.rdim],
                          _reduction_tunables(group), _reduction_default(group),
                          extra_constexpr=["ONE_PASS"])


ROW_BLOCK = 16384
"""The longest row a reduction keeps in registers in one block (the generated file's
MAX_ROW_BLOCK); longer rows loop."""

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


def _reduction_default(group: Group) -> dict[str, int]:
    """The launch default at the traced row width: the whole row in one block, or
    LOOP_DEFAULT for longer rows."""
    n_cols = _row_width(group)
    if n_cols > ROW_BLOCK:
        return dict(LOOP_DEFAULT)
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


def _finish_simple(w: _Writer, group: Group, part: Partition, name: str, kind: str,
                   head: list[str], body: list[str], sizes: list[str],
                   tunables: dict[str, list[Any]], config: dict[str, Any],
                   extra_constexpr: list[str] | None = None,
                   blocks: list[str] | None = None) -> KernelSource:
    in_params, in_args = _input_params(w, group.inputs, "x")
    out_params, out_args = _input_params(w, group.outputs, "y")
    flags = [f"X{i}_CONTIG" for i in w.contig_flags]
    sig = ["    # inputs: pointer, then one stride per dim (0 where broadcast)"] + _signature(in_params)
    sig += ["    # outputs (contiguous)"] + _signature(out_params)
    sig += ["    # run-time sizes"] + [f"    {s}," for s in sizes + [p for p, _ in w.scalar_args]]
    sig += [f"    {c}: tl.constexpr," for c in (blocks or ["BLOCK_SIZE"]) + (extra_constexpr or []) + flags]
    kernel = ["@triton.jit", f"def {name}("] + sig + ["):"]
    kernel += [f"    {line}" for line in head] + body
    launcher = _simple_launcher(w, group, name, kind, in_args, out_args, sizes)
    return KernelSource(name, f"_launch_{group.name}", kind, "\n".join(kernel) + "\n",
                        launcher, _call_args(w, group), _origins(group),
                        tunables, config, w.helpers)


def _call_args(w: _Writer, group: Group) -> list[str]:
    return ["device"] + [f"@{x.name}" for x in group.inputs] + \
        [f"={k}" for k in range(len(group.domain)) if k not in w.dim_sources] + \
        [f"!{code}" for _, code in w.scalar_args]


def _simple_launcher(w: _Writer, group: Group, name: str, kind: str, in_args: list[str],
                     out_args: list[str], sizes: list[str]) -> str:
    r = len(group.domain)
    missing = [k for k in range(r) if k not in w.dim_sources]
    params = ["device"] + [f"x{i}" for i in range(len(group.inputs))] + [f"dim{k}" for k in missing] + \
        [p for p, _ in w.scalar_args]
    dom = []
    for k in range(r):
        if k in w.dim_sources:
            i, j = w.dim_sources[k]
            dom.append(f"x{i}.shape[{j}]")
        else:
            dom.append(f"dim{k}")
    lines = [f"def _launch_{group.name}({', '.join(params)}):",
             f'    """{kind.capitalize()} kernel {name}: fuses {", ".join(_origins(group))[:200]}."""',
             f"    D = ({', '.join(dom)}{',' if r == 1 else ''})  # the kernel's domain"]
    for i, x in enumerate(group.inputs):
        lines.append(f"    if x{i}.dim() != {x.rank}:")
        lines.append(f"        raise ValueError(f\"{name}: input {i} ({x.name}) must have {x.rank} dims, "
                     f"got {{tuple(x{i}.shape)}}\")")
    for o, y in enumerate(group.outputs):
        dm = group.dmaps[y]
        shape = ", ".join("1" if d is None else f"D[{d}]" for d in dm)
        lines.append(f"    y{o} = torch.empty(({shape}{',' if len(dm) == 1 else ''}), device=device, "
                     f"dtype={y.dtype})  # {y.name}")
    outs = ", ".join(f"y{o}" for o in range(len(group.outputs)))
    ret = f"    return {outs}{',' if len(group.outputs) == 1 else ''}"
    if kind == "pointwise":
        lines += ["    n_elements = math.prod(D)", "    if n_elements == 0:", "    " + ret]
        size_args = "n_elements, *D"
        flags = "".join(f", X{i}_CONTIG=x{i}.is_contiguous() and tuple(x{i}.shape) == D"
                        for i in w.contig_flags)
        spans = "".join(f", _span(x{i})" for i in range(len(group.inputs)))
        if group.nhwc:  # one (hw, channels) tile of one image per program
            lines += [f'    cfg = _launch_config("{name}", "tiled", D[2] * D[3], D[1])',
                      '    grid = (triton.cdiv(D[2] * D[3], cfg["BLOCK_HW"]), '
                      'triton.cdiv(D[1], cfg["BLOCK_C"]), D[0])']
            blocks, block = 'BLOCK_HW=cfg["BLOCK_HW"], BLOCK_C=cfg["BLOCK_C"]', 'cfg["BLOCK_HW"] * cfg["BLOCK_C"]'
        else:
            lines += [f'    cfg = _launch_config("{name}", "pointwise", n_elements)',
                      '    grid = (triton.cdiv(n_elements, cfg["BLOCK_SIZE"]),)']
            blocks, block = 'BLOCK_SIZE=cfg["BLOCK_SIZE"]', 'cfg["BLOCK_SIZE"]'
        consts = f'{blocks}, INDEX_64=max([n_elements + {block}{spans}]) >= 2**31{flags}'
    else:
        rd = group.rdim
        lines += [f"    n_cols = D[{rd}]",
                  "    n_rows = math.prod(D) // max(n_cols, 1)",
                  "    if n_rows == 0 or math.prod(D) == 0:", "    " + ret,
                  f'    cfg = _launch_config("{name}", "reduction", n_cols)',
                  "    grid = (n_rows,)"]
        size_args = "n_cols, " + ", ".join(f"D[{k}]" for k in range(r) if k != rd)
        size_args = size_args.rstrip(", ")
        consts = 'BLOCK_SIZE=cfg["BLOCK_SIZE"], ONE_PASS=n_cols <= cfg["BLOCK_SIZE"]'
    scal = "".join(f", {p}" for p, _ in w.scalar_args)
    all_args = ", ".join(in_args + out_args)
    lines.append(f"    {name}[grid]({all_args + ', ' if all_args else ''}{size_args}{scal}, {consts}, "
                 f'num_warps=cfg["num_warps"])')
    lines.append(ret)
    return "\n".join(lines) + "\n"


class _MatmulWriter(_Writer):
    def __init__(self, group: Group, part: Partition, sym_code: Any) -> None:
        super().__init__(group, part, sym_code)
        self.staged: list[tuple[Node, str]] = []
        """Epilogue inputs: (node, 'D' | 'E'): broadcast to the mm result or its view."""

    def coord(self, k: int) -> str:
        names = ["rm[:, None]", "rn[None, :]"]
        if len(self.g.domain) == 3:
            names = ["pid_b"] + names
        return names[k]

    def load_mask(self, dm: DimMap) -> str | None:
        return "mask"

    def operand(self, a: Any, dm: DimMap, consumer: Node, scope: _Scope) -> Operand:
        if isinstance(a, Node) and a not in self.g.dmaps and a not in self.part.generated:
            kind = "D" if consumer.shape == self.g.domain else "E"
            key = ("staged", a, kind)
            got = scope.get(key)
            if got is not None:
                return got
            if (a, kind) not in self.staged:
                self.staged.append((a, kind))
            i = self.staged.index((a, kind))
            r = len(self.g.domain)
            offset = " + ".join(f"{self.coord(k)} * x{i}_s{k}" for k in range(r))
            var = self.fresh("x")
            self.emit(f"{var} = tl.load(x{i}_ptr + {offset}, mask=mask, other=0)  # {a.name}")
            ct = compute_type(a.dtype)
            if TL_TYPES[a.dtype] != ct:
                self.emit(f"{var} = {var}.to({ct})")
            op = Operand(var, ct)
            scope.values[key] = op
            return op
        return super().operand(a, dm, consumer, scope)


def matmul_kernel(group: Group, part: Partition, sym_code: Any, name: str, precision: str) -> KernelSource:
    w = _MatmulWriter(group, part, sym_code)
    mm = group.anchor
    a, b = mm.args[0], mm.args[1]
    batched = mm.op == "bmm"
    w.indent = 1
    scope = _Scope()
    outs = group.outputs
    for o, y in enumerate(outs):
        v = w.value(y, scope)
        if y.dtype == torch.bfloat16:
            w.helpers.add("_to_bf16")
            w.emit(f"tl.store(y{o}_ptr + {' + '.join(f'{w.coord(k)} * y{o}_s{k}' for k in range(len(group.domain)))}, "
                   f"_to_bf16({v.as_type('tl.float32')}), mask=mask)  # {y.name}")
            continue
        w.emit(f"tl.store(y{o}_ptr + {' + '.join(f'{w.coord(k)} * y{o}_s{k}' for k in range(len(group.domain)))}, "
               f"{v.as_type(compute_type(y.dtype))}.to({_store_type(y.dtype)}), mask=mask)  # {y.name}")
    epilogue = w.lines
    r = len(group.domain)
    dot_kw = ""
    if a.dtype == torch.float32:
        dot_kw = ', input_precision="ieee"' if precision == "strict" else ', input_precision="tf32"'
    flops = "2*M*N*K" + (" * batch" if batched else "")
    kernel = [
        "@triton.jit",
        f"def {name}(",
        f"    a_ptr, a_sb, a_sm, a_sk,  # ({'batch, ' if batched else ''}M, K) {str(a.dtype).removeprefix('torch.')}: {a.name}",
        f"    b_ptr, b_sb, b_sk, b_sn,  # ({'batch, ' if batched else ''}K, N) {str(b.dtype).removeprefix('torch.')}: {b.name}",
        f"    p_ptr, p_sb, p_sm, p_sn,  # ({'batch, ' if batched else ''}M, N) the product A @ B when PRODUCT_IN (else unused)",
        "    # epilogue inputs, broadcast to the result's shape (stride 0 where broadcast)",
    ]
    for i, (x, _kind) in enumerate(w.staged):
        kernel.append(f"    x{i}_ptr, " + ", ".join(f"x{i}_s{k}" for k in range(r)) + f",  # {x.name}")
    kernel.append("    # outputs (contiguous)")
    for o, y in enumerate(outs):
        kernel.append(f"    y{o}_ptr, " + ", ".join(f"y{o}_s{k}" for k in range(r)) + f",  # {y.name}")
    kernel += [f"    M, N, K,{''.join(f' {p},' for p, _ in w.scalar_args)}",
               "    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,",
               "    UPCAST: tl.constexpr,  # True only under the CPU interpreter, whose bf16 tl.dot is wrong",
               "    PRODUCT_IN: tl.constexpr,  # True: only the epilogue runs, on a product torch computed",
               "):",
               f"    # FLOPs: {flops}; bytes: A and B once per tile row/column, the result once",
               "    pid = tl.program_id(0)",
               "    pid_b = tl.program_id(1).to(tl.int64)",
               "    # grouped ordering: GROUP_M row-tiles share B's column tiles in L2",
               "    num_pid_m = tl.cdiv(M, BLOCK_M)",
               "    num_pid_n = tl.cdiv(N, BLOCK_N)",
               "    num_pid_in_group = GROUP_M * num_pid_n",
               "    group_id = pid // num_pid_in_group",
               "    first_pid_m = group_id * GROUP_M",
               "    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
               "    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
               "    pid_n = (pid % num_pid_in_group) // group_size_m",
               "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
               "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
               "    mask = (rm[:, None] < M) & (rn[None, :] < N)",
               "    if PRODUCT_IN:  # BACKEND cublas: torch computed the product; read each element once",
               "        p_ptrs = p_ptr + pid_b * p_sb + rm[:, None] * p_sm + rn[None, :] * p_sn",
               "        acc = tl.load(p_ptrs, mask=mask, other=0.0).to(tl.float32)",
               "    else:  # BACKEND triton: the tile loop over K",
               "        rk = tl.arange(0, BLOCK_K)",
               "        ram = rm % M  # wrap out-of-range rows/cols: loads stay in bounds, stores are masked",
               "        rbn = rn % N",
               "        a_ptrs = a_ptr + pid_b * a_sb + ram[:, None] * a_sm + rk[None, :] * a_sk",
               "        b_ptrs = b_ptr + pid_b * b_sb + rk[:, None] * b_sk + rbn[None, :] * b_sn",
               "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
               "        for k in range(0, tl.cdiv(K, BLOCK_K)):",
               "            k_left = K - k * BLOCK_K",
               "            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)",
               "            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)",
               "            if UPCAST:",
               "                a = a.to(tl.float32)",
               "                b = b.to(tl.float32)",
               f"            acc = tl.dot(a, b, acc{dot_kw})",
               "            a_ptrs += BLOCK_K * a_sk",
               "            b_ptrs += BLOCK_K * b_sk",
               "    # epilogue: " + ", ".join(n.origin for n in group.nodes if n is not mm)[:150]]
    kernel += epilogue
    params = ["device", "a", "b"] + [f"x{i}" for i in range(len(w.staged))] + \
        (["view_shape"] if group.epi_view is not None else []) + [p for p, _ in w.scalar_args]
    lines = [f"def _launch_{group.name}({', '.join(params)}):",
             f'    """Matmul kernel {name}: {mm.op} with a fused epilogue ({len(group.nodes) - 1} ops)."""',
             f"    if a.dim() != {a.rank} or b.dim() != {b.rank} or a.shape[-1] != b.shape[-2]:",
             f'        raise ValueError(f"{name}: cannot multiply {{tuple(a.shape)}} by {{tuple(b.shape)}}")',
             "    M, K = a.shape[-2], a.shape[-1]",
             "    N = b.shape[-1]",
             f"    batch = a.shape[0] if {batched} else 1",
             f"    D = {'(batch, M, N)' if batched else '(M, N)'}  # the matmul result",
             "    numel = math.prod(D)"]
    if group.epi_view is not None:
        lines.append("    E = _resolve_shape(view_shape, numel)  # the view the epilogue continues on")
    for i, (x, kind) in enumerate(w.staged):
        lines.append(f"    x{i} = x{i}.expand({'E' if kind == 'E' else 'D'}).reshape(D)  # {x.name}: broadcast, a view when possible")
    for o, y in enumerate(outs):
        lines.append(f"    y{o} = torch.empty(D, device=device, dtype={y.dtype})  # {y.name}")
    ret_items = []
    for o, y in enumerate(outs):
        ret_items.append(f"y{o}.view(E)" if group.epi_view is not None and y.shape != group.domain else f"y{o}")
    ret = "    return " + ", ".join(ret_items) + ("," if len(outs) == 1 else "")
    product = "torch.bmm" if batched else "torch.mm"
    lines += ["    if numel == 0:", "    " + ret,
              f'    cfg = _launch_config("{name}", "matmul", N, M, K)',
              '    if cfg.get("BACKEND", "triton") == "cublas":']
    if not _has_epilogue(group) and len(outs) == 1:
        lines += ["        # the bare product through torch (cuBLAS on a GPU); nothing to fuse after it",
                  f"        {product}(a, b, out=y0)",
                  "    " + ret]
    else:
        lines += [
              "        # the bare product through torch (cuBLAS on a GPU; TF32 as the case's precision set it),",
              "        # then the kernel runs only the fused epilogue: one read of the product, one write",
              "        p = torch.empty(D, device=device, dtype=a.dtype)",
              f"        {product}(a, b, out=p)",
              "        p_args = (p, p.stride(0) if p.dim() == 3 else 0, p.stride(-2), p.stride(-1))",
              "        # a memory-bound walk: 64x128 tiles of contiguous rows, 16-byte vector loads",
              '        cfg.update(BLOCK_M=min(64, max(16, triton.next_power_of_2(M))),',
              '                   BLOCK_N=min(128, max(16, triton.next_power_of_2(N))), num_warps=8, num_stages=1)']
    lines += [
              "    else:",
              "        p_args = (a, 0, 0, 0)  # unused: the kernel multiplies A by B itself",
              '    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), batch)']
    sb = "a.stride(0)" if batched else "0"
    sbb = "b.stride(0)" if batched else "0"
    xs = "".join(f" x{i}, *x{i}.stride()," for i in range(len(w.staged)))
    ys = "".join(f" y{o}, *y{o}.stride()," for o in range(len(outs)))
    scal = "".join(f" {p}," for p, _ in w.scalar_args)
    lines += [f"    {name}[grid](",
              f"        a, {sb}, a.stride(-2), a.stride(-1), b, {sbb}, b.stride(-2), b.stride(-1), *p_args,{xs}{ys}",
              f"        M, N, K,{scal} BLOCK_M=cfg[\"BLOCK_M\"], BLOCK_N=cfg[\"BLOCK_N\"], BLOCK_K=cfg[\"BLOCK_K\"],",
              '        GROUP_M=cfg["GROUP_M"], UPCAST=_INTERPRETED and a.dtype == torch.bfloat16,',
              '        PRODUCT_IN=cfg.get("BACKEND", "triton") == "cublas",',
              '        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])',
              ret]
    call = ["device", f"@{a.name}", f"@{b.name}"] + [f"@{x.name}" for x, _ in w.staged]
    if group.epi_view is not None:
        call.append(f"%{group.epi_view.name}")
    call += [f"!{code}" for _, code in w.scalar_args]
    half = a.dtype in (torch.float16, torch.bfloat16)
    config = {"BACKEND": matmul_backend(group, part), "BLOCK_M": 128, "BLOCK_N": 256 if half else 128,
              "BLOCK_K": 64 if half else 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    # BACKEND first: the accelerator always tries both where cublas is allowed
    tunables = {"BACKEND": ["triton", "cublas"] if _cublas_allowed(group, part) else ["triton"],
                "BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64],
                "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [3, 4]}
    return KernelSource(name, f"_launch_{group.name}", "matmul", "\n".join(kernel) + "\n",
                        "\n".join(lines) + "\n", call, _origins(group), tunables,
                        config, w.helpers)


CUBLAS_MIN_WORK = 2 ** 30
"""M*N*K (times batch) from which a bf16/fp16 product defaults to cuBLAS: there Triton's
non-persistent template reaches ~70% of an H100's peak and cuBLAS ~80%."""


def _has_epilogue(group: Group) -> bool:
    return any(n is not group.anchor and n.op not in LAYOUT for n in group.nodes)


def _cublas_allowed(group: Group, part: Partition) -> bool:
    """A product through torch keeps the candidate honest only when Triton still computes
    something: this group's epilogue, or other kernels of the model (a model that is one bare
    product would otherwise be the baseline's own op)."""
    return _has_epilogue(group) or len(part.groups) > 1


def matmul_backend(group: Group, part: Partition) -> str:
    """The default BACKEND of a matmul group: `cublas` (torch product + Triton epilogue kernel)
    for a large product, else `triton` (one fused kernel).

    H100, 2026-11-22 (benchmarks/offline_gpu.py): linear_bias_gelu 1.734 ms cublas vs 1.893
    triton; gated_mlp 3.395 vs 4.100; matmul_scale_residual (tf32) 0.888 vs 1.296. The
    accelerator still measures both on the user's GPU."""
    mm = group.anchor
    a = mm.args[0]
    work = 1
    for s in mm.shape:
        work *= s
    work *= a.shape[-1]
    return "cublas" if work >= CUBLAS_MIN_WORK and _cublas_allowed(group, part) else "triton"
