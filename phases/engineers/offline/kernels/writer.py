"""The expression writer every kernel template shares, and the launcher of the flat templates.

`_Writer` emits one kernel's body: loads at the coordinates a member's dim map gives, shape-only
values recomputed from coordinates, pointwise expressions (common subexpressions once) and
stores. Each template subclasses it with its coordinates and masks (`pointwise.py`,
`reduction.py`, `matmul.py`); `_finish_simple` and `_simple_launcher` write the signature and
the launcher of the pointwise and reduction templates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition
from kopt.phases.engineers.offline.graph import (
    GENERATORS,
    LAYOUT,
    MATMUL,
    REDUCTIONS,
    TAKE,
    WINDOW_TAP,
    Node,
    Sym,
)
from kopt.phases.engineers.offline.kernels.pairs import Pair, pair_op, pair_operand
from kopt.phases.engineers.offline.lead import LEAD_SYMBOL
from kopt.phases.engineers.offline.pointwise import (
    TL_TYPES,
    Operand,
    compute_type,
    emit_pointwise,
    literal,
)


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
    library: str | None = None
    """A product whose whole epilogue cuBLAS(Lt) applies itself (`"bias"`, `"relu"`,
    `"gelu_tanh"`): on the cuBLAS backend this group launches no Triton kernel."""


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


BOUNDED_INT_OPS = frozenset({"add", "sub", "fmod", "remainder", "minimum", "maximum", "clamp",
                             "where", "eq", "ne", "lt", "le", "gt", "ge", "truediv_trunc",
                             "truediv_floor"})
"""Integer ops of shape arithmetic whose result stays within a coordinate plus a size (no
product): computed in the index type where the kernel allows (`_Writer.narrow_index`)."""


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
        self.used_index_zero = False
        """Whether a size joined index arithmetic in the index type (`scalar`): the launcher
        then takes 64-bit index maths from 2**30."""
        self.contig_flags: list[int] = []
        self.inner_flags: list[int] = []
        """Inputs with an `X<i>_INNER` constexpr (`_laid_from` at launch): their offset over a
        trailing run of dims laid out as the domain's comes from the flat index."""
        self.walk: tuple[int, ...] | None = None
        """The domain's dims in the order the flat index walks them, outermost first, when not
        row-major (a pointwise kernel in a permuted input's memory order: pointwise.memory_walk)."""
        self.pairs: int | None = None
        """The last domain dim while the body is written over its pairs (`kernels/pairs.py`)."""
        self.pair_takes = 0
        """Takes written over pairs whose index is the same for both elements of a pair."""
        self.pair_kernel = False
        """Whether the kernel has a body over pairs, taken at launch when the last dim is even."""

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

    def store_flat(self, n: Node, dm: DimMap) -> str | None:
        """A contiguous output's offset from the template's flat index (no coordinates), or
        None where it stores at its coordinates."""
        return self.flat_offset(dm) if dm == tuple(range(len(self.g.domain))) else None

    def inner_flat(self, k: int) -> str | None:
        """The flat index's part over domain dims k.. (their coordinates times the domain's
        row-major spans), or None where the template has no flat index to take it from."""
        return None

    def _inner_offsets(self, i: int, x: Node, per_dim: list[tuple[int | None, str | None]],
                       first: int = 0) -> list[tuple[str, str]]:
        """(condition, offset) pairs: under `X<i>_INNER <= k`, x's offset with its part over a
        trailing run of domain dims k.. (at least two) taken from the flat index, for each k from
        the first dim of the longest such run this load allows (`first` at least). `per_dim` is,
        per dim j of x, (the domain dim it follows plainly, its offset term), with None where the
        dim is tapped or not the domain's j. Empty when there is no run of two dims or more. The
        coordinates of those dims are then dead in the branch taken (no division per element for
        them: KernelBench level-3 18's concatenation kernel, 64x64x126x126 float32 inputs on an
        H200, 427.7 -> 246.0 us, a clone of its output 246.3; benchmarks/inner_offsets_gpu.py,
        2026-11-30)."""
        r = len(self.g.domain)
        if x.rank != r:
            return []
        start = r
        for j in range(r - 1, -1, -1):
            if per_dim[j][0] != j:
                break
            start = j
        start = max(start, first)
        if start > r - 2 or self.inner_flat(r - 2) is None:
            return []
        if i not in self.inner_flags:
            self.inner_flags.append(i)
        out = []
        for k in range(start, r - 1):
            terms = [t for j, (_d, t) in enumerate(per_dim) if j < k and t is not None]
            out.append((f"X{i}_INNER <= {k}:  # laid out as the domain from dim {k}",
                        " + ".join(terms + [self.inner_flat(k)])))
        return out

    def _emit_load(self, var: str, i: int, offset: str, m: str, choices: list[tuple[str, str]],
                   note: str = "") -> None:
        """var = x<i> at `offset` (its coordinates'), or at the offset of the first of
        `choices` ((constexpr condition, offset) pairs) whose condition holds at launch."""
        if not choices:
            self.emit(f"{var} = tl.load(x{i}_ptr + {offset}{m}){note}")
            return
        for n, (cond, at) in enumerate(choices):
            self.emit(f"{'if' if n == 0 else 'elif'} {cond}")
            self.emit(f"    {var} = tl.load(x{i}_ptr + {at}{m}){note}")
        self.emit("else:")
        self.emit(f"    {var} = tl.load(x{i}_ptr + {offset}{m}){note}")

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
        choices = []
        if flat is not None:
            if i not in self.contig_flags:
                self.contig_flags.append(i)
            choices.append((f"X{i}_CONTIG:  # contiguous and full-size: load at the flat index", flat))
        if terms:  # (from dim 0, where X<i>_CONTIG's flat load is there, it is that load)
            per_dim = [(d if d == j else None, f"{self.coord(d)} * x{i}_s{j}" if d is not None else None)
                       for j, d in enumerate(dm)]
            choices += self._inner_offsets(i, x, per_dim, first=1 if flat is not None else 0)
        self._emit_load(var, i, offset, m, choices)
        ct = compute_type(x.dtype)
        if TL_TYPES[x.dtype] != ct:
            self.emit(f"{var} = {var}.to({ct})")
        op = Operand(var, ct)
        scope.values[key] = op
        return op

    def _plain_dim_source(self, x: Node, i: int, j: int, d: int) -> None:
        """Domain dim d's size read from input i's dim j at launch where x follows it plainly
        there (a window's or a take's other dims), as `load` does: a size the traced program
        fixed (a weight's width, which the constructor sets) is then not baked in the call."""
        if x.shape[j] == self.g.domain[d] and x.shape[j] != 1:
            self.dim_sources.setdefault(d, (i, j))

    def tap(self, n: Node, dm: DimMap, scope: _Scope) -> Operand:
        """One tap of a pooling window: x at o * stride + t * dilation - padding along each
        pooled dim, masked to x's extent (padding reads `fill`)."""
        x = n.args[0]
        constant = x in self.part.generated and x.op == "full"  # a part of zeros: never loaded
        i = -1 if constant else self.input_index[x]
        pooled = {d: rest for d, *rest in n.kwargs["taps"]}  # stride, dilation, padding, t, k, size
        terms, inside = [], []
        per_dim: list[tuple[int | None, str | None]] = []
        for j in range(x.rank):
            d = dm[j] if j < len(dm) else None
            c = self.coord(d) if d is not None else "0"
            if j not in pooled:
                if d is not None:
                    terms.append(f"{c} * x{i}_s{j}")
                    if not constant:
                        self._plain_dim_source(x, i, j, d)
                per_dim.append((d if d == j else None, f"{c} * x{i}_s{j}" if d is not None else None))
                continue
            stride, dilation, padding, t, _window, size = pooled[j]
            idx = self.fresh("t")
            if isinstance(padding, Sym):  # a concatenation's offset that follows the inputs
                shift = f"{t * dilation} - {self.scalar_param(padding)}"
            else:
                shift = str(t * dilation - padding)
            self.emit(f"{idx} = {c} * {stride} + {shift}")
            terms.append(f"{idx} * x{i}_s{j}")
            per_dim.append((None, f"{idx} * x{i}_s{j}"))
            if padding or n.kwargs.get("clip"):
                # compared as it arrives (int32 like the index; a size of 1 arrives as a constant)
                text = literal(size) if isinstance(size, int) else self.scalar_param(
                    size if isinstance(size, Sym) else Sym(size, x.shape[j]))  # (a Sym: fitted to the constructor)
                inside.append(f"({idx} >= 0) & ({idx} < {text})")
        mask = self.load_mask(dm)
        masks = ([mask] if mask else []) + inside
        fill = n.kwargs["fill"]
        other = 'float("-inf")' if fill == float("-inf") else literal(fill)
        m = f", mask={' & '.join(masks)}, other={other}" if masks else ""
        var = self.fresh("x")
        if constant:
            value = self.generated(x, dm, scope).text
            ct = compute_type(x.dtype)
            where = " & ".join(inside) or "True"
            self.emit(f"{var} = tl.where({where}, {value}, {other}).to({ct})  # {n.origin}: tap")
            return Operand(var, ct)
        self._emit_load(var, i, " + ".join(terms) or "0", m, self._inner_offsets(i, x, per_dim),
                        f"  # {n.origin}: tap")
        ct = compute_type(x.dtype)
        if TL_TYPES[x.dtype] != ct:
            self.emit(f"{var} = {var}.to({ct})")
        return Operand(var, ct)

    def take(self, n: Node, dm: DimMap, scope: _Scope) -> Operand:
        """x at the index tensors' values along dims d..d+k-1 (graph.TAKE), its other dims at
        the coordinates; a negative index counts from the end, one outside x reads 0."""
        x, idxs, d = n.args[0], n.args[1:], n.kwargs["dim"]
        gather = bool(n.kwargs.get("gather"))  # the index at out's own coordinates, x's rank
        k = 1 if gather else len(idxs)
        rb = 1 if gather else n.rank - x.rank + k  # the rank the index tensors broadcast to
        i = self.input_index[x]
        terms, inside = [], []
        for j in range(d):
            if dm[j] is not None:
                terms.append(f"{self.coord(dm[j])} * x{i}_s{j}")
                self._plain_dim_source(x, i, j, dm[j])
        index_ops = []
        for t in idxs:
            off = 0 if gather else d + rb - t.rank  # right-aligned among the broadcast dims
            tdm = tuple(None if t.shape[u] == 1 else dm[off + u] for u in range(t.rank))
            if self.part_owner(t) is self.g:
                index_ops.append(self.value(t, scope))
            elif t in self.part.generated:
                index_ops.append(self.generated(t, tdm, scope))
            else:
                index_ops.append(self.load(t, tdm, scope))
        # x taken at the same index expressions already (two strided scatters into one value
        # take their sources at one index): that load's value
        key = ("take", x, d, gather, dm, tuple(op.text for op in index_ops))
        got = scope.get(key)
        if got is not None:
            return got
        if self.pairs is not None and all(op.pair is not None and op.pair.per_pair for op in index_ops) \
                and self.pairs not in [dm[j] for j in range(d)] + [dm[j - k + rb] for j in range(d + k, x.rank)]:
            self.pair_takes += 1  # loaded once a pair
        for q, (t, op) in enumerate(zip(idxs, index_ops, strict=True)):
            size = x.sym[d + q]
            text = literal(size) if isinstance(size, int) else self.scalar_param(
                size if isinstance(size, Sym) else Sym(size, x.shape[d + q]))
            idx = self.fresh("t")
            if self.take_in_index_type(t, op):
                self.emit(f"{idx} = {op.text}")
            else:
                self.emit(f"{idx} = tl.cast({op.text}, tl.int64)")
            if not (t in self.part.generated and nonnegative(t)):  # a negative index counts from the end
                self.emit(f"{idx} = tl.where({idx} < 0, {idx} + {text}, {idx})")
            inside.append(f"({idx} >= 0) & ({idx} < {text})")
            terms.append(f"{idx} * x{i}_s{d + q}")
        for j in range(d + k, x.rank):
            e = dm[j - k + rb]
            if e is not None and x.shape[j] != 1:
                terms.append(f"{self.coord(e)} * x{i}_s{j}")
                self._plain_dim_source(x, i, j, e)
        mask = self.load_mask(dm)
        m = " & ".join(([mask] if mask else []) + inside)
        var = self.fresh("x")
        offset = " + ".join(terms) or "0"
        self.emit(f"{var} = tl.load(x{i}_ptr + {offset}, mask={m}, other=0)  # {n.origin}: take")
        ct = compute_type(x.dtype)
        if TL_TYPES[x.dtype] != ct:
            self.emit(f"{var} = {var}.to({ct})")
        scope.values[key] = Operand(var, ct)
        return scope.values[key]

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
            d = dm[0] if dm else None
            if d is not None and d == self.pairs and ct != "tl.float32" and \
                    all(type(a) is int for a in n.args[:2]):
                self.coord(d)
                op = pair_operand(Pair(2 * n.args[1], (n.args[0], n.args[0] + n.args[1])), ct)
                scope.values[key] = op
                return op
            start, step = (self.scalar(a).text if isinstance(a, Sym) else literal(a) for a in n.args[:2])
            text = start if d is None else f"({self.coord(d)} * {step} + {start})"
            op = Operand(text, "tl.int64" if ct != "tl.float32" else None, None)
            if ct == "tl.float32":
                op = Operand(f"({text}).to(tl.float32)" if d is not None else f"{text} * 1.0", "tl.float32")
        elif n.op in ("unsqueeze", "squeeze", "permute", "expand") or \
                (n.op in ("view", "flatten") and (back := trivial_back(n, dm)) is not None):
            if n.op not in ("view", "flatten"):
                back = _back_layout(n, dm)
            op = self.generated(n.args[0], back, scope)
            scope.values[key] = op
            return op
        else:
            ops = [self.operand(a, dm, n, scope) for a in n.args if not isinstance(a, torch.dtype)]
            rep = pair_op(n.op, ops) if self.pairs is not None else None
            if rep is not None:  # written from the pair's place and parity (kernels/pairs.py)
                op = pair_operand(rep, ct)
                scope.values[key] = op
                return op
            text = emit_pointwise(n.op, ops, n.dtype, n.args[1:], self.helpers)
            op = scope.get(("text", text, ct))  # the same expression already computed
            if op is None:
                var = self.fresh("s")
                self.emit(f"{var} = {text}  # {n.origin} (from shapes)")
                op = Operand(var, ct)
                scope.values[("text", text, ct)] = op
        scope.values[key] = op
        return op

    def take_in_index_type(self, t: Node, op: Operand) -> bool:
        """Whether a take's index `t` (emitted as `op`) stays in the kernel's index type: an
        index recomputed from coordinates already is, and INDEX_64 widens it where offsets need
        it; cast to int64 it would only make the load's address arithmetic 64-bit (an
        interleaved RoPE's four takes)."""
        return self.narrow_index and t in self.part.generated and op.ctype is not None and \
            not t.dtype.is_floating_point

    def scalar_param(self, s: Sym) -> str:
        """The kernel parameter that carries `s` (one per distinct expression)."""
        code = self.sym_code(s)
        for name, known in self.scalar_args:
            if known == code:
                return name
        name = f"sym{len(self.scalar_args)}"
        self.scalar_args.append((name, code))
        return name

    narrow_index = False
    """Whether sizes join index arithmetic in the kernel's index type (`izero`: int32 unless
    INDEX_64): a flat kernel, whose INDEX_64 leaves room for a coordinate plus a size."""

    def scalar(self, s: Sym, consumer: Node | None = None) -> Operand:
        name = self.scalar_param(s)
        if isinstance(s.hint, float):  # a scale the constructor sets (`constructor_sizes`)
            return Operand(f"tl.cast({name}, tl.float32)", "tl.float32")
        if self.narrow_index and consumer is not None and consumer.op in BOUNDED_INT_OPS and \
                consumer in self.part.generated and not consumer.dtype.is_floating_point:
            # a roll's `(c + shift) % n`: int64 division is emulated, dozens of instructions
            # an element (a roll over two dims ran at 49% of the floor on an H200)
            self.used_index_zero = True
            return Operand(f"({name} + izero)", "tl.int64")
        return Operand(f"tl.cast({name}, tl.int64)", "tl.int64")  # 1 arrives as a constant

    def operand(self, a: Any, dm: DimMap, consumer: Node, scope: _Scope) -> Operand:
        if isinstance(a, Node):
            if self.part_owner(a) is self.g:
                return self.value(a, scope)
            adm = _right_align(a, dm, consumer.rank)
            if a in self.part.generated:
                return self.generated(a, adm, scope)
            return self.load(a, self.load_dmap(a, adm), scope)
        if isinstance(a, Sym):
            return self.scalar(a, consumer)
        # Run-time int arguments go through tl.cast, never `.to`: Triton passes an int argument
        # that is 1 at a call as a constant, which has no `.to` (KernelBench level-2 44 on the
        # H100: a mean over a dim of size 1 failed to compile, "'int' object has no attribute 'to'").
        if isinstance(a, tuple) and a and a[0] == "numel":
            return Operand("tl.cast(n_cols, tl.float32)", "tl.float32")
        if isinstance(a, tuple) and a and a[0] == "numel_minus":
            return Operand(f"tl.maximum(tl.cast(n_cols, tl.float32) - {literal(float(a[2]))}, 0.0)", "tl.float32")
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
        if n.op in LAYOUT and n.args[0] not in self.g.dmaps and n.args[0] in self.part.generated:
            # a view of a shape-only value (`arange(t)[None, :]`) stored for PyTorch to read:
            # recomputed from the coordinates, as its readers inside kernels do
            op = self.generated(n, dm, scope)
        elif n.op in LAYOUT:
            op = self.value(n.args[0], scope)
        elif n.op in MATMUL:
            op = Operand("acc", "tl.float32")
        elif n.op in REDUCTIONS:
            raise EngineerError(f"internal: reduction {n.name} read before its pass")
        elif n.op == WINDOW_TAP:
            op = self.tap(n, dm, scope)
        elif n.op == TAKE:
            op = self.take(n, dm, scope)
        elif n.op in GENERATORS:  # a constant or a range materialised (a PyTorch op reads it)
            op = self.generated(n, dm, scope)
            dims = [d for d in dm if d is not None]
            if op.ctype is None and dims:  # a block of the constant, shaped like the coordinates
                var = self.fresh("v")
                ct = compute_type(n.dtype)
                self.emit(f"{var} = tl.full({self.coord(dims[0])}.shape, {op.text}, {ct})  "
                          f"# {n.origin}: {n.op}")
                op = Operand(var, ct)
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
        # an output laid out like a permuted input, or any output of a kernel that walks
        # another layout's memory order (`walk`), stores at its own strides
        flat = self.store_flat(n, dm) if n not in self.g.laid_like and self.walk is None else None
        terms = [f"{self.coord(d)} * y{o}_s{j}" for j, d in enumerate(dm) if d is not None]
        offset = flat if flat is not None else (" + ".join(terms) if terms else "0")
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


