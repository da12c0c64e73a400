"""Assemble the candidate file: constants, kernels, launchers, then ModelNew (STYLE.md order)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter

from kopt.harness.case import Case
from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline.fallback import torch_region
from kopt.phases.engineers.offline.fusion import NHWC_CONV, Group, Partition
from kopt.phases.engineers.offline.graph import CACHED_CAT, Node, Sym, state_var
from kopt.phases.engineers.offline.graph_replay import graph_constants, graph_runner
from kopt.phases.engineers.offline.kernels import (
    ROW_BLOCK,
    ROW_TILE,
    KernelSource,
    arg_reduction_kernel,
    attention_kernel,
    conv_flops,
    conv_kernel,
    kernel_label,
    matmul_kernel,
    pointwise_kernel,
    reduction_kernel,
    scan_kernel,
)
from kopt.phases.engineers.offline.kernels.recurrent import (
    STEP_DEFAULT,
    STEP_KERNEL,
    STEP_TUNABLES,
    recurrent_code,
)
from kopt.phases.engineers.offline.layout import Constructor
from kopt.phases.engineers.offline.pointwise import HELPERS
from kopt.phases.engineers.offline.recurrent import recurrent_kind, recurrent_launches


class _SizePrinter(PythonPrinter):
    """Python source of a size: torch's printer, with floor and ceiling of a ratio as integer
    division (a constructor's `channels // groups` fitted as `floor(128/kopt_groups)`), and a
    negative power as a true division, which torch's printer refuses."""

    def _print_floor(self, expr: Any) -> str:
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if den == 1:
            return super()._print_floor(expr)
        return f"(({self._print(num)}) // ({self._print(den)}))"

    def _print_ceiling(self, expr: Any) -> str:  # ceil(a / b) == -floor(-a / b)
        if sympy.fraction(sympy.together(expr.args[0]))[1] == 1:
            return super()._print_ceiling(expr)
        return f"(-{self._print_floor(sympy.floor(-expr.args[0], evaluate=False))})"

    def _print_Pow(self, expr: Any) -> str:
        base, exp = expr.args
        if exp.is_number and exp < 0:
            return f"(1 / ({self._print(sympy.Pow(base, -exp))}))"
        return super()._print_Pow(expr)


_PRINTER = _SizePrinter()
INTERPRETER_TILE = 32768
"""Elements a pointwise block or a row reduction's (ROWS, BLOCK_SIZE) tile may grow to in the CPU
interpreter (the generated `_widen_for_interpreter`): a LLaMA block's smoke forward went from
1.3 s of kernels to a fraction, the per-element work unchanged. KernelBench level-2 34's smoke
forward (0.5 M elements of 64-wide LayerNorm rows): 1.18 s at 8192, 0.36 s at 32768, 0.17 s at
131072; its import + smoke run 76.6 s -> 52.7 s at 32768."""

_LAUNCH_CONFIG = '''
def _cdiv(a, b):
    """ceil(a / b) for ints. triton.cdiv and triton.next_power_of_2 are constexpr functions
    in recent Triton, a few microseconds a call from Python, and a launcher calls them for
    every kernel of every forward."""
    return -(-a // b)


def _pow2(n):
    """The smallest power of two >= n (1 for n <= 1), as triton.next_power_of_2."""
    return 1 << (n - 1).bit_length() if n > 1 else max(n, 0)


def _launch_config(kernel, kind, n, m=0, k=0):
    """Launch parameters for one call: KOPT_CONFIG's values clipped to the problem size.

    The accelerator phase rewrites KOPT_CONFIG with measured winners and this function
    launches what it says: it only shrinks blocks that would be mostly masked and applies
    the hard caps (MAX_* above).
    """
    cfg = dict(KOPT_CONFIG[kernel])
    if kind == "pointwise":
        cfg["BLOCK_SIZE"] = min(cfg["BLOCK_SIZE"], max(MIN_BLOCK, _pow2(n)))
    elif kind == "tiled":  # n: the hw extent, m: the channels
        cfg["BLOCK_HW"] = min(cfg["BLOCK_HW"], max(MIN_BLOCK, _pow2(n)))
        cfg["BLOCK_C"] = min(cfg["BLOCK_C"], max(MIN_BLOCK, _pow2(m)))
    elif kind == "tiled_reduction":  # n: the reduced extent, m: the contiguous extent after it
        cfg["BLOCK_SIZE"] = min(cfg["BLOCK_SIZE"], max(MIN_BLOCK, _pow2(n)))
        cfg["BLOCK_C"] = min(cfg["BLOCK_C"], max(MIN_BLOCK, _pow2(m)))
    elif kind == "reduction":  # n: the row's width, m: the number of rows
        block = min(cfg["BLOCK_SIZE"], MAX_ROW_BLOCK, max(MIN_ROW_BLOCK, _pow2(n)))
        cfg["BLOCK_SIZE"] = block
        # rows narrower than ROW_TILE share a program (a row that loops has one to itself)
        rows = max(1, ROW_TILE // block) if n <= block else 1
        cfg["ROWS"] = min(rows, _pow2(max(m, 1)))
    elif kind == "attention":  # n: the keys, m: the query rows, k: the head size
        cfg["BLOCK_M"] = min(cfg["BLOCK_M"], max(16, _pow2(m)))
        cfg["BLOCK_N"] = min(cfg["BLOCK_N"], max(16, _pow2(n)))
    else:
        cfg["BLOCK_M"] = min(cfg["BLOCK_M"], max(16, _pow2(m)))
        cfg["BLOCK_N"] = min(cfg["BLOCK_N"], max(16, _pow2(n)))
        cfg["BLOCK_K"] = min(cfg["BLOCK_K"], max(16, _pow2(k)))
    cfg["num_warps"] = min(cfg["num_warps"], MAX_WARPS)
    if _INTERPRETED:
        _widen_for_interpreter(kind, cfg, n, m, k)
    return cfg


def _widen_for_interpreter(kind, cfg, n, m, k=0):
    """Without a GPU every program runs as Python over numpy, at a near-fixed cost per op:
    fewer, wider programs of the same kernel (same masks, same per-element arithmetic) take a
    fraction of the time. Two programs stay wherever the problem has room for them, so the
    offsets from one program to the next are still exercised."""
    if kind == "pointwise":
        cfg["BLOCK_SIZE"] = max(cfg["BLOCK_SIZE"], min(INTERPRETER_TILE, _half(n)))
    elif kind == "reduction" and n <= cfg["BLOCK_SIZE"]:
        cfg["ROWS"] = max(cfg["ROWS"], min(INTERPRETER_TILE // cfg["BLOCK_SIZE"], _half(m)))
    elif kind == "tiled":  # (BLOCK_C, BLOCK_HW) tiles: wider along hw
        cfg["BLOCK_HW"] = max(cfg["BLOCK_HW"], min(INTERPRETER_TILE // cfg["BLOCK_C"], _half(n)))
    elif kind == "tiled_reduction":  # (BLOCK_SIZE, BLOCK_C) tiles: wider along the contiguous dim
        cfg["BLOCK_C"] = max(cfg["BLOCK_C"], min(INTERPRETER_TILE // cfg["BLOCK_SIZE"], _half(m)))
    elif kind == "attention":  # whole rows of scores per program where they are short
        cfg["BLOCK_M"] = max(cfg["BLOCK_M"], min(128, _pow2(m)))
        cfg["BLOCK_N"] = max(cfg["BLOCK_N"], min(128, _pow2(n)))
    elif kind == "conv":  # m: output positions, k: (channel, tap) pairs: fewer chunks and rows
        # four times the tile: KernelBench level-1 72's smoke forward (a strided grouped
        # transposed 3-D conv) took 3.0 s at INTERPRETER_TILE elements, 1.8 s at four times it
        cfg["BLOCK_K"] = max(cfg["BLOCK_K"], min(128, _pow2(k)))
        cfg["BLOCK_M"] = max(cfg["BLOCK_M"], min(4 * INTERPRETER_TILE // cfg["BLOCK_K"], _half(m)))


def _half(n):
    """The power of two that splits an extent of n into two blocks (n > 1)."""
    return _pow2(max(1, (n + 1) // 2))


def _strides(t):
    """t's strides, 0 along a size-1 dim: a size-1 operand broadcasts over whatever size the
    kernel's coordinate has there, even where the traced input was wider (a (1,) target
    beside (1, 32768) predictions)."""
    return [0 if s == 1 else st for s, st in zip(t.shape, t.stride())]


def _span(t):
    """Elements between a tensor's first and last addressed element, plus one (its numel when
    contiguous: the sum over dims costs ~5 us a tensor, and launchers ask for every input)."""
    if t.is_contiguous():
        return t.numel()
    return 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()) if s > 0)


def _resolve_shape(shape, numel):
    """A view's target size with its one -1 resolved against numel."""
    shape = list(shape)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return tuple(shape)
'''


_NHWC_KERNEL = '''
# _to_nhwc_kernel: x (any strides) -> a channels_last copy, for cuDNN's channels_last conv.
# A tiled transpose (read along hw, write along channels): 0.040 ms on conv2d_relu_bias's
# (32, 256, 56, 56) bf16 input on an H100, vs 0.176 ms for x.contiguous(memory_format=...).
@triton.jit
def _to_nhwc_kernel(x_ptr, xs_n, xs_c, xs_h, xs_w, out_ptr, C, H, W,
                    BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, INDEX_64: tl.constexpr):
    if INDEX_64:
        n = tl.program_id(2).to(tl.int64)
    else:
        n = tl.program_id(2)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)[:, None]
    hw = tl.program_id(0) * BLOCK_HW + tl.arange(0, BLOCK_HW)[None, :]
    mask = (c < C) & (hw < H * W)
    tile = tl.load(x_ptr + n * xs_n + c * xs_c + (hw // W) * xs_h + (hw % W) * xs_w, mask=mask)
    tl.store(out_ptr + (n * H * W + hw) * C + c, tile, mask=mask)
'''

_NHWC_CONV = '''
# The transpose's tile (not searched: it moves the input once; the prototype's best).
NHWC_BLOCK_C = 64
NHWC_BLOCK_HW = 64
NHWC_WARPS = 4


def _to_nhwc(x):
    """A channels_last copy of a 4-D x (x itself when it already is one)."""
    if x.is_contiguous(memory_format=torch.channels_last):
        return x
    n, c, h, w = x.shape
    out = torch.empty_like(x, memory_format=torch.channels_last)
    if out.numel() == 0:
        return out
    block_c, block_hw = NHWC_BLOCK_C, NHWC_BLOCK_HW
    if _INTERPRETED:  # fewer, wider programs (_widen_for_interpreter)
        block_c = min(block_c, max(16, _pow2(c)))
        block_hw = max(block_hw, min(INTERPRETER_TILE // block_c, _half(h * w)))
    grid = (_cdiv(h * w, block_hw), _cdiv(c, block_c), n)
    _to_nhwc_kernel[grid](x, *x.stride(), out, c, h, w, BLOCK_C=block_c, BLOCK_HW=block_hw,
                          INDEX_64=max(_span(x), out.numel() + block_c * block_hw) >= 2**31,
                          num_warps=NHWC_WARPS)
    return out


def _conv2d_nhwc(module, key, x, weight, stride, padding, dilation):
    """cuDNN's conv on channels_last x and weight, without bias (the epilogue kernel adds it).

    The channels_last weight is converted once and cached on `module` under `key`; it is
    converted again when the parameter's storage or version changes (load_state_dict, an
    optimizer step). The result is channels_last: the epilogue reads it as NHWC.
    """
    cache = module.__dict__.setdefault("_kopt_nhwc_weights", {})
    tag = (weight.data_ptr(), weight._version, weight.device, weight.dtype)
    hit = cache.get(key)
    if hit is None or hit[0] != tag:
        hit = (tag, weight.detach().contiguous(memory_format=torch.channels_last))
        cache[key] = hit
    return torch.nn.functional.conv2d(_to_nhwc(x), hit[1], None, stride, padding, dilation, 1)
'''


_CACHED_CAT = '''

def _cached_cat(module, key, weights, dim):
    """The weights concatenated along dim, made on the first call and kept on `module` under
    `key`; made again when any of them changes storage, version, device, dtype or shape
    (load_state_dict and optimizer steps write in place and bump the version). Each weight is
    copied into its slice (a copy, as torch.cat's; no arithmetic)."""
    cache = module.__dict__.setdefault("_kopt_cat_weights", {})
    tag = tuple((w.data_ptr(), w._version, w.device, w.dtype, tuple(w.shape)) for w in weights)
    hit = cache.get(key)
    if hit is None or hit[0] != tag:
        shape = list(weights[0].shape)
        shape[dim] = sum(w.shape[dim] for w in weights)
        out = torch.empty(shape, dtype=weights[0].dtype, device=weights[0].device)
        at = 0
        for w in weights:
            out.narrow(dim, at, w.shape[dim]).copy_(w.detach())
            at += w.shape[dim]
        hit = (tag, out)
        cache[key] = hit
    return hit[1]
'''


def sym_code(v: Any, symbols: dict[str, str]) -> str:
    """Python source for a size in forward (symbols are locals named after themselves)."""
    if isinstance(v, Sym):
        v = v.expr if all(str(s) in symbols for s in v.expr.free_symbols) else v.hint
    if isinstance(v, sympy.Basic):
        if all(str(s) in symbols for s in v.free_symbols):
            return _PRINTER.doprint(v)
        return str(int(v.subs({})) if v.is_number else v)
    return repr(v)


@dataclass(frozen=True)
class _Source:
    """A size written as given (read from a tensor at run time)."""

    text: str


class ForwardWriter:
    """Writes ModelNew.forward: PyTorch views and ops between the kernel launches."""

    def __init__(self, part: Partition, kernels: dict[int, KernelSource]) -> None:
        self.part = part
        self.graph = part.graph
        self.kernels = kernels
        self.lines: list[str] = []
        self.var: dict[Node, str] = {}
        self.notes: list[str] = []
        self.regions: list[str] = []
        """Groups emitted with a PyTorch form behind the KOPT_REGIONS switch."""
        self.recurrent: list[Node] = []
        """Recurrent layers run by `_recurrent` (`kernels.recurrent`), regions rN."""

    def size(self, v: Any) -> str:
        return sym_code(v, self.graph.symbols)

    def arg(self, v: Any) -> str:
        if isinstance(v, _Source):
            return v.text
        if isinstance(v, Node):
            return self.var[v]
        if isinstance(v, Sym):
            return self.size(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self.arg(x) for x in v) + "]"
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.device):
            return "device"
        if isinstance(v, torch.layout):
            return "torch.strided"
        if isinstance(v, torch.memory_format):
            return str(v)
        if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
            return f'float("{v}")'
        if isinstance(v, sympy.Basic):
            return self.size(v)
        return repr(v)

    def view_shape(self, n: Node, src: str | None = None, dims: list[str] | None = None) -> str:
        """A view's target sizes as source: a fixed size that its input has at the same
        position from the front or from the back is read from the input (`x.shape[1]`: the
        channels kept by `x.view(b, c, -1)`), the largest other fixed size becomes -1 (else the one
        size computed with a traced constant), and any size still fixed is noted. `src`: the input's expression (default: forward's variable);
        `dims`: each input size's expression instead, for an input forward never holds (a
        product inside its kernel: its rows and columns read from its operands)."""
        target = list(n.args[1])
        x = n.args[0]
        src = src or (self.var.get(x) if isinstance(x, Node) else None)
        if dims is None and src is not None and isinstance(x, Node):
            dims = [f"{src}.shape[{i}]" for i in range(x.rank)]
        if dims is not None and isinstance(x, Node):
            ctor = {a.lstrip("_") for a in self.graph.attributes}
            for order in (range(min(len(target), x.rank)), range(-1, -min(len(target), x.rank) - 1, -1)):
                for j in order:
                    v, s = target[j], x.sym[j]
                    # a constructor expression (`kopt_channels`) equal to the input's size there
                    # is read from the input too: no constructor to trust at run time
                    traced = v.hint if isinstance(v, Sym) and v.expr.free_symbols and \
                        {str(f) for f in v.expr.free_symbols} <= ctor else v
                    if isinstance(traced, int) and traced not in (1, -1) and traced == s:
                        target[j] = _Source(dims[j % x.rank])
                    elif not (v == s or (isinstance(v, Sym) and v.expr == s)):
                        break
        concrete = [j for j, v in enumerate(target) if isinstance(v, int) and v not in (1, -1)]
        if -1 not in target and not concrete:
            # a size computed with a traced constant (`16*s77`: instance norm's (1, N*C, H, W)
            # with C from the constructor) becomes -1: reshape computes it at run time
            # (a rewrite's view holds its sizes as bare expressions: a grouped view's
            # `floor(128/kopt_groups)` channels per group, 128 the traced channels)
            baked = [j for j, v in enumerate(target) if (e := _size_expr(v)) is not None
                     and not e.is_Symbol and not e.is_number]
            if len(baked) > 1:  # (N*C, H - 2, W - 2) after a convolution: the scaled one
                baked = [j for j in baked if _scaled(_size_expr(target[j]))]
            if len(baked) == 1:
                target[baked[0]] = -1
        if -1 not in target and concrete:
            j = max(concrete, key=lambda i: target[i])
            target[j] = -1
            if len(concrete) > 1:
                self.notes.append(f"{n.origin}: view sizes {[target[i] for i in concrete if i != j]} are "
                                  "fixed at their traced values")
        return "[" + ", ".join(self.arg(v) for v in target) + "]"

    def node(self, n: Node) -> None:
        v = f"v_{n.name}"
        self.var[n] = v
        x = self.var.get(n.args[0]) if n.args and isinstance(n.args[0], Node) else None
        if n.op == "view":
            code = f"{x}.reshape({self.view_shape(n)})"
        elif n.op == "flatten":
            code = f"{x}.flatten({n.args[1]}, {n.args[2]})"
        elif n.op == "unsqueeze":
            code = f"{x}.unsqueeze({n.args[1]})"
        elif n.op == "squeeze":
            code = f"torch.squeeze({x}, {tuple(n.args[1])})"
        elif n.op == "permute":
            code = f"{x}.permute({list(n.args[1])})"
        elif n.op == "expand":
            src = n.args[0]
            off = n.rank - src.rank
            sizes = []
            for j, s in enumerate(n.args[1]):
                same = j >= off and src.shape[j - off] == n.shape[j] and src.shape[j - off] != 1
                sizes.append("-1" if same else self.arg(s))
            code = f"{x}.expand({', '.join(sizes)})"
        elif n.op in ("getitem", "split_item"):
            code = f"{x}[{n.args[1]}]"
        elif n.op == CACHED_CAT:
            weights = ", ".join(self.var[w] for w in n.args[0])
            code = f'_cached_cat(self, "{n.kwargs["key"]}", [{weights}], {n.kwargs["dim"]})'
            self.lines.append(f"{v} = {code}  # {n.origin}: the weights side by side, made once per version")
            return
        elif n.op == NHWC_CONV:
            w = n.args[1]
            info = self.graph.inputs.get(w.name) if w.op == "input" else None
            key = info.key if info is not None else w.name
            stride, pad, dil = (self.arg(a) for a in n.args[3:6])
            code = f'_conv2d_nhwc(self, "{key}", {x}, {self.var[w]}, {stride}, {pad}, {dil})'
            self.lines.append(f"{v} = {code}  # {n.origin}: channels_last, no bias (the epilogue adds it)")
            return
        else:
            args = ", ".join(self.arg(a) for a in n.args)
            kwargs = "".join(f", {k}={self.arg(val)}" for k, val in n.kwargs.items())
            if not args:
                kwargs = kwargs.lstrip(", ")
            code = f"torch.ops.{n.target}({args}{kwargs})"
            kind = recurrent_kind(n)
            if kind is not None:
                region = f"r{len(self.recurrent)}"
                self.recurrent.append(n)
                self.regions.append(region)
                self.lines.append(f'if KOPT_REGIONS["{region}"] == "triton":')
                self.lines.append(f'    {v} = _recurrent("{kind}", {args})  # {n.origin}: Triton kernels (kernels/recurrent.py)')
                self.lines.append("else:  # the library's layer (cuDNN on a GPU), a graph break")
                self.lines.append(f'    {v} = _rnn_library("{kind}", {args})  # {n.origin}')
                return
        self.lines.append(f"{v} = {code}  # {n.origin}")

    def product_dims(self, g: Group, view: Node) -> list[str] | None:
        """The sizes of a matmul group's product as forward reads them from its operands, when
        the epilogue view's input has the product's shape; else None. (MinGPT's `qkv` viewed as
        (B, T, -1) inside the product's kernel kept the traced T where the view's input was
        not a forward variable to read it from.)"""
        mm = g.anchor
        x = view.args[0] if view.args else None
        if g.kind != "matmul" or mm is None or not isinstance(x, Node) or x.shape != mm.shape:
            return None
        a, b = (self.var.get(v) if isinstance(v, Node) else None for v in mm.args[:2])
        if a is None or b is None:
            return None
        if mm.op == "mm":
            return [f"{a}.shape[0]", f"{b}.shape[1]"]
        if mm.op == "bmm":
            return [f"{a}.shape[0]", f"{a}.shape[1]", f"{b}.shape[2]"]
        return None

    def group(self, g: Group) -> None:
        k = self.kernels[g.index]
        args = []
        for a in k.call_args:
            if a == "device":
                args.append("device")
            elif a.startswith("@"):
                args.append(self.var[_by_name(self.graph, a[1:])])
            elif a.startswith("="):
                args.append(self.size(g.domain_sym[int(a[1:])]))
            elif a.startswith("%"):
                view = _by_name(self.graph, a[1:])
                args.append(self.view_shape(view, dims=self.product_dims(g, view)))
            else:
                args.append(a[1:])
        try:
            torch_lines = torch_region(g, self.part, self.var, self.arg, self.size, self.view_shape)
        except EngineerError as err:
            self.notes.append(f"region {g.name} has no PyTorch form ({err.message}); it always runs in Triton")
            torch_lines = None
        outs = []
        for o in g.outputs:
            self.var[o] = f"v_{o.name}"
            outs.append(self.var[o])
        launch = f"{', '.join(outs)}, = {k.launcher}({', '.join(args)})"
        if g.copy_of is not None:  # a copy only where the layout needs one (fusion._copies_when_needed)
            x = self.var[g.copy_of]
            self.regions.append(g.name)
            self.lines.append(f'if {x}.is_contiguous() or KOPT_REGIONS["{g.name}"] != "triton":')
            self.lines.append(f"    {outs[0]} = {x}.contiguous()  # laid out already: no copy")
            self.lines.append("else:")
            self.lines.append(f"    {launch}")
            return
        if torch_lines is None:
            self.lines.append(launch)
            return
        self.regions.append(g.name)
        self.lines.append(f'if KOPT_REGIONS["{g.name}"] == "triton":')
        self.lines.append(f"    {launch}")
        self.lines.append("else:  # the same region in PyTorch (the accelerator times both, keeps the faster)")
        self.lines += [f"    {line}" for line in torch_lines]


