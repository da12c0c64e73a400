"""The offline engineer's graph: core-ATen nodes lowered to a small set of primitive ops.

`capture.py` turns a `torch.export` program into this graph. Composite ATen ops that the
code generator fuses (softmax, log_softmax, layer_norm, var, mean, logsumexp, gather along
the reduced dim) are lowered here into primitive pointwise and reduction nodes, so fusion
and emission deal with one small vocabulary:

- pointwise ops (`POINTWISE`), with torch's broadcasting;
- primitive reductions along one dim: `sum`, `amax`, `amin`, `select` (gather of one element
  per row, written as a masked sum);
- generators whose values depend only on shapes (`arange`, `full`);
- layout ops that only re-index (`unsqueeze`, `squeeze`, `permute`, `expand`, `view`, ...);
- `mm` / `bmm` anchors (addmm becomes mm + a bias add);
- `fallback`: any other ATen op, run by PyTorch in the candidate.

Shapes are kept twice: `shape` holds the traced sizes (ints), `sym` the sizes as sympy
expressions over the inputs' dynamic dims (or ints), so the candidate never bakes a size it
can read at run time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

# Ops whose output element i depends only on input elements at i (after broadcasting).
POINTWISE = {
    "add", "sub", "mul", "div", "truediv_floor", "truediv_trunc", "neg", "abs", "exp", "exp2",
    "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
    "relu", "gelu", "gelu_tanh", "silu", "leaky_relu", "elu", "hardtanh", "hardsigmoid",
    "hardswish", "softplus", "mish", "clamp", "minimum", "maximum", "pow", "reciprocal", "sign",
    "floor", "ceil", "trunc", "round", "eq", "ne", "lt", "le", "gt", "ge", "where",
    "logical_and", "logical_or", "logical_xor", "logical_not", "cast", "identity", "isnan",
    "isinf", "fmod", "remainder", "sinh", "cosh", "square",
}
REDUCTIONS = {"sum", "amax", "amin", "select"}
SCANS = {"cumsum", "cumprod"}
ARG_REDUCTIONS = {"argmax", "argmin"}
"""The index of the largest / smallest element along one dim (`dim`, `keepdim` kwargs)."""
"""Cumulative sum and product along one dim (`dim` kwarg): a scan kernel of their own."""
WINDOW_TAP = "window_tap"
"""One tap of a pooling window: out[..., o, ...] = x[..., o * stride + t * dilation - padding, ...]
along each pooled dim, `fill` outside x (a masked load of x, which is never computed in the
same kernel: its neighbours are read)."""
TAKE = "take"
"""Rows of x picked by index tensors: args [x, i_0, ..., i_{k-1}], `dim` d; the i_j index x's
dims d..d+k-1 and broadcast together to B, so out = x.shape[:d] + B + x.shape[d+k:] and
out[a, b, c] = x[a, i_0[b], ..., i_{k-1}[b], c] (negative indices count from the end): an
embedding, `index_select`, `x[:, idx]`. With `gather` (torch.gather along d, one index tensor
of x's rank): out.shape = i_0.shape and out[c] = x[c with c_d = i_0[c]]. A masked load of x at
the indices' values (x is loaded, never computed in the same kernel)."""
GENERATORS = {"arange", "full"}
LAYOUT = {"view", "flatten", "unsqueeze", "squeeze", "permute", "expand", "slice", "select_index",
          "split_item", "as_strided", "layout_fallback"}
MATMUL = {"mm", "bmm"}
CACHED_CAT = "cached_cat"
"""Parameters concatenated along `kwargs["dim"]` (a list of input nodes as the one arg), made
once per weight version and kept on the module (`_cached_cat` in the candidate file; key
`kwargs["key"]`): forward's, never inside a kernel (sibling_products.py)."""

# Core-ATen packet name -> primitive op (arguments are rewritten by `lower_node`).
_SIMPLE = {
    "neg": "neg", "abs": "abs", "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2",
    "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin",
    "cos": "cos", "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf", "relu": "relu",
    "silu": "silu", "reciprocal": "reciprocal", "sign": "sign", "floor": "floor",
    "ceil": "ceil", "trunc": "trunc", "round": "round", "logical_not": "logical_not",
    "bitwise_not": "logical_not", "isnan": "isnan", "isinf": "isinf",
    "sinh": "sinh", "cosh": "cosh", "mish": "mish",
    "hardsigmoid": "hardsigmoid", "hardswish": "hardswish", "square": "square",
    "clone": "identity", "alias": "identity", "lift_fresh_copy": "identity",
    "contiguous": "identity", "detach": "identity",
    "minimum": "minimum", "maximum": "maximum", "fmod": "fmod", "remainder": "remainder",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
    "bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_xor": "logical_xor",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
}
_VIEWS = {"view": "view", "_unsafe_view": "view", "reshape": "view", "unsqueeze": "unsqueeze",
          "squeeze": "squeeze", "permute": "permute", "expand": "expand", "t": "permute",
          "transpose": "permute", "slice": "slice", "select": "select_index",
          "as_strided": "as_strided", "unbind": "layout_fallback",
          "split_with_sizes": "layout_fallback", "split": "layout_fallback",
          "chunk": "layout_fallback"}


@dataclass(frozen=True)
class Sym:
    """A size that is only known at run time: a sympy expression over input dims."""

    expr: Any
    hint: int


def _nested_nodes(v: list[Any] | tuple[Any, ...], out: list[Node]) -> None:
    for x in v:
        if isinstance(x, Node):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            _nested_nodes(x, out)


@dataclass(eq=False)
class Node:
    """One value of the lowered graph."""

    name: str
    op: str
    """A primitive op name (POINTWISE, REDUCTIONS, ...), `input`, `fallback` or `getitem`."""
    args: list[Any] = field(default_factory=list)
    """Operands: `Node`, `Sym`, Python scalars, lists of those, dtypes."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] = ()
    """Traced sizes."""
    sym: tuple[Any, ...] = ()
    """Sizes as ints or sympy expressions."""
    dtype: torch.dtype = torch.float32
    target: Any = None
    """For `fallback`: the ATen OpOverload that PyTorch runs."""
    origin: str = ""
    """The exported graph node this one comes from (for comments and reports)."""
    multi: bool = False
    """A fallback with a tuple result (read through `getitem`)."""

    @property
    def rank(self) -> int:
        return len(self.shape)

    def inputs(self) -> list[Node]:
        """The nodes among args and kwargs (nested lists included), in order. The hottest call
        of partitioning (ResNet101: 366,000 calls), hence the flat loop."""
        out: list[Node] = []
        for v in self.args:
            if isinstance(v, Node):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                _nested_nodes(v, out)
        if self.kwargs:
            for v in self.kwargs.values():
                if isinstance(v, Node):
                    out.append(v)
                elif isinstance(v, (list, tuple)):
                    _nested_nodes(v, out)
        return out

    def __repr__(self) -> str:
        return f"Node({self.name}={self.op}{tuple(self.shape)})"


@dataclass
class InputInfo:
    """Where a graph input comes from in the candidate's forward."""

    kind: str
    """`arg` (a positional forward argument), `kwarg`, `param`, `buffer`, `constant`, `state`
    (a plain tensor attribute: state outside the state_dict, read at every call)."""
    key: str
    """Argument name, state_dict key, or the attribute's dotted path."""
    index: int = 0
    value: torch.Tensor | None = None
    """For `constant` (and non-persistent buffers): the tensor to embed."""


@dataclass(frozen=True)
class LibraryCall:
    """The one PyTorch call a lowered op stands for: a depthwise convolution lowered to window
    taps is `conv2d`, an eval-mode batch norm lowered to its affine steps is `batch_norm`. A
    region's PyTorch form (`fallback.TorchRegion`) makes that call instead of writing out each
    step: 25 taps as PyTorch ops are 25 slices and 49 passes over the tensor, where cuDNN's
    convolution is one (a depthwise 5x5 region of an MBConv block on an H200 had no PyTorch
    form to fall back on, and the whole block ran 0.89x eager)."""

    op: str
    """`conv`, `batch_norm`, `max_pool` or `avg_pool`."""
    operands: tuple[Any, ...]
    """Nodes (None where absent) in the call's argument order: (x, weight, bias) for `conv`,
    (x, mean, var, weight, bias) for `batch_norm`."""
    params: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments: stride, padding, dilation for `conv`; eps for `batch_norm`; the
    pooled dims, window, stride, padding, dilation, ceil mode and padding count of a pool."""


@dataclass
class Graph:
    """The lowered graph in topological order."""

    nodes: list[Node]
    inputs: dict[str, InputInfo]
    """Input node name -> where it comes from."""
    outputs: list[Node | Any]
    """Forward's return values (nodes, or constants)."""
    out_spec: str = "tuple"
    """`single`: forward returns outputs[0]; `tuple`: a tuple."""
    symbols: dict[str, str] = field(default_factory=dict)
    """Sympy symbol name -> Python expression of it in forward (`x.shape[0]`)."""
    attributes: dict[str, str] = field(default_factory=dict)
    """ModelNew attribute -> the constructor argument it keeps (`_kopt_num_groups` ->
    `num_groups`): a size the model fixes from its constructor, read in forward."""
    state_writes: list[str] = field(default_factory=list)
    """Dotted paths of the plain tensor attributes forward replaces, in order: the last
    `len(state_writes)` entries of `outputs` are their new values (not forward's return)."""
    library_calls: dict[Node, LibraryCall] = field(default_factory=dict)
    """Lowered ops -> the library call each stands for (`LibraryCall`)."""

    def users(self) -> dict[Node, list[Node]]:
        users: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs():
                if n not in users[i]:
                    users[i].append(n)
        return users


def state_var(path: str) -> str:
    """The generated forward's variable for the plain tensor attribute at `path`."""
    return "state_" + re.sub(r"[^A-Za-z0-9_]", "_", path)


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def broadcast_shapes(*shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    """Right-aligned broadcast of shapes (a 1 gives way to any size; sizes may be symbolic)."""
    rank = max(len(s) for s in shapes)
    out: list[Any] = []
    for i in range(rank):
        sizes = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
        big = [x for x in sizes if not (isinstance(x, int) and x == 1)]
        out.append(big[0] if big else 1)
    return tuple(out)


def broadcasts_to(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether a tensor of shape `src` broadcasts to `dst` (torch's rules, right-aligned)."""
    return len(src) <= len(dst) and all(s in (1, d) for s, d in zip(reversed(src), reversed(dst),
                                                                       strict=False))


def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _size_step(node: Node, dim: int) -> tuple[Node, int] | None:
    """The (operand, dim) whose size node's `dim` has by the op's definition, or None."""
    args = [a for a in node.args if isinstance(a, Node)]
    if node.op == "unsqueeze" and args:
        if dim == node.args[1]:
            return None
        return args[0], dim - (dim > node.args[1])
    if node.op == "permute" and args:
        return args[0], list(node.args[1])[dim]
    if node.op == "select_index" and args and isinstance(node.args[1], int):  # x[t]: one dim less
        gone = norm_dim(node.args[1], args[0].rank)
        return args[0], dim + (dim >= gone)
    if node.op == "slice" and args and isinstance(node.args[1], int):
        return (args[0], dim) if norm_dim(node.args[1], args[0].rank) != dim else None
    if node.op == "expand" and args:  # a dim kept, not broadcast (a class token's width)
        src = dim - (node.rank - args[0].rank)
        if src >= 0 and args[0].shape[src] == node.shape[dim] and args[0].shape[src] != 1:
            return args[0], src
        return None
    if node.op == WINDOW_TAP and args:
        if any(t[0] == dim for t in node.kwargs["taps"]):
            return None  # pooled or concatenated along dim
        return (args[0], dim) if args[0].rank == node.rank else None
    if node.op in POINTWISE or node.op in ("identity", "cast"):
        same = [a for a in args if a.rank == node.rank and a.shape == node.shape]
        return (same[0], dim) if same else None
    if node.op in MATMUL and len(args) == 2:
        a, b = args
        if dim == node.rank - 1:
            return b, b.rank - 1
        if dim == node.rank - 2:
            return a, a.rank - 2
        return None
    if node.op == "fallback" and str(node.target) == "aten.copy.default" and args:
        return args[0], dim  # copy(dst, src): dst's shape (src broadcast into it)
    if node.op == "fallback" and "convolution" in str(node.target) and len(args) >= 2:
        transposed = len(node.args) > 6 and node.args[6] is True
        groups = node.args[8] if len(node.args) > 8 else 1
        if dim == 0:
            return args[0], 0
        if dim == 1 and not transposed:
            return args[1], 0  # output channels: the weight's first dim
        if dim == 1 and transposed and groups == 1:
            return args[1], 1
    return None


def constructor_symbol(name: str) -> Any:
    """The forward symbol of constructor argument `name` (`bias_shape[0]` ->
    `kopt_bias_shape_0`): a local set from the ModelNew attribute `_` + its name."""
    import sympy

    return sympy.Symbol("kopt_" + re.sub(r"\W+", "_", name).strip("_"), integer=True, positive=True)


def keep_argument(attributes: dict[str, str], symbols: dict[str, str], name: str) -> Any:
    """Constructor argument `name` kept by ModelNew's __init__ as an attribute that forward
    reads (registered in a graph's or builder's `attributes` and `symbols`); its symbol."""
    sym = constructor_symbol(name)
    attributes[f"_{sym}"] = name
    symbols[str(sym)] = f"self._{sym}"
    return sym


class Builder:
    """Appends lowered nodes with fresh names."""

    def __init__(self, ctor_ints: dict[str, int] | None = None) -> None:
        self.nodes: list[Node] = []
        self._names: set[str] = set()
        self.ctor_ints = dict(ctor_ints or {})
        """The constructor's integer arguments (their source, `num_groups` or
        `bias_shape[0]`, and value at the traced input set)."""
        self.symbols: dict[str, str] = {}
        self.attributes: dict[str, str] = {}
        self.arg_names: dict[Node, str] = {}
        """Forward-argument input nodes -> the argument's name in forward."""
        self.state_keys: dict[Node, tuple[str, str]] = {}
        """Parameter and buffer input nodes -> (`param` | `buffer`, state_dict key)."""
        self.library_calls: dict[Node, LibraryCall] = {}
        """Lowered ops -> the library call each stands for (`Graph.library_calls`)."""
        self.scatters: dict[Node, Any] = {}
        """Values lowered from `slice_scatter` -> what they wrote where (`scatter.Scatter`)."""
        self.cats: dict[Node, tuple[tuple[Node, ...], int]] = {}
        """Values lowered from `cat` -> (their parts, the dim): a view that merges a stack's
        dims reads them (`scatter.lower_interleave_view`)."""
        self.arg_sizes: dict[str, list[tuple[int, ...]]] = {}
        """A forward argument's shape in each input set of the case (what sizes the candidate
        must run at besides the traced ones)."""

    def runtime_size(self, x: Node, d: int) -> Any:
        """x's size along d as a sympy expression read at run time, also where torch.export
        fixed it at its traced value (it does so along a pooled dim, and along every dim a
        weight's shape decides): a symbol for the size of the forward argument, parameter or
        buffer it comes from, followed back through views that keep the dim, pointwise ops,
        and the output channels of a convolution or the columns of a product; else the
        fixed size. So a candidate traced at one constructor runs at another."""
        s = x.sym[d]
        if not isinstance(s, int):
            return s
        import sympy

        found = self._size_source(x, d)
        if found is None:
            return s
        name, code = found
        self.symbols[name] = code
        return sympy.Symbol(name, integer=True, positive=True)

    def size_origin(self, x: Node, d: int) -> tuple[Node, int] | None:
        """(input node, dim): the forward argument, parameter or buffer whose size x's dim d
        equals by construction, followed back through views, pointwise ops and products."""
        node, dim, want = x, d, x.shape[d]
        for _ in range(256):
            if node.shape[dim] != want:
                return None
            if node in self.arg_names or node in self.state_keys:
                return node, dim
            step = _size_step(node, dim)
            if step is None:
                return None
            node, dim = step
        return None

    def arg_size_in_every_set(self, x: Node, d: int) -> list[int] | None:
        """x's size along d in each input set of the case, when it is a forward argument's size
        (`size_origin`); else None (a weight's size may follow the constructor)."""
        found = self.size_origin(x, d)
        if found is None or found[0] not in self.arg_names:
            return None
        node, dim = found
        return [s[dim] for s in self.arg_sizes.get(self.arg_names[node], []) if len(s) > dim]

    def _size_source(self, x: Node, d: int) -> tuple[str, str] | None:
        """(symbol name, forward source) of the tensor size x's dim d equals by construction."""
        found = self.size_origin(x, d)
        if found is None:
            return None
        node, dim = found
        arg = self.arg_names.get(node)
        if arg is not None:
            return f"{re.sub(r'[^A-Za-z0-9_]', '_', arg)}_size{dim}", f"{arg}.shape[{dim}]"
        kind, key = self.state_keys[node]
        getter = "get_parameter" if kind == "param" else "get_buffer"
        return (f"w_{re.sub(r'[^A-Za-z0-9_]', '_', key)}_size{dim}",
                f'self.{getter}("{key}").shape[{dim}]')

    def ctor_size(self, value: int) -> Any:
        """`value` as a size read from the constructor argument that has it (a symbol whose
        forward code is a ModelNew attribute set in __init__), when exactly one argument has
        that value; else `value` itself, fixed at its traced value."""
        names = [k for k, v in self.ctor_ints.items() if v == value]
        if len(names) != 1:
            return value
        return keep_argument(self.attributes, self.symbols, names[0])

    def add(self, node: Node) -> Node:
        base, i = node.name, 1
        while node.name in self._names:
            node.name = f"{base}_{i}"
            i += 1
        self._names.add(node.name)
        self.nodes.append(node)
        return node

    def op(self, name: str, op: str, args: list[Any], like: Node, *, shape: tuple[int, ...] | None = None,
           sym: tuple[Any, ...] | None = None, dtype: torch.dtype | None = None,
           origin: str = "", **kwargs: Any) -> Node:
        return self.add(Node(name, op, list(args), dict(kwargs),
                             like.shape if shape is None else shape,
                             like.sym if sym is None else sym,
                             like.dtype if dtype is None else dtype, origin=origin or like.origin))


def reduced(shape: tuple[Any, ...], dim: int, keepdim: bool) -> tuple[Any, ...]:
    if keepdim:
        return shape[:dim] + (1,) + shape[dim + 1:]
    return shape[:dim] + shape[dim + 1:]


def lower_reduction(b: Builder, kind: str, x: Node, dim: int, keepdim: bool, name: str,
                    origin: str, dtype: torch.dtype | None = None) -> Node:
    """One primitive reduction node of x along dim."""
    dim = norm_dim(dim, x.rank)
    return b.op(name, kind, [x], x, shape=reduced(x.shape, dim, keepdim),
                sym=reduced(x.sym, dim, keepdim), dtype=dtype or x.dtype, origin=origin,
                dim=dim, keepdim=keepdim)


def lower_mean(b: Builder, x: Node, dim: int, keepdim: bool, name: str, origin: str,
               dtype: torch.dtype | None = None) -> Node:
    s = lower_reduction(b, "sum", x, dim, keepdim, f"{name}_sum", origin, torch.float32)
    return b.op(name, "div", [s, ("numel", norm_dim(dim, x.rank))], s, dtype=dtype or x.dtype,
                origin=origin)


def lower_var(b: Builder, x: Node, dim: int, keepdim: bool, correction: float, name: str,
              origin: str) -> tuple[Node, Node]:
    """(var, mean) of x along dim, two-pass (mean first, then squared deviations)."""
    mean_k = lower_mean(b, x, dim, True, f"{name}_mean", origin, torch.float32)
    dev = b.op(f"{name}_dev", "sub", [x, mean_k], x, dtype=torch.float32, origin=origin)
    sq = b.op(f"{name}_sq", "mul", [dev, dev], dev, origin=origin)
    ss = lower_reduction(b, "sum", sq, dim, keepdim, f"{name}_ss", origin, torch.float32)
    d = norm_dim(dim, x.rank)
    var = b.op(name, "div", [ss, ("numel_minus", d, correction)], ss, dtype=x.dtype, origin=origin)
    mean = mean_k
    if not keepdim:
        mean = lower_mean(b, x, dim, False, f"{name}_mean_out", origin, x.dtype)
    return var, mean


def lower_softmax(b: Builder, x: Node, dim: int, name: str, origin: str, log: bool,
                  out_dtype: torch.dtype) -> Node:
    """softmax = exp(x - max) / sum(exp(x - max)); log_softmax = x - max - log(sum)."""
    m = lower_reduction(b, "amax", x, dim, True, f"{name}_max", origin, torch.float32)
    sh = b.op(f"{name}_shift", "sub", [x, m], x, dtype=torch.float32, origin=origin)
    e = b.op(f"{name}_exp", "exp", [sh], sh, origin=origin)
    s = lower_reduction(b, "sum", e, dim, True, f"{name}_sum", origin, torch.float32)
    if log:
        ls = b.op(f"{name}_logsum", "log", [s], s, origin=origin)
        return b.op(name, "sub", [sh, ls], sh, dtype=out_dtype, origin=origin)
    return b.op(name, "div", [e, s], e, dtype=out_dtype, origin=origin)


def lower_logsumexp(b: Builder, x: Node, dim: int, keepdim: bool, name: str, origin: str) -> Node:
    m = lower_reduction(b, "amax", x, dim, True, f"{name}_max", origin, torch.float32)
    # torch's logsumexp keeps -inf rows at -inf: shift by 0 where the max is infinite.
    inf = b.op(f"{name}_isinf", "isinf", [m], m, dtype=torch.bool, origin=origin)
    safe = b.op(f"{name}_safe", "where", [inf, 0.0, m], m, origin=origin)
    sh = b.op(f"{name}_shift", "sub", [x, safe], x, dtype=torch.float32, origin=origin)
    e = b.op(f"{name}_exp", "exp", [sh], sh, origin=origin)
    s = lower_reduction(b, "sum", e, dim, keepdim, f"{name}_sum", origin, torch.float32)
    ls = b.op(f"{name}_log", "log", [s], s, origin=origin)
    safe_r = safe
    if not keepdim:
        safe_r = b.op(f"{name}_safe_sq", "squeeze", [safe], s, origin=origin, dims=[norm_dim(dim, x.rank)])
    return b.op(name, "add", [ls, safe_r], ls, dtype=x.dtype, origin=origin)


def lower_layer_norm(b: Builder, x: Node, weight: Node | None, bias: Node | None, eps: float,
                     name: str, origin: str) -> tuple[Node, Node, Node]:
    """(out, mean, rstd) of a layer norm over the last dim."""
    var, mean = lower_var(b, x, x.rank - 1, True, 0.0, f"{name}_var", origin)
    return normalize(b, x, mean, var, weight, bias, eps, name, origin)


def normalize(b: Builder, x: Node, mean: Node, var: Node, weight: Node | None,
              bias: Node | None, eps: float, name: str, origin: str) -> tuple[Node, Node, Node]:
    """(out, mean, rstd): (x - mean) * rsqrt(var + eps) * weight + bias in float32, out in x's
    dtype; mean and var broadcast against x (a norm's statistics, kept dims)."""
    var = b.op(f"{name}_varf", "cast", [var], var, dtype=torch.float32, origin=origin)
    ve = b.op(f"{name}_var_eps", "add", [var, float(eps)], var, dtype=torch.float32, origin=origin)
    rstd = b.op(f"{name}_rstd", "rsqrt", [ve], ve, origin=origin)
    dev = b.op(f"{name}_centered", "sub", [x, mean], x, dtype=torch.float32, origin=origin)
    y = b.op(f"{name}_normed", "mul", [dev, rstd], dev, origin=origin)
    if weight is not None:
        y = b.op(f"{name}_scaled", "mul", [y, weight], y, origin=origin)
    if bias is not None:
        y = b.op(f"{name}_shifted", "add", [y, bias], y, origin=origin)
    out = b.op(name, "identity", [y], y, dtype=x.dtype, origin=origin)
    return out, mean, rstd


def lower_group_norm(b: Builder, x: Node, weight: Node | None, bias: Node | None, groups: int,
                     eps: float, name: str, origin: str) -> tuple[Node, Node, Node]:
    """(out, mean, rstd) of a group norm: x (N, C, *S) viewed as (N, groups, -1), a layer
    norm's statistics over the last dim, then the map of `group_norm_map` on x itself (x
    without spatial dims: the map in the grouped layout, viewed back). Only the group count
    is a fixed size (the module's own); C and S are read from x at run time."""
    count = groups
    groups = b.ctor_size(groups)
    m = math.prod(x.shape[1:]) // count
    m_sym: Any = 1
    for s in x.sym[1:]:
        m_sym = m_sym * s
    xg = b.op(f"{name}_grouped", "view", [x, [x.sym[0], groups, -1]], x,
              shape=(x.shape[0], count, m), sym=(x.sym[0], groups, m_sym // count), origin=origin)
    var, mean = lower_var(b, xg, 2, True, 0.0, f"{name}_var", origin)
    var = b.op(f"{name}_varf", "cast", [var], var, dtype=torch.float32, origin=origin)
    ve = b.op(f"{name}_var_eps", "add", [var, float(eps)], var, dtype=torch.float32, origin=origin)
    rstd = b.op(f"{name}_rstd", "rsqrt", [ve], ve, origin=origin)
    if math.prod(x.shape[2:]) >= 2:
        out = group_norm_map(b, x, mean, rstd, count, groups, weight, bias, name, origin)
    else:  # (N, C): per-channel statistics would be as large as x: the map in groups
        dev = b.op(f"{name}_centered", "sub", [xg, mean], xg, dtype=torch.float32, origin=origin)
        y = b.op(f"{name}_normed", "mul", [dev, rstd], dev, origin=origin)
        y = b.op(f"{name}_ungrouped", "view", [y, [x.sym[0], -1, *x.sym[2:]]], x,
                 dtype=torch.float32, origin=origin)
        out = _channel_affine(b, y, weight, bias, x.dtype, name, origin)
    stats = (x.shape[0], count)
    stats_sym = (x.sym[0], groups)
    mean_out = b.op(f"{name}_mean_out", "squeeze", [mean, [2]], mean, shape=stats, sym=stats_sym,
                    dtype=x.dtype, origin=origin)
    rstd_out = b.op(f"{name}_rstd_out", "squeeze", [rstd, [2]], rstd, shape=stats, sym=stats_sym,
                    dtype=x.dtype, origin=origin)
    return out, mean_out, rstd_out


def group_norm_map(b: Builder, x: Node, mean: Node, rstd: Node, count: int, groups: Any,
                   weight: Node | None, bias: Node | None, name: str, origin: str) -> Node:
    """`(x - mean) * rstd * weight + bias` of a group norm over x (N, C, *S) itself, from the
    (N, groups, 1, ...) statistics repeated per channel ((N, C, 1, ...): N * C values, a copy
    PyTorch makes in a few microseconds). The map then walks x's own domain, so it is one
    kernel with whatever pointwise ops and reductions follow the norm (level-2 92's tanh,
    hardswish, residual add and logsumexp over the channels), and the statistics' kernel
    writes only the statistics: x is read twice and the output written once, where the
    normalised values in the grouped layout were written and read back by the affine map."""
    from torch.utils._sympy.functions import FloorDiv

    tail = (1,) * (x.rank - 2)
    n, c, cpg = x.shape[0], x.shape[1], x.shape[1] // count
    channels = b.runtime_size(x, 1)  # (a convolution's output channels: its weight's)
    both_ints = isinstance(channels, int) and isinstance(groups, int)
    cpg_sym = channels // groups if both_ints else FloorDiv(channels, groups)

    def per_channel(v: Node, what: str) -> Node:
        v3 = b.op(f"{name}_{what}_g", "view", [v, [x.sym[0], groups, 1]], v,
                  shape=(n, count, 1), sym=(x.sym[0], groups, 1), origin=origin)
        e = b.op(f"{name}_{what}_e", "expand", [v3, [x.sym[0], groups, cpg_sym]], v3,
                 shape=(n, count, cpg), sym=(x.sym[0], groups, cpg_sym), origin=origin)
        return b.op(f"{name}_{what}_c", "view", [e, [x.sym[0], -1, *tail]], e,
                    shape=(n, c, *tail), sym=(x.sym[0], channels, *tail), origin=origin)

    dev = b.op(f"{name}_centered", "sub", [x, per_channel(mean, "mean")], x, dtype=torch.float32,
               origin=origin)
    y = b.op(f"{name}_normed", "mul", [dev, per_channel(rstd, "rstd")], dev, origin=origin)
    return _channel_affine(b, y, weight, bias, x.dtype, name, origin)


def _channel_affine(b: Builder, y: Node, weight: Node | None, bias: Node | None,
                    dtype: torch.dtype, name: str, origin: str) -> Node:
    """`y * weight + bias` with the (C,) weight and bias along y's dim 1, as `dtype`."""
    tail = (1,) * (y.rank - 2)
    for what, v, op, step in (("weight", weight, "mul", "scaled"), ("bias", bias, "add", "shifted")):
        if v is not None:
            c = b.op(f"{name}_{what}_c", "view", [v, [-1, *tail]], v, shape=(v.shape[0], *tail),
                     sym=(v.sym[0], *tail), origin=origin)
            y = b.op(f"{name}_{step}", op, [y, c], y, origin=origin)
    return b.op(name, "identity", [y], y, dtype=dtype, origin=origin)


MAX_WINDOW_TAPS = 64
"""The largest pooling window (elements) lowered to one pointwise kernel over its taps; a larger
one stays in PyTorch."""


def lower_window_pool(b: Builder, x: Node, window: list[int], kind: str, name: str,
                      origin: str) -> Node:
    """A pooling whose windows tile the input (stride equal to the window, no padding or
    dilation, floor mode): max or average over the last `len(window)` dims of x.

    Each tap of the window (one offset per pooled dim) is a strided slice of x holding that
    tap of every window: `x[..., t::k]` cut to `S // k` elements. The pooling is then a
    pointwise op over the taps (`maximum`, or a float32 sum divided by the window's size), so
    it is one kernel that reads x once, with whatever follows it fused in, and its sizes
    follow the input at run time. Windows of more than MAX_WINDOW_TAPS elements are not
    lowered (the caller keeps PyTorch's op)."""
    import itertools

    from torch.utils._sympy.functions import FloorDiv

    first = x.rank - len(window)
    shape, sym = list(x.shape), list(x.sym)
    for i, k in enumerate(window):
        d, s = first + i, x.sym[first + i]
        shape[d] = x.shape[d] // k
        sym[d] = s // k if isinstance(s, int) else FloorDiv(s, k)
    tapped: list[Node] = []
    for j, taps in enumerate(itertools.product(*(range(k) for k in window))):
        v = x
        for i, (k, t) in enumerate(zip(window, taps, strict=True)):
            if k == 1:
                continue
            d = first + i
            v = b.add(Node(f"{name}_tap{j}_d{d}", "slice", [v, d, t, sym[d] * k, k], {},
                           (*v.shape[:d], shape[d], *v.shape[d + 1:]),
                           (*v.sym[:d], sym[d], *v.sym[d + 1:]), x.dtype,
                           target=torch.ops.aten.slice.Tensor, origin=origin))
        tapped.append(v)
    return _pool_of_taps(b, tapped, kind, x, math.prod(window), name, origin)


def _pool_of_taps(b: Builder, taps: list[Node], kind: str, x: Node, count: int, name: str,
                  origin: str) -> Node:
    """The pooling of its taps: their maximum, or their float32 sum over the window's size."""
    acc = taps[0]
    for j, v in enumerate(taps[1:], 1):
        if kind == "max":
            acc = b.op(f"{name}_max{j}", "maximum", [acc, v], v, origin=origin)
        else:
            acc = b.op(f"{name}_sum{j}", "add", [acc, v], v, dtype=torch.float32, origin=origin)
    if kind == "max":
        return b.op(name, "identity", [acc], acc, dtype=x.dtype, origin=origin)
    return b.op(name, "div", [acc, float(count)], acc, dtype=x.dtype, origin=origin)


MAX_POOL_TAPS = 512
"""The largest pooling window (elements) generated as masked taps of one kernel (`lower_tap_pool`)."""


def pooled_size(size: Any, window: int, stride: int, padding: int, dilation: int,
                ceil: bool = False) -> Any:
    """A pooled dim's size, an int or a sympy expression of the input's. In ceil mode the last
    window may hang over the end, but must start inside the input or its left padding."""
    from torch.utils._sympy.functions import FloorDiv

    span = size + 2 * padding - dilation * (window - 1) - 1
    if not ceil:
        return span // stride + 1 if isinstance(size, int) else FloorDiv(span, stride) + 1
    if isinstance(size, int):
        return min((span + stride - 1) // stride + 1, (size + padding - 1) // stride + 1)
    import sympy

    return sympy.Min(FloorDiv(span + stride - 1, stride) + 1, FloorDiv(size + padding - 1, stride) + 1)


def lower_tap_pool(b: Builder, x: Node, window: list[int], stride: list[int], padding: list[int],
                   dilation: list[int], kind: str, name: str, origin: str,
                   ceil: bool = False) -> Node:
    """Any max or average pooling in floor mode (overlapping, padded, dilated windows): one
    `window_tap` node per offset of the window, each a masked load of x at
    o * stride + t * dilation - padding along every pooled dim (-inf outside x for a max, 0
    for an average, whose divisor counts the padding as PyTorch's default does), combined
    pointwise: one kernel over the output that reads x once per tap, a pointwise epilogue
    fused in. Sizes follow x at run time, the pooled ones too, though torch.export fixes them
    (`Builder.runtime_size`). In ceil mode (max only) the overhanging taps are masked."""
    import itertools

    first = x.rank - len(window)
    shape, sym = list(x.shape), [b.runtime_size(x, d) for d in range(x.rank)]
    sizes = [sym[first + i] for i in range(len(window))]
    for i, k in enumerate(window):
        d = first + i
        shape[d] = pooled_size(x.shape[d], k, stride[i], padding[i], dilation[i], ceil)
        sym[d] = pooled_size(sizes[i], k, stride[i], padding[i], dilation[i], ceil)
    fill = float("-inf") if kind == "max" else 0.0
    src, pads = x, {}
    if x.op == WINDOW_TAP and x.kwargs.get("pad") and not ceil and \
            (x.kwargs["fill"] == fill or not any(padding)):
        # a pooling of a constant pad: the pad's offsets join the pooling's padding and the
        # pad's value fills outside its input (inside the padded value the pooling's own mask
        # never fails where the pad's does not): one kernel reads the unpadded input
        src, fill = x.args[0], x.kwargs["fill"]
        pads = {spec[0]: (spec[3], spec[6]) for spec in x.kwargs["taps"]}
    tapped: list[Node] = []
    for j, taps in enumerate(itertools.product(*(range(k) for k in window))):
        spec = [(first + i, stride[i], dilation[i], padding[i] + pads.get(first + i, (0, 0))[0], t,
                 window[i], pads.get(first + i, (0, sizes[i]))[1]) for i, t in enumerate(taps)]
        spec += [(d, 1, 1, lo, 0, 1, size) for d, (lo, size) in pads.items() if d < first]
        # (a pad's end folded in is masked like ceil mode's overhang: `clip`)
        v = b.add(Node(f"{name}_tap{j}", WINDOW_TAP, [src],
                       {"taps": spec, "fill": fill, **({"clip": True, "ceil": True} if ceil else {}),
                        **({"clip": True} if pads else {})},
                       tuple(shape), tuple(sym), x.dtype, origin=origin))
        tapped.append(v)
    return _pool_of_taps(b, tapped, kind, x, math.prod(window), name, origin)


def lower_pad(b: Builder, x: Node, pad: list[int], value: float, name: str, origin: str) -> Node | None:
    """`constant_pad_nd(x, pad, value)` as one `window_tap` of a one-element window: x at
    o - before along each padded dim, `value` outside x (a negative pad crops). None for a
    pad that is not a list of ints or a value no kernel can write (nan, +inf)."""
    if not all(type(p) is int for p in pad) or len(pad) % 2 or len(pad) // 2 > x.rank or \
            not isinstance(value, (int, float)) or value != value or value == float("inf"):
        return None
    shape, sym = list(x.shape), [b.runtime_size(x, d) for d in range(x.rank)]
    spec = []
    for i in range(len(pad) // 2):
        d, lo, hi = x.rank - 1 - i, pad[2 * i], pad[2 * i + 1]
        if lo == 0 and hi == 0:
            continue
        spec.append((d, 1, 1, lo, 0, 1, sym[d]))
        shape[d], sym[d] = shape[d] + lo + hi, sym[d] + lo + hi
    if any(s <= 0 for s in shape):
        return None
    spec.sort()
    return b.add(Node(name, WINDOW_TAP, [x], {"taps": spec, "fill": float(value), "pad": True, "clip": True},
                      tuple(shape), tuple(sym), x.dtype, origin=origin))


MAX_CAT_PARTS = 8
"""The most parts a concatenation is generated for (`lower_cat`): each output element tests
every part's range, so DenseNet201's cats of up to 48 parts cost 48 masked loads an element
(their CPU forward timed out, codegen grew from 74 to 437 s); torch.cat copies each part once.
Inductor draws the line at the same 8 (`max_pointwise_cat_inputs`)."""


SCAN_IDENTITY = {"cumsum": 0, "cumprod": 1}


def scan_after_fill(xs: list[Any], dim: int, rank: int) -> Node | None:
    """The scan of `cat([fill, ..., scan(y, dim)], dim)` when every part before it fills with
    the scan's identity (0 for cumsum, 1 for cumprod) and the scan walks forward along the
    cat's dim: an exclusive cumulative sum, as PyTorch code writes it (KernelBench level-1
    92). That cat is the scan of `cat([fill, ..., y])` (prefix sums over identities stay the
    identity, then continue from the first element of y), and the inner cat is a pointwise
    prologue the scan's kernel takes in: one kernel, each element read and written once,
    where the scan's result written and copied again took two passes."""
    d = norm_dim(dim, rank)
    scan = xs[-1] if xs else None
    if not (len(xs) >= 2 and isinstance(scan, Node) and scan.op in SCAN_IDENTITY
            and scan.kwargs.get("dim") == d and not scan.kwargs.get("reverse")):
        return None
    fill = SCAN_IDENTITY[scan.op]
    if all(isinstance(x, Node) and x.op == "full" and x.args and x.args[0] == fill
           for x in xs[:-1]):
        return scan
    return None


CAT_PART_MAPS = {"neg", "abs", "relu"}
"""Maps a concatenation applies to a part as it copies it: exact in every dtype, and 0 where
the part's masked load reads nothing (the parts are summed)."""


def lower_cat(b: Builder, xs: list[Node], dim: int, shape: tuple[int, ...], dtype: torch.dtype,
              name: str, origin: str) -> Node:
    """Concatenation along `dim`: one `window_tap` per input, a masked load of that input at
    o - offset along dim (0 outside its range: `clip` masks both ends), summed (or-ed for
    bool). The copy becomes part of one pointwise kernel over the output, a consumer fused
    in; each input is read once. Offsets and sizes follow the inputs at run time."""
    rank = len(shape)
    d = norm_dim(dim, rank)
    parts = [x for x in xs if not (x.rank == 1 and x.shape[0] == 0 and rank > 1)]
    sizes = [b.runtime_size(x, d) for x in parts]

    def other(j: int) -> Any:  # the first part whose size along j can be read at run time
        found = [b.runtime_size(x, j) for x in parts]
        return next((s for s in found if not isinstance(s, int)), found[0])

    sym = [other(j) if j != d else sum(sizes) for j in range(rank)]
    like = Node(name, "identity", [], {}, tuple(shape), tuple(sym), dtype, origin=origin)
    """The output's shape, run-time sizes and dtype, for the ops below to copy."""
    offset: Any = 0
    hint = 0
    acc: Node | None = None
    for k, (x, size) in enumerate(zip(parts, sizes, strict=True)):
        pad = offset if isinstance(offset, int) else Sym(offset, hint)
        # a part that is an exact map with f(0) = 0 of another value (rotary embedding's
        # `cat((-x2, x1))`) taps that value and maps it here: no kernel writes the part first
        f = x.op if x.op in CAT_PART_MAPS and x.args and isinstance(x.args[0], Node) and \
            x.args[0].shape == x.shape and x.args[0].dtype == x.dtype else None
        src = x.args[0] if f else x
        v = b.add(Node(f"{name}_part{k}", WINDOW_TAP, [src],
                       {"taps": [(d, 1, 1, pad, 0, 1, size)], "fill": 0.0, "clip": True},
                       like.shape, like.sym, x.dtype, origin=origin))
        if f:
            v = b.op(f"{name}_part{k}_{f}", f, [v], v, origin=origin)
        if x.dtype != like.dtype:
            v = b.op(f"{name}_part{k}_cast", "cast", [v], v, dtype=like.dtype, origin=origin)
        if acc is None:
            acc = v
        else:
            op = "logical_or" if like.dtype == torch.bool else "add"
            acc = b.op(f"{name}_join{k}", op, [acc, v], like, origin=origin)
        offset = offset + size
        hint += x.shape[d]
    assert acc is not None
    out = b.op(name, "identity", [acc], like, origin=origin)
    b.cats[out] = (tuple(parts), d)
    return out


def _key(v: Any, canon: dict[Node, Node]) -> Any:
    if isinstance(v, Node):
        return ("node", id(canon.get(v, v)))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_key(x, canon) for x in v))
    if isinstance(v, Sym):
        return ("sym", str(v.expr))
    return ("value", type(v).__name__, repr(v))


def substitute(v: Any, canon: dict[Node, Node]) -> Any:
    """`v` (an argument: a node, a value, nested lists and tuples of them) with each node in
    `canon` replaced by its value there."""
    if isinstance(v, Node):
        return canon.get(v, v)
    if isinstance(v, list):
        return [substitute(x, canon) for x in v]
    if isinstance(v, tuple):
        return tuple(substitute(x, canon) for x in v)
    return v


def _flip_dims(n: Node) -> list[int] | None:
    """The dims of a `flip` left to PyTorch, else None."""
    if n.op != "fallback" or "flip" not in str(n.target) or len(n.args) < 2:
        return None
    x = n.args[0]
    return sorted(norm_dim(d, x.rank) for d in n.args[1]) if isinstance(x, Node) else None


def fold_flipped_scans(graph: Graph) -> None:
    """`flip(cumsum(flip(x, d), d), d)` (a reverse cumulative sum, KernelBench level-1 91) is one
    scan of x that walks its rows from the end (`reverse`), in place of two PyTorch copies.
    Only when each flip feeds nothing else and forward does not return the inner values."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    swap: dict[Node, Node] = {}
    for outer in graph.nodes:
        dims = _flip_dims(outer)
        scan = outer.args[0] if dims is not None else None
        if not (isinstance(scan, Node) and scan.op in SCANS and dims == [scan.kwargs["dim"]]
                and users[scan] == [outer] and id(scan) not in outputs):
            continue
        inner = scan.args[0]
        if _flip_dims(inner) != dims or users[inner] != [scan] or id(inner) in outputs:
            continue
        scan.args[0] = inner.args[0]
        scan.kwargs["reverse"] = not scan.kwargs.get("reverse", False)
        swap[outer] = scan
    if not swap:
        return
    for n in graph.nodes:
        n.args = substitute(n.args, swap)
        n.kwargs = {k: substitute(v, swap) for k, v in n.kwargs.items()}
    graph.outputs = [substitute(o, swap) for o in graph.outputs]
    live = {i for n in graph.nodes if n not in swap for i in n.inputs()}
    live |= {o for o in graph.outputs if isinstance(o, Node)}
    gone = set(swap) | {n for n in graph.nodes if _flip_dims(n) is not None and n not in live}
    graph.nodes = [n for n in graph.nodes if n not in gone]


_SAME_LAYOUT_VIEWS = ("view", "flatten", "unsqueeze", "squeeze")
"""Views whose result is contiguous where their input is."""


def _needless_copy(n: Node, outputs: set[int]) -> bool:
    """A copy (`clone`, `contiguous`) of a reshape of a value computed here: that value is a
    fresh contiguous tensor nothing else can change, so the copy's kernel, a write and a read
    of the whole tensor, would only copy it again (pixel shuffle's decomposition clones its
    contiguous result; the value may be a copy itself). A copy of a model input, of a view
    of one or of a library call's value stays (the result must not alias them), and so does
    one of a value forward also returns (two outputs would share memory)."""
    if n.op != "identity" or not n.args or not isinstance(n.args[0], Node) or \
            n.args[0].dtype != n.dtype:
        return False
    y = n.args[0]
    while y.op in _SAME_LAYOUT_VIEWS and y.args and isinstance(y.args[0], Node):
        if id(y) in outputs:
            return False
        y = y.args[0]
    if y is n.args[0] or id(y) in outputs or not (y.op in POINTWISE or y.op in REDUCTIONS):
        return False
    if y.op == "identity":  # a copy may be laid out as its source already (`copy_of`): a view
        src = y.args[0] if y.args else None
        while isinstance(src, Node) and src.op in LAYOUT | {"layout_fallback"}:
            src = src.args[0] if src.args else None
        return isinstance(src, Node) and src.op not in ("input", "layout_fallback", "fallback")
    return True


def whole_slice(n: Node) -> bool:
    """A slice that keeps every element of its dim (`pos[None, :]`: start 0, step 1, end the
    size or past it, as export writes `:`): its input itself. Kept, it is a view that no
    kernel recomputes, so a range it slices was stored for PyTorch to read (ALiBi's distance
    bias: 5 kernels where one does)."""
    if n.op != "slice" or len(n.args) < 2 or not isinstance(n.args[0], Node):
        return False
    x = n.args[0]
    start = n.args[2] if len(n.args) > 2 else 0
    step = n.args[4] if len(n.args) > 4 else 1
    return start in (0, None) and step == 1 and n.shape == x.shape and n.sym == x.sym


PURE_FALLBACKS = ("aten.convolution",)
"""Library calls with no effect but their result: dropped by `simplify` when nothing reads it."""


def simplify(graph: Graph) -> None:
    """Common reductions once, dead values dropped (in place).

    Two reductions with the same op on the same operands are one value: `x.mean(0)` and the mean
    inside `x.std(0)` (and the mean `var` lowers for its second result) are one reduction, so
    a kernel accumulates it once and a broadcast-back mean is computed once. Pointwise values
    are not shared: a shared cheap value ties kernels together (cross-entropy's `target !=
    ignore_index` feeds both the loss kernel and the count; shared, it made a third kernel),
    and each fused kernel recomputes it for free. A value nothing
    reads and forward does not return is dropped (var's unused mean). PyTorch fallbacks are
    left alone (an op may draw random numbers or be impure), except the pure library calls
    of `PURE_FALLBACKS` (a convolution a rewrite replaced ran in cuDNN for nothing)."""
    canon: dict[Node, Node] = {}
    seen: dict[Any, Node] = {}
    returned = {id(o) for o in graph.outputs if isinstance(o, Node)}
    for n in graph.nodes:
        n.args = substitute(n.args, canon)
        n.kwargs = {k: substitute(v, canon) for k, v in n.kwargs.items()}
        if _needless_copy(n, returned) or whole_slice(n):
            canon[n] = n.args[0]
            continue
        if n.op not in REDUCTIONS:
            continue  # pointwise values are cheap to recompute; sharing one can tie kernels together
        key = (n.op, _key(n.args, canon), _key(sorted(n.kwargs.items()), canon), n.dtype, n.shape,
               _key(n.sym, canon), n.target)
        if key in seen:
            canon[n] = seen[key]
        else:
            seen[key] = n
    graph.outputs = [substitute(o, canon) for o in graph.outputs]
    keep = [n for n in graph.nodes if n not in canon]
    live = {o for o in graph.outputs if isinstance(o, Node)}
    out: list[Node] = []
    for n in reversed(keep):
        impure = n.op == "layout_fallback" or n.op == "fallback" and not any(
            op in str(n.target) for op in PURE_FALLBACKS)
        if n in live or n.op == "input" or impure or n.multi:
            out.append(n)
            live.update(n.inputs())
    graph.nodes = list(reversed(out))