STRICT_FLOAT32_DOT = "tf32x3"
"""How a template's `tl.dot` multiplies float32 operands at the case's `strict` precision:
each operand split into a TF32 high part and a TF32 remainder, three tensor-core products
(about float32's accuracy; the verifier compares against float64 truth). "ieee" runs on the
FMA units: an H200's attention ran both products 11x slower than eager's cuBLAS, and the
implicit-GEMM convolution and matmul templates lost to cuDNN's and cuBLAS's strict float32
kernels on every KernelBench level-1 shape measured (0.32-0.98x)."""


def float32_dot(dtype: torch.dtype, precision: str) -> str:
    """The `input_precision` keyword of a template's `tl.dot` over `dtype` operands ("" for
    half types): STRICT_FLOAT32_DOT at `strict`, one TF32 product at `tf32`."""
    if dtype != torch.float32:
        return ""
    return f', input_precision="{STRICT_FLOAT32_DOT if precision == "strict" else "tf32"}"'


def _store_type(dtype: torch.dtype) -> str:
    """Round to nearest even when narrowing (the interpreter would otherwise truncate)."""
    if dtype in (torch.float16, torch.bfloat16):
        return f'{TL_TYPES[dtype]}, fp_downcast_rounding="rtne"'
    return TL_TYPES[dtype]