def _size_expr(v: Any) -> Any:
    """A view size's sympy expression (a Sym's, or a bare one); None for a plain int."""
    if isinstance(v, Sym):
        return v.expr
    return v if isinstance(v, sympy.Basic) else None


def _scaled(expr: Any) -> bool:
    """A size expression that is a traced constant times run-time sizes (`16*s77`), as a
    merged dim's is; an offset one (`s53 - 2`, a convolution's output rows) is not."""
    coeff, _rest = expr.as_coeff_Mul()
    return coeff not in (1, -1)


def _by_name(graph: Any, name: str) -> Node:
    for n in graph.nodes:
        if n.name == name:
            return n
    raise KeyError(name)


def build_kernels(part: Partition, precision: str) -> dict[int, KernelSource]:
    out: dict[int, KernelSource] = {}
    used: set[str] = set()

    def code(v: Any) -> str:
        return sym_code(v, part.graph.symbols)

    for g in part.groups:
        label = kernel_label(g)
        name = f"_{g.name}_{label}_kernel"
        while name in used:
            name = name.replace("_kernel", "_x_kernel")
        used.add(name)
        if g.kind == "pointwise":
            out[g.index] = pointwise_kernel(g, part, code, name)
        elif g.kind == "reduction":
            out[g.index] = reduction_kernel(g, part, code, name)
        elif g.kind == "scan":
            out[g.index] = scan_kernel(g, part, code, name)
        elif g.kind == "arg_reduction":
            out[g.index] = arg_reduction_kernel(g, part, code, name)
        elif g.kind == "conv":
            out[g.index] = conv_kernel(g, part, name, precision)
        elif g.kind == "attention":
            out[g.index] = attention_kernel(g, part, code, name, precision)
        else:
            out[g.index] = matmul_kernel(g, part, code, name, precision)
    _keep_one_triton_epilogue(part, out, code, precision)
    return out