def nonnegative(v: Any) -> bool:
    """Whether a shape-only integer value is >= 0 at every element by its construction:
    coordinates (`arange` from a start >= 0 by a step >= 0) through sums, products, divisions
    and remainders by positive constants (a strided assignment's source index `2 * (o // 2) + 1`).
    A take at such an index skips the wrap of negative indices; its `>= 0` mask stays (an
    int32 product past 2**31 turns negative and must still read nothing)."""
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        return v >= 0
    if not isinstance(v, Node) or v.dtype.is_floating_point:
        return False
    if v.op == "arange":
        return all(isinstance(a, int) and a >= 0 for a in v.args[:2])
    if v.op in ("unsqueeze", "squeeze", "expand", "view", "flatten", "permute"):
        return nonnegative(v.args[0])
    if v.op in ("add", "mul") and len(v.args) == 2:
        return nonnegative(v.args[0]) and nonnegative(v.args[1])
    if v.op in ("truediv_trunc", "truediv_floor", "fmod", "remainder") and len(v.args) == 2:
        d = v.args[1]
        return nonnegative(v.args[0]) and isinstance(d, int) and not isinstance(d, bool) and d > 0
    return False


def _n_operands(n: Node) -> int:
    return {"leaky_relu": 1, "elu": 1, "softplus": 1}.get(n.op, len(n.args))


def _right_align(a: Node, dm: DimMap, rank: int) -> DimMap:
    off = rank - a.rank
    return tuple(None if a.shape[j] == 1 else dm[off + j] for j in range(a.rank))


def trivial_back(n: Node, dm: DimMap) -> DimMap | None:
    """The dim map of a view's input where the view only adds or drops dims of size 1 (its
    other dims, in order, keep their sizes: `(1, 6, 1, 1)` as `(1, 6, 1)`, what flattening
    the trailing dims of a reduction's input makes of a per-channel operand), else None."""
    x = n.args[0] if n.args else None
    if not isinstance(x, Node):
        return None
    outs = [i for i, size in enumerate(n.shape) if size != 1]
    ins = [j for j, size in enumerate(x.shape) if size != 1]
    if len(outs) != len(ins) or any(n.shape[i] != x.shape[j] for i, j in zip(outs, ins, strict=True)):
        return None
    back: list[int | None] = [None] * x.rank
    for i, j in zip(outs, ins, strict=True):
        back[j] = dm[i]
    return tuple(back)


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
        args.append(f"{prefix}{i}" + (f", *_strides({prefix}{i})" if x.rank else ""))
    return params, args


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


def _decompose_direct(flat: str, needed: list[int], rank: int, prefix: str,
                      order: list[int] | None = None, sizes: list[str] | None = None,
                      block: str = "BLOCK_SIZE", lane: str = "tl.arange(0, BLOCK_SIZE)") -> list[str]:
    """Each coordinate in `needed` straight from a flat index (`pid * BLOCK_SIZE + lane`) over
    the domain's dims in `order`, outermost first (default: row-major, 0 to rank - 1; a walk
    in another input's memory order passes that order), with no division per element where the
    block allows: a coordinate whose span (the product of the sizes after it in the walk) is
    at least BLOCK_SIZE changes at most once inside a
    block, so it is one of two scalars computed per program, picked per element by whether
    the lane passed the block's wrap (`tl.where`); the last dim of at least BLOCK_SIZE
    elements likewise. A smaller span divides per element, `(flat // span_k) % D_k`. A
    coordinate nothing reads after specialisation (an operand loaded contiguously at the flat
    index) costs nothing at all.

    Why: an integer division by a run-time size is about twenty instructions; a per-channel
    operand of a 3-D convolution's epilogue cost three divisions and a remainder per element,
    which made a memory-bound epilogue compute-bound (KernelBench level-2 48 on the H100:
    0.430 ms against torch.compile's 0.294 ms, whose divisors are compile-time constants).
    The spans are 64-bit with the 64-bit index (a span can pass 2**31 when the tensor does).
    `sizes` names each dim's size (default `D<k>`), `block` the flat index's count a program,
    `lane` its offsets in the program (a pair kernel walks pairs: `kernels/pairs.py`)."""
    lines: list[str] = []
    if needed:
        lines += [f"base = pid * {block}  # the block's first flat index (offs = base + lane)",
                  f"lane = {lane}"]
    order = list(range(rank)) if order is None else list(order)
    size = sizes or [f"D{k}" for k in range(rank)]
    for k in needed:
        after = [size[j] for j in order[order.index(k) + 1:]]
        outermost = order.index(k) == 0
        c, dk = f"{prefix}{k}", size[k]
        if not after:  # the last dim: offs % D_k
            lines += [f"if {dk} >= {block}:  # rows of a block's width or more: at most one wrap",
                      f"    {c} = base - (base // {dk}) * {dk} + lane",
                      f"    {c} = tl.where({c} >= {dk}, {c} - {dk}, {c})",
                      "else:",
                      f"    {c} = {flat} % {dk}"]
            continue
        wide = " * ".join([f"tl.cast({after[0]}, tl.int64)", *after[1:]])
        lines += ["if INDEX_64:", f"    span{k} = {wide}", "else:",
                  f"    span{k} = {' * '.join(after)}"]
        q0, q1 = f"(base // span{k})", f"(base // span{k} + 1)"
        a, b = (q0, q1) if outermost else (f"{q0} % {dk}", f"{q1} % {dk}")
        lines += [f"if span{k} >= {block}:  # one value, or two across one wrap, per block",
                  f"    {c} = tl.where(base - (base // span{k}) * span{k} + lane >= span{k}, {b}, {a})",
                  "else:",
                  f"    {c} = ({flat} // span{k})" + ("" if outermost else f" % {dk}")]
    return lines