def _keep_one_triton_epilogue(part: Partition, kernels: dict[int, KernelSource],
                              code: Any, precision: str) -> None:
    """A model that is products whose every epilogue cuBLAS(Lt) applies itself (a stack of
    `Linear` + ReLU) would run without a single Triton kernel: no candidate (the verifier
    rejects a forward that launches none, and rightly: it is PyTorch with other op names).
    The smallest product then keeps its epilogue as a Triton pass, the others keep cuBLASLt's.
    (2026-11-30, H200: KernelBench level-3 2, ShallowWideMLP, rejected for exactly that.)"""
    if not kernels or not all(k.library for k in kernels.values()):
        return
    g = min((g for g in part.groups if g.index in kernels),
            key=lambda g: (math.prod(g.anchor.shape), -g.index))
    k = kernels[g.index]
    kernels[g.index] = matmul_kernel(g, part, code, k.name, precision, library_epilogue=False)


def _cost_comment(g: Group) -> str:
    def nbytes(n: Node) -> int:
        return math.prod(n.shape) * n.dtype.itemsize

    moved = sum(nbytes(n) for n in g.inputs) + sum(nbytes(n) for n in g.outputs)
    if g.kind == "matmul" and g.anchor is not None:
        a = g.anchor.args[0]
        flops = 2 * math.prod(g.anchor.shape) * a.shape[-1]
        return f"# moves >= {moved / 1e6:.1f} MB, {flops / 1e9:.2f} GFLOP at the traced shapes"
    if g.kind == "attention" and g.anchor is not None:  # both products; the scores never move
        q, kt = g.anchor.args[:2]
        rows, n = math.prod(g.anchor.shape[:-1]), kt.shape[-1]
        flops = 2 * rows * n * (q.shape[-1] + g.anchor.shape[-1])
        return f"# moves >= {moved / 1e6:.1f} MB, {flops / 1e9:.2f} GFLOP at the traced shapes"
    if g.kind == "conv" and g.anchor is not None:
        flops = conv_flops(g.anchor)
        return f"# moves >= {moved / 1e6:.1f} MB, {flops / 1e9:.2f} GFLOP at the traced shapes"
    return f"# moves >= {moved / 1e6:.1f} MB at the traced shapes (each input read once, each output written once)"


def write_module(case: Case, part: Partition, ctor: Constructor, kernels: dict[int, KernelSource],
                 unfused: list[dict[str, str]]) -> tuple[str, list[str]]:
    """The candidate file's source, and notes on what was fixed at traced values."""
    fw = ForwardWriter(part, kernels)
    graph = part.graph
    args = [info for info in graph.inputs.values() if info.kind in ("arg", "kwarg", "scalar", "state")]
    args.sort(key=lambda i: i.index)
    for n in graph.nodes:
        if n.op == "input":
            info = graph.inputs[n.name]
            if info.kind in ("arg", "kwarg"):
                fw.var[n] = info.key
            elif info.kind == "state":
                fw.var[n] = state_var(info.key)
            elif info.kind in ("param", "buffer"):
                fw.var[n] = f"p_{n.name}"
            else:
                fw.var[n] = f"c_{n.name}"
    tensor_args = [a for a in args if a.kind in ("arg", "kwarg")]
    fw.lines.append(f"device = {tensor_args[0].key}.device" if tensor_args else
                    "device = next(self.parameters()).device")
    slots = state_slots(graph)
    if slots:
        fw.lines.append("S = self._kopt_slots")
    for sym, code in sorted(graph.symbols.items()):
        fw.lines.append(f"{sym} = {_via_slots(code, slots)}")
    for n in graph.nodes:
        if n.op == "input":
            info = graph.inputs[n.name]
            if info.kind in ("param", "buffer"):
                i, leaf = slots[(info.kind, info.key)]
                fw.lines.append(f'{fw.var[n]} = S[{i}]["{leaf}"]  # {info.key}')
            elif info.kind == "constant":
                fw.lines.append(f"{fw.var[n]} = self._kopt_{n.name}")
    for step in part.steps:
        if isinstance(step, Group):
            fw.group(step)
        else:
            fw.node(step)
    outs = [fw.arg(o) for o in graph.outputs]
    single = graph.out_spec == "single" and len(outs) == 1  # (state writes: a tuple, unpacked by forward)
    ret = outs[0] if single else "(" + ", ".join(outs) + ",)"
    fw.lines.append(f"return {ret}")

    tunables = {k.name: k.tunables for k in kernels.values()}
    config = {k.name: k.config for k in kernels.values()}
    if fw.recurrent:  # one step kernel for every recurrent layer, tuned like the others
        tunables[STEP_KERNEL] = STEP_TUNABLES
        config[STEP_KERNEL] = dict(STEP_DEFAULT)
    helpers: set[str] = set().union(*[k.helpers for k in kernels.values()]) if kernels else set()
    src: list[str] = []
    src.append(f'"""{case.name}: fused Triton candidate written by kopt\'s offline engineer.\n')
    src.append(f"Kernels: {len(kernels)} ({', '.join(k.name for k in kernels.values())}).")
    if unfused:
        src.append("Left to PyTorch: " + "; ".join(f"{u['node']} ({u['reason']})" for u in unfused) + ".")
    src.append('Generated for any input of the traced rank and dtypes; sizes are read at run time.\n"""\n')
    src.append("import math\n\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n")
    src.append("# Launch parameters the accelerator phase may search, per kernel.")
    src.append("KOPT_TUNABLES = " + _pretty(tunables) + "\n")
    src.append("# Defaults for an H100 (the accelerator rewrites this dict with measured winners):")
    src.append("# pointwise 1024 elements x 4 warps = 8 per thread, 16-byte vector loads of bf16;")
    src.append(f"# reductions keep rows up to {ROW_BLOCK} in registers (one HBM pass); matmul tiles")
    src.append("# 128x256x64 (bf16) / 128x128x32 (fp32) with 3 stages fit the 228 KB of shared memory.")
    src.append("KOPT_CONFIG = " + _pretty(config) + "\n")
    src.append("# Where each region (fusion group gN, kernel _gN_*) runs: \"triton\" or \"torch\" (the same ops in")
    src.append("# PyTorch). Read at every forward; the accelerator times both and keeps the faster.")
    src.append("KOPT_REGIONS = " + _pretty({r: "triton" for r in fw.regions}) + "\n")
    src.append("# Rows longer than this are reduced in a loop over column blocks (registers would spill).")
    src.append(f"MAX_ROW_BLOCK = {ROW_BLOCK}")
    src.append("# Rows narrower than this many elements share a program, ROW_TILE // width rows each.")
    src.append(f"ROW_TILE = {ROW_TILE}")
    src.append("# tl.dot needs at least 16 lanes a dim; 1-D blocks keep 16 too.")
    src.append("MIN_BLOCK = 16")
    src.append("# A row narrower than this takes this many lanes (ROW_TILE // it rows a program): a sum over")
    src.append("# 3 coordinates of 8 M points in rows of 16 lanes left 13 of them masked.")
    src.append("MIN_ROW_BLOCK = 2")
    src.append("# More warps than this per program only adds scheduling overhead on Hopper.")
    src.append("MAX_WARPS = 32")
    src.append("# Without a GPU the kernels run in Triton's CPU interpreter, whose bf16 tl.dot is wrong,")
    src.append("# so matmul kernels upcast their tiles to fp32 there (never on a GPU).")
    src.append("_INTERPRETED = not torch.cuda.is_available()")
    src.append("# ...and its float32 -> bfloat16 conversion truncates: kernels round by hand there.")
    src.append("ROUND_BF16_BY_HAND = tl.constexpr(_INTERPRETED)")
    src.append("# There a program is Python over numpy: pointwise blocks and row tiles grow up to this many")
    src.append("# elements (never on a GPU).")
    src.append(f"INTERPRETER_TILE = {INTERPRETER_TILE}\n")
    # a recurrent layer launches an input product and a kernel a step, per layer and direction
    src += graph_constants(len(part.steps) + sum(
        recurrent_launches(n.args[0].shape, n.args[4], n.args[7], n.args[8]) for n in fw.recurrent),
        sum(isinstance(step, Group) and step.copy_of is None for step in part.steps))
    src.append("")
    for h in sorted(helpers):
        src.append("\n" + HELPERS[h])
    nhwc = any(n.op == NHWC_CONV for n in graph.nodes)
    if any(n.op == CACHED_CAT for n in graph.nodes):
        src.append(_CACHED_CAT)
    first_of: dict[str, str] = {}
    for g in part.groups:
        k = kernels[g.index]
        src.append("")
        src.append(f"# {k.name}: fuses {', '.join(k.fuses)}")
        same = first_of.setdefault(_code_key(k), k.name)
        if same != k.name:
            src.append(f"{k.name} = {same}  # the same code but its comments: compiled once")
            continue
        if g.nhwc:
            src.append("# (the epilogue of a channels_last convolution: reads its NHWC output, adds the conv bias,")
            src.append("# writes the model's NCHW layout; cuDNN runs the conv faster in NHWC without bias)")
        src.append(_cost_comment(g))
        src.append(k.kernel_code)
    if nhwc:
        src.append(_NHWC_KERNEL)
    src.append(_LAUNCH_CONFIG)
    if fw.recurrent:
        src.append(recurrent_code(case.manifest.precision))
    src.append(graph_runner())
    if nhwc:
        src.append(_NHWC_CONV)
    for g in part.groups:
        src.append("")
        src.append(kernels[g.index].launcher_code)
    src.append(_model_class(case, ctor, graph, args, fw.lines))
    return "\n".join(src), fw.notes + ctor.notes