def static_sizes(group: Group) -> set[str]:
    """The size parameters (`D<k>`, and a reduction's `n_cols`) of dims that the traced program
    fixes (an int, not a symbol: a head count, a head or channel width, a constructor's size),
    passed as constexprs: Triton compiles one kernel per value (a dim fixed in the program
    rarely takes a second one), and a coordinate's division or remainder by such a size is a
    constant's (a shift and a mask for a power of two) instead of an integer division
    emulated in about twenty instructions per element. Device time per kernel on one H200
    (2026-11-29, `benchmarks/kernel_ab_gpu.py --without static`): LLaMA's rotary kernel, which
    divides by its head width and head count per element, 0.0119 -> 0.0098 ms (torch.compile's
    two take 0.007, compiled for the shapes); GPT-2's bias-GELU epilogue 0.0323 -> 0.0299;
    ResNet's batch-norm-ReLU 0.0121 -> 0.0113. Batch and sequence dims stay run-time values.
    A size written as an expression of the constructor's arguments alone (`kopt_channels`,
    `constructor_sizes`: the same for every call of one model) is fixed in the program too."""
    out = {f"D{k}" for k, s in enumerate(group.domain_sym) if _fixed_size(s)}
    if group.rdim is not None and _fixed_size(group.domain_sym[group.rdim]):
        out.add("n_cols")
    return out