def _code_key(k: KernelSource) -> str:
    """A kernel's code without its name and comments: the repeated layers of a deep model
    (Swin's 24 blocks) give the same kernel under other names and with other node names in its
    comments, and Triton compiles a function per source text. 233 kernels of KernelBench
    level-3 30 were 81 distinct codes; the first forward on the GPU compiled all 233 and
    ran past the verifier's 240 s."""
    code = k.kernel_code.replace(k.name, "_kernel")
    return re.sub(r"[ \t]*#[^\n]*", "", code)


def _pretty(d: dict[str, Any]) -> str:
    lines = ["{"]
    for k, v in d.items():
        lines.append(f"    {json.dumps(k)}: {json.dumps(v)},")
    lines.append("}")
    return "\n".join(lines)


def _slot_owners(graph: Any) -> dict[tuple[str, str], int]:
    """(kind "parameter" | "buffer", owner module's dotted path) -> its index in
    `ModelNew._kopt_slots`, in the order forward first reads them."""
    owners: dict[tuple[str, str], int] = {}
    for n in graph.nodes:
        info = graph.inputs.get(n.name) if n.op == "input" else None
        if info is not None and info.kind in ("param", "buffer"):
            path = info.key.rpartition(".")[0]
            owners.setdefault(("parameter" if info.kind == "param" else "buffer", path), len(owners))
    return owners