def _fixed_size(s: Any) -> bool:
    """An int, or an expression of constructor arguments only (no input size, no lead)."""
    if type(s) is int:
        return True
    expr = s.expr if isinstance(s, Sym) else s
    free = getattr(expr, "free_symbols", None)
    return bool(free) and all(str(x).startswith("kopt_") and str(x) != LEAD_SYMBOL for x in free)


def _finish_simple(w: _Writer, group: Group, part: Partition, name: str, kind: str,
                   head: list[str], body: list[str], sizes: list[str],
                   tunables: dict[str, list[Any]], config: dict[str, Any],
                   extra_constexpr: list[str] | None = None,
                   blocks: list[str] | None = None, split_slots: int = 0) -> KernelSource:
    """`split_slots`: a tiled reduction split across programs along its reduced dim, with this
    many float32 partials per (split, column) (reduction.py's `_split_phases`)."""
    in_params, in_args = _input_params(w, group.inputs, "x")
    out_params, out_args = _input_params(w, group.outputs, "y")
    flags = [f"X{i}_CONTIG" for i in w.contig_flags] + [f"X{i}_INNER" for i in w.inner_flags]
    sig = ["    # inputs: pointer, then one stride per dim (0 where broadcast)"] + _signature(in_params)
    sig += ["    # outputs (contiguous)"] + _signature(out_params)
    static = static_sizes(group)
    sig += ["    # sizes (constexpr: fixed in the traced program, a constant to the compiler)"]
    sig += [f"    {s}: tl.constexpr," if s in static else f"    {s},"
            for s in sizes + [p for p, _ in w.scalar_args]]
    if split_slots:
        sig += ["    # the split's partials: (slot, split, column) float32, splits, columns",
                "    part_ptr, n_split, n_all,"]
    sig += [f"    {c}: tl.constexpr," for c in (blocks or ["BLOCK_SIZE"]) + (extra_constexpr or []) + flags]
    kernel = ["@triton.jit", f"def {name}("] + sig + ["):"]
    kernel += [f"    {line}" for line in head] + body
    launcher = _simple_launcher(w, group, name, kind, in_args, out_args, sizes, split_slots)
    return KernelSource(name, f"_launch_{group.name}", kind, "\n".join(kernel) + "\n",
                        launcher, _call_args(w, group), _origins(group),
                        tunables, config, w.helpers)


def _call_args(w: _Writer, group: Group) -> list[str]:
    return ["device"] + [f"@{x.name}" for x in group.inputs] + \
        [f"={k}" for k in range(len(group.domain)) if k not in w.dim_sources] + \
        [f"!{code}" for _, code in w.scalar_args]


def _simple_launcher(w: _Writer, group: Group, name: str, kind: str, in_args: list[str],
                     out_args: list[str], sizes: list[str], split_slots: int = 0) -> str:
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
        like = group.laid_like.get(y)
        if like is not None and w.walk is not None:  # dense in the walk's order, whatever x's padding
            inverse = tuple(w.walk.index(d) for d in range(len(w.walk)))
            how = "without the transpose of" if group.walk is not None else "like"
            lines.append(f"    y{o} = torch.empty(({''.join(f'D[{d}], ' for d in w.walk)}), device=device, "
                         f"dtype={y.dtype}).permute{inverse}  # {y.name}, laid out {how} {like.name}")
            continue
        if like is not None:  # the layout of a permuted input (fusion._outputs_in_input_layout)
            lines.append(f"    y{o} = torch.empty_like(x{group.inputs.index(like)}, dtype={y.dtype})"
                         f"  # {y.name}, laid out like {like.name}")
            continue
        lines.append(f"    y{o} = torch.empty(({shape}{',' if len(dm) == 1 else ''}), device=device, "
                     f"dtype={y.dtype})  # {y.name}")
    outs = ", ".join(f"y{o}" for o in range(len(group.outputs)))
    ret = f"    return {outs}{',' if len(group.outputs) == 1 else ''}"
    if kind == "pointwise":
        lines += ["    n_elements = math.prod(D)", "    if n_elements == 0:", "    " + ret]
        size_args = "n_elements, *D"
        walk = w.walk
        if walk is None:
            flags = "".join(f", X{i}_CONTIG=x{i}.is_contiguous() and tuple(x{i}.shape) == D"
                            for i in w.contig_flags)
        else:  # the flat index walks the domain in `walk` order: dense in that order
            flags = "".join(f", X{i}_CONTIG=_dense_walk(x{i}, D, {tuple(walk)})" for i in w.contig_flags)
        flags += "".join(f", X{i}_INNER=_laid_from(x{i}, D)" for i in w.inner_flags)
        if w.pair_kernel:  # the body over the last dim's pairs (kernels/pairs.py)
            flags += ", PAIRS=D[-1] % 2 == 0"
        spans = "".join(f", _span(x{i})" for i in range(len(group.inputs)))
        if group.nhwc:  # one (hw, channels) tile of one image per program
            lines += [f'    cfg = _launch_config("{name}", "tiled", D[2] * D[3], D[1])',
                      '    grid = (_cdiv(D[2] * D[3], cfg["BLOCK_HW"]), '
                      '_cdiv(D[1], cfg["BLOCK_C"]), D[0])']
            blocks, block = 'BLOCK_HW=cfg["BLOCK_HW"], BLOCK_C=cfg["BLOCK_C"]', 'cfg["BLOCK_HW"] * cfg["BLOCK_C"]'
        else:
            lines += [f'    cfg = _launch_config("{name}", "pointwise", n_elements)',
                      '    grid = (_cdiv(n_elements, cfg["BLOCK_SIZE"]),)']
            blocks, block = 'BLOCK_SIZE=cfg["BLOCK_SIZE"]', 'cfg["BLOCK_SIZE"]'
        # (sizes added in the index type: every value stays under twice the largest extent)
        limit = "2**30" if w.used_index_zero else "2**31"
        consts = f'{blocks}, INDEX_64=max([n_elements + {block}{spans}]) >= {limit}{flags}'
    elif kind == "tiled_reduction":  # (BLOCK_C contiguous columns of one outer index) per program
        rd = group.rdim
        lines += [f"    n_cols = D[{rd}]  # the reduced extent",
                  f"    n_inner = math.prod(D[{rd + 1}:])",
                  f"    n_outer = math.prod(D[:{rd}])",
                  "    if math.prod(D) == 0 or n_inner * n_outer == 0:", "    " + ret,
                  f'    cfg = _launch_config("{name}", "tiled_reduction", n_cols, n_inner)',
                  '    grid = (n_outer * _cdiv(n_inner, cfg["BLOCK_C"]),)',
                  '    n_split = 1']
        size_args = "n_cols, " + ", ".join(f"D[{k}]" for k in range(r) if k != rd)
        size_args = size_args.rstrip(", ")
        # EVEN: no tile of any program (of any split) crosses the end of a dim
        consts = ('BLOCK_SIZE=cfg["BLOCK_SIZE"], BLOCK_C=cfg["BLOCK_C"], '
                  'ONE_PASS=n_cols <= cfg["BLOCK_SIZE"], EVEN=n_inner % cfg["BLOCK_C"] == 0 and '
                  'n_cols % (n_split * cfg["BLOCK_SIZE"]) == 0')
        consts += "".join(f", X{i}_CONTIG=x{i}.is_contiguous() and tuple(x{i}.shape) == D"
                          for i in w.contig_flags)
        consts += "".join(f", X{i}_INNER=_laid_from(x{i}, D)" for i in w.inner_flags)
    else:
        rd = group.rdim
        multirow = getattr(w, "multirow", False)
        lines += [f"    n_cols = D[{rd}]",
                  "    n_rows = math.prod(D) // max(n_cols, 1)",
                  "    if n_rows == 0 or math.prod(D) == 0:", "    " + ret,
                  f'    cfg = _launch_config("{name}", "reduction", n_cols, n_rows)',
                  '    grid = (_cdiv(n_rows, cfg["ROWS"]),)' if multirow else "    grid = (n_rows,)"]
        size_args = "n_cols, " + ", ".join(f"D[{k}]" for k in range(r) if k != rd)
        size_args = size_args.rstrip(", ")
        consts = 'BLOCK_SIZE=cfg["BLOCK_SIZE"], ONE_PASS=n_cols <= cfg["BLOCK_SIZE"]'
        if multirow:
            consts += ', ROWS=cfg["ROWS"]'
    scal = "".join(f", {p}" for p, _ in w.scalar_args)
    all_args = ", ".join(in_args + out_args)
    call = f"{name}[grid]({all_args + ', ' if all_args else ''}{size_args}{scal}"
    if split_slots:  # partial statistics of each split, then each split's outputs from all
        lines += ['    programs = grid[0]',
                  '    n_split = _tiled_split(programs, n_cols, cfg["BLOCK_SIZE"])',
                  '    grid = (programs, n_split)',
                  '    if n_split == 1:',
                  f'        {call}, y0, 1, n_inner * n_outer, {consts}, PHASE=0, SPLIT_P=1, '
                  'num_warps=cfg["num_warps"])',
                  '    else:',
                  f'        part = torch.empty(({split_slots}, n_split, n_inner * n_outer), '
                  'device=device, dtype=torch.float32)']
        for phase in (1, 2):
            lines.append(f'        {call}, part, n_split, n_inner * n_outer, {consts}, PHASE={phase}, '
                         'SPLIT_P=_pow2(n_split), num_warps=cfg["num_warps"])')
    else:
        lines.append(f'    {call}, {consts}, num_warps=cfg["num_warps"])')
    lines.append(ret)
    return "\n".join(lines) + "\n"