_GETTER = re.compile(r'self\.get_(parameter|buffer)\("([^"]+)"\)')


def _via_slots(code: str, slots: dict[tuple[str, str], tuple[int, str]]) -> str:
    """A size's forward code with each `self.get_parameter("a.b.w")` (a walk of the
    submodules by name, ~5 us on every call) read from the weight's slot instead."""
    def slot(m: re.Match[str]) -> str:
        found = slots.get(("param" if m.group(1) == "parameter" else "buffer", m.group(2)))
        return f'S[{found[0]}]["{found[1]}"]' if found else m.group(0)

    return _GETTER.sub(slot, code)


def state_slots(graph: Any) -> dict[tuple[str, str], tuple[int, str]]:
    """(kind "param" | "buffer", state_dict key) -> (index in `ModelNew._kopt_slots`, leaf
    name): forward reads a weight as `S[i]["leaf"]`, a lookup in its owner's own
    `_parameters` or `_buffers` dict. That dict is the module's for its lifetime, so a
    weight loaded, assigned or moved later is the one read (never a copy kept from before)."""
    owners = _slot_owners(graph)
    slots: dict[tuple[str, str], tuple[int, str]] = {}
    for n in graph.nodes:
        info = graph.inputs.get(n.name) if n.op == "input" else None
        if info is not None and info.kind in ("param", "buffer"):
            path, _, leaf = info.key.rpartition(".")
            kind = "parameter" if info.kind == "param" else "buffer"
            slots[(info.kind, info.key)] = (owners[(kind, path)], leaf)
    return slots


def _owner(path: str) -> str:
    """ModelNew's expression for the plain tensor attribute at dotted `path`."""
    owner, _, leaf = path.rpartition(".")
    return f'_submodule(self, "{owner}").{leaf}' if owner else f"self.{leaf}"


def _model_class(case: Case, ctor: Constructor, graph: Any, args: list[Any], body: list[str]) -> str:
    lines = ["", "", "class ModelNew(nn.Module):",
             f'    """{case.name} with its hot path in the Triton kernels above; same constructor and state_dict as Model."""',
             "",
             f"    def __init__(self{', ' + ctor.signature if ctor.signature else ''}):",
             "        super().__init__()"]
    for p in ctor.params:
        *path, leaf = p.key.split(".")
        owner = "self"
        if path:
            owner = f'_submodule(self, "{".".join(path)}")'
        shape = ", ".join(p.shape) + ("," if len(p.shape) == 1 else "")
        tensor = f"torch.zeros(({shape}), dtype={p.dtype})"
        if p.persistent_param:
            lines.append(f'        {owner}.register_parameter("{leaf}", nn.Parameter({tensor}, '
                         f'requires_grad={p.dtype.is_floating_point}))')
        else:
            lines.append(f'        {owner}.register_buffer("{leaf}", {tensor})')
    for info in sorted((i for i in graph.inputs.values() if i.kind == "state"), key=lambda i: i.index):
        n = next((n for n in graph.nodes if graph.inputs.get(n.name) is info), None)
        shape = (", ".join(str(s) for s in n.shape) + ("," if len(n.shape) == 1 else "")) if n else "0,"
        lines.append(f"        {_owner(info.key)} = torch.zeros(({shape}), dtype={n.dtype if n else torch.float32})"
                     "  # state outside the state_dict: Model's own value is set on it")
    for attr, source in sorted(graph.attributes.items()):
        lines.append(f"        self.{attr} = {source}  # a size forward reads (Model fixes it from {source})")
    for n in graph.nodes:
        info = graph.inputs.get(n.name) if n.op == "input" else None
        if info is not None and info.kind == "constant" and info.value is not None:
            v = info.value
            lines.append(f"        self.register_buffer(\"_kopt_{n.name}\", torch.tensor({v.tolist()!r}, "
                         f"dtype={v.dtype}), persistent=False)")
    owners = _slot_owners(graph)
    if owners:
        lines.append("        # the dicts forward reads its weights from: self.get_parameter(\"a.b.w\") walks the")
        lines.append("        # submodules by name on every call (a third of MobileNetV2's host time per forward)")
        lines.append("        self._kopt_slots = [" + ", ".join(
            f'_submodule(self, "{path}")._{kind}s' if path else f"self._{kind}s"
            for kind, path in owners) + "]")
    state = [f'_submodule(self, "{path}")._{kind}s' if path else f"self._{kind}s"
             for kind, path in owners] + ["self._buffers"]
    lines.append("        # what a captured CUDA graph depends on (`_graphed`): the weights' storage")
    lines.append("        self._kopt_state = [" + ", ".join(dict.fromkeys(state)) + "]")
    lines.append("        self._kopt_graphs = {}")
    lines.append("        self._kopt_pool = None  # the graphs' shared memory pool, made at the first capture")
    lines.append("        self._kopt_recent_inputs = []  # recent calls' input addresses (graph_replay)")
    lines.append("        self._kopt_op_by_op = {}  # input forms whose forward runs op by op (graph_replay)")
    user = [a for a in args if a.kind != "state"]
    state = [a for a in args if a.kind == "state"]
    fwd_args = ", ".join(a.key for a in user)
    params = f"self{', ' + fwd_args if fwd_args else ''}"
    tensors = [a.key for a in user if a.kind != "scalar"]
    device = f"{tensors[0]}.device" if tensors else "next(self.parameters()).device"
    call_args = [a.key for a in user] + [_owner(a.key) for a in state]
    inner = ", ".join([*(a.key for a in user), *(state_var(a.key) for a in state)])
    # Triton kernels compute no gradients: forward runs as inference under autograd too (a
    # library product into an `out=` buffer refuses weights that require grad otherwise).
    lines += ["", "    @torch.no_grad()", f"    def forward({params}):"]
    # state outside the state_dict, read at every call: moved where forward runs (`.to()` does
    # not move a plain attribute) and kept there, so later calls copy nothing; passed in like
    # an input, which a CUDA graph copies in
    lines += [f"        {_owner(a.key)} = {_owner(a.key)}.to({device})" for a in state]
    call = f"_graphed(self, self._kopt_forward, ({', '.join(call_args)}{',' if call_args else ''}))"
    if graph.state_writes:
        n = len(graph.state_writes)
        lines.append(f"        out = {call}")
        for i, path in enumerate(graph.state_writes):
            lines.append(f"        {_owner(path)} = out[{i - n}]  # forward's `self.{path} = ...`")
        kept = len(graph.outputs) - n
        lines.append("        return " + ("out[0]" if graph.out_spec == "single" and kept == 1
                                          else f"out[:{kept}]"))
    else:
        lines.append(f"        return {call}")
    lines += ["", f"    def _kopt_forward(self{', ' + inner if inner else ''}):"]
    lines += [f"        {line}" for line in body]
    helper = ['', '', 'def _submodule(root, path):',
              '    """The (created on first use) submodule at a dotted state_dict path."""',
              '    mod = root',
              '    for part in path.split("."):',
              '        if part not in mod._modules:',
              '            mod.add_module(part, nn.Module())',
              '        mod = mod._modules[part]',
              '    return mod']
    return "\n".join(helper + lines) + "\n"
