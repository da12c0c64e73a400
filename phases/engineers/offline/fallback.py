"""A fusion group's PyTorch form: the same region written as torch ops in ModelNew.forward.

Every generated region (one fusion group, one kernel) is emitted twice, behind a switch that
forward reads at each call (`KOPT_REGIONS`, see `regions.py`): the Triton launch, and this
torch form, so the accelerator can time each region both ways on the user's GPU and keep the
faster. The torch form computes like the kernel does: float16/bfloat16 values in float32, an
explicit cast rounds through its dtype, each output rounds once to its dtype.
"""

from __future__ import annotations

from typing import Any

import torch

from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline.attention import ATTENTION, ScoreChain, constant
from kopt.phases.engineers.offline.fusion import Group, Partition
from kopt.phases.engineers.offline.graph import LAYOUT, MATMUL, TAKE, WINDOW_TAP, LibraryCall, Node, Sym

_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_FUNCS = {
    "neg": "torch.neg", "abs": "torch.abs", "exp": "torch.exp", "exp2": "torch.exp2",
    "log": "torch.log", "log2": "torch.log2", "log1p": "torch.log1p", "expm1": "torch.expm1",
    "sqrt": "torch.sqrt", "rsqrt": "torch.rsqrt", "sin": "torch.sin", "cos": "torch.cos",
    "tanh": "torch.tanh", "sigmoid": "torch.sigmoid", "erf": "torch.erf", "relu": "torch.relu",
    "gelu": "torch.nn.functional.gelu", "silu": "torch.nn.functional.silu",
    "hardsigmoid": "torch.nn.functional.hardsigmoid", "hardswish": "torch.nn.functional.hardswish",
    "mish": "torch.nn.functional.mish", "minimum": "torch.minimum", "maximum": "torch.maximum",
    "reciprocal": "torch.reciprocal", "sign": "torch.sign", "floor": "torch.floor",
    "ceil": "torch.ceil", "trunc": "torch.trunc", "round": "torch.round", "eq": "torch.eq",
    "ne": "torch.ne", "lt": "torch.lt", "le": "torch.le", "gt": "torch.gt", "ge": "torch.ge",
    "logical_and": "torch.logical_and", "logical_or": "torch.logical_or",
    "logical_xor": "torch.logical_xor", "logical_not": "torch.logical_not",
    "isnan": "torch.isnan", "isinf": "torch.isinf", "fmod": "torch.fmod",
    "remainder": "torch.remainder", "sinh": "torch.sinh", "cosh": "torch.cosh",
    "square": "torch.square",
}


def _compute(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class TorchRegion:
    """Writes one group's nodes as torch statements over forward's variables."""

    def __init__(self, group: Group, part: Partition, var: dict[Node, str], arg: Any, size: Any,
                 view_shape: Any = None) -> None:
        self.g = group
        self.view_shape = view_shape
        """ForwardWriter.view_shape: a view's target with its largest fixed size as -1."""
        self.part = part
        self.var = var
        self.arg = arg
        """ForwardWriter.arg: source text of a forward-side value."""
        self.size = size
        self.lines: list[str] = []
        self.local: dict[Node, str] = {}
        self.calls: dict[Node, LibraryCall] = {}
        """The ops written as their library call (`library_calls`): fresh results."""

    def operand(self, a: Any) -> str:
        if isinstance(a, Node):
            if a in self.local:
                return self.local[a]
            if a in self.part.generated:
                return self.generated(a)
            name = f"t_{a.name}"
            src = self.var[a]
            if _compute(a.dtype) != a.dtype:
                self.lines.append(f"{name} = {src}.float()")
            else:
                name = src
            self.local[a] = name
            return name
        if isinstance(a, tuple) and a and a[0] in ("numel", "numel_minus"):
            raise EngineerError("internal: a mean's count is read through its reduction")
        if isinstance(a, Sym):  # a size expression (s0*s27): one operand, whatever surrounds it
            return f"({self.arg(a)})"
        return self.arg(a)

    def generated(self, n: Node) -> str:
        """A shape-only value (arange, full and what is computed from them)."""
        if n.op == "full":
            v = n.args[0]
            text = self.arg(v) if not isinstance(v, Sym) else self.size(v)
        elif n.op == "arange":
            start, step = (self.arg(a) for a in n.args[:2])
            text = f"(torch.arange({self.size(n.sym[0])}, device=device) * {step} + {start})"
            if n.dtype.is_floating_point:
                text += ".float()"
        else:
            text = self.expr(n)
        name = f"t_{n.name}"
        self.lines.append(f"{name} = {text}  # {n.origin} (from shapes)")
        self.local[n] = name
        return name

    def count(self, n: Node, a: tuple) -> str:
        """The reduced extent a mean/var divides by: the reduction's input size along its dim."""
        red = n.args[0]
        x = red.args[0]
        text = f"{self.operand(x)}.shape[{a[1]}]"
        if a[0] == "numel_minus":
            return f"max({text} - {float(a[2])!r}, 0.0)"
        return text

    def expr(self, n: Node) -> str:
        op = n.op
        if op == ATTENTION:
            return self.attention(n)
        if op == "full" and n in self.g.dmaps:  # a constant tensor a PyTorch op outside reads
            v = n.args[0]
            value = self.size(v) if isinstance(v, Sym) else self.arg(v)
            sizes = ", ".join(self.size(s) for s in n.sym) + ("," if n.rank == 1 else "")
            return f"torch.full(({sizes}), {value}, dtype={n.dtype}, device=device)"
        args = [self.count(n, a) if isinstance(a, tuple) and a and a[0] in ("numel", "numel_minus")
                else self.operand(a) for a in n.args]
        if self.g.kind == "conv" and n is self.g.anchor:
            return self.convolution(n, args)
        if op in _BINARY:
            return f"({args[0]} {_BINARY[op]} {args[1]})"
        if op in ("truediv_floor", "truediv_trunc"):
            return f'torch.div({args[0]}, {args[1]}, rounding_mode="{op.removeprefix("truediv_")}")'
        if op == "cast":
            if n.dtype in (torch.float16, torch.bfloat16):
                return f"{args[0]}.to({n.dtype}).float()"
            return f"{args[0]}.to({_compute(n.dtype)})"
        if op == "identity":
            return args[0]
        if op == "where":
            return f"torch.where({args[0]}, {args[1]}, {args[2]})"
        if op == "clamp":
            return f"torch.clamp({args[0]}, {args[1]}, {args[2]})"
        if op == "pow":
            return f"torch.pow({args[0]}, {args[1]})"
        if op == "gelu_tanh":
            return f'torch.nn.functional.gelu({args[0]}, approximate="tanh")'
        if op == "leaky_relu":
            return f"torch.nn.functional.leaky_relu({args[0]}, {args[1]})"
        if op == "elu":
            alpha, scale, input_scale = (*args[1:4], "1.0", "1.0")[:3]
            if float(input_scale) == 1.0:
                return f"({scale} * torch.nn.functional.elu({args[0]}, {alpha}))"
            return (f"({scale} * torch.where({args[0]} > 0, {args[0]}, "
                    f"{alpha} * torch.expm1({args[0]} * {input_scale})))")
        if op == "softplus":
            return f"torch.nn.functional.softplus({args[0]}, {args[1]}, {args[2]})"
        if op in ("minimum", "maximum", "eq", "ne", "lt", "le", "gt", "ge", "fmod", "remainder",
                  "logical_and", "logical_or", "logical_xor"):
            a, b = args[0], args[1]

            def scalar(x: Any) -> bool:  # a number, or a constant `full` written as one
                return not isinstance(x, Node) or x.op == "full"

            if scalar(n.args[0]):  # torch's binary functions want a tensor first
                a = f"torch.as_tensor({a}, device=device)"
            if op.startswith("logical_") and scalar(n.args[1]):  # and the logical ones second too
                b = f"torch.as_tensor({b}, device=device)"
            return f"{_FUNCS[op]}({a}, {b})"
        if op in _FUNCS:
            return f"{_FUNCS[op]}({args[0]})"
        if op in ("sum", "amax", "amin"):
            d, keep = n.kwargs["dim"], n.kwargs.get("keepdim", False)
            x = args[0]
            if op == "sum" and n.args[0].dtype == torch.bool:
                x = f"{x}.long()"
            return f"{x}.{op}(dim={d}, keepdim={keep})"
        if op == "select":
            d, keep = n.kwargs["dim"], n.kwargs.get("keepdim", True)
            idx = n.args[1]
            text = f"torch.gather({args[0]}, {d}, {args[1]}.long())"
            return text if keep and idx.rank == n.args[0].rank else f"{text}.squeeze({d})"
        if op in MATMUL:
            a, b = (self.var[x] for x in n.args[:2])
            return f"torch.{op}({a}, {b}).to({_compute(n.dtype)})"
        if op in LAYOUT:
            return self.layout(n, args[0])
        if op == TAKE and n.kwargs.get("gather"):
            return f"torch.gather({args[0]}, {n.kwargs['dim']}, {args[1]}.long())"
        if op == TAKE:  # advanced indexing: index tensors on adjacent dims from `dim`
            picks = ", ".join([":"] * n.kwargs["dim"] + [f"{a}.long()" for a in args[1:]])
            return f"{args[0]}[{picks}]"
        if op == WINDOW_TAP:
            x = n.args[0]
            if x in self.part.generated and x.op == "full":  # a part of constants: a tensor here
                sizes = ", ".join(self.size(s) for s in x.sym) + ("," if x.rank == 1 else "")
                return self.tap(n, f"torch.full(({sizes}), {args[0]}, dtype={_compute(x.dtype)}, "
                                   f"device=device)")
            return self.tap(n, args[0])
        if op in ("argmax", "argmin"):
            return f"torch.{op}({args[0]}, dim={n.kwargs['dim']}, keepdim={n.kwargs['keepdim']})"
        if op in ("cumsum", "cumprod"):
            d = n.kwargs["dim"]
            if n.kwargs.get("reverse"):
                return f"torch.{op}({args[0]}.flip({d}), dim={d}).flip({d})"
            return f"torch.{op}({args[0]}, dim={d})"
        raise EngineerError(f"no PyTorch form for {op!r} in region {self.g.name}")

    def attention(self, n: Node) -> str:
        """A fused attention unfused again: the scores, the model's chain on them, softmax
        over the keys, the second product (the probabilities in the inputs' dtype)."""
        chain: ScoreChain = n.kwargs["chain"]
        # (a 4-D operand is the (outer, heads, ...) tensor the product's operand merged)
        q, kt, v = (self.var[x] + (".flatten(0, 1)" if x.rank == 4 else "") for x in n.args[:3])
        s = f"t_{n.name}_scores"
        self.lines.append(f"{s} = torch.bmm({q}, {kt}).to({_compute(chain.score.dtype)})  # {chain.score.origin}")
        if chain.score.rank == 4:  # the heads as the kernel's launcher reads them
            split, size = chain.heads(n)
            heads = f"{self.var[n.args[split]]}.shape[1]" if split is not None else self.size(size)
            self.lines.append(f"{s} = {s}.view(-1, {heads}, {s}.shape[-2], {s}.shape[-1])")
        self.local[chain.score] = s
        for old, now in zip(chain.externals, n.args[3:], strict=True):
            self.local[old] = self.operand(now)
        for c in chain.nodes:
            for a in c.inputs():
                if a not in self.local and constant(a):
                    self.local[a] = self.arg(a.args[0])
            self.lines.append(f"t_{c.name} = {self.expr(c)}  # {c.origin}: {c.op}")
            self.local[c] = f"t_{c.name}"
        x = self.local[chain.nodes[-1]] if chain.nodes else s
        p = f"torch.softmax({x}.float(), -1)" + (".flatten(0, 1)" if chain.score.rank == 4 else "")
        return f"torch.bmm({p}.to({n.args[2].dtype}), {v}).to({_compute(n.dtype)})"

    def convolution(self, n: Node, args: list[str]) -> str:
        """A conv group's convolution as `torch.nn.functional.conv{d}d` (or its transpose) on
        the operands (float32 for half inputs, as the kernel accumulates)."""
        x, w, b = args[:3]
        stride, padding, dilation, transposed, output_padding, groups = n.args[3:]
        dims = n.rank - 2
        if transposed:
            return (f"torch.nn.functional.conv_transpose{dims}d({x}, {w}, {b}, stride={stride}, "
                    f"padding={padding}, output_padding={output_padding}, groups={groups}, "
                    f"dilation={dilation})")
        return (f"torch.nn.functional.conv{dims}d({x}, {w}, {b}, stride={stride}, "
                f"padding={padding}, dilation={dilation}, groups={groups})")

    def tap(self, n: Node, x: str) -> str:
        """x padded with the fill, then a strided slice per pooled dim (a shift alone, a
        concatenation's part or a constant pad, is the padding itself)."""
        x_rank = n.args[0].rank
        taps = sorted(n.kwargs["taps"])
        fill = 'float("-inf")' if n.kwargs["fill"] == float("-inf") else repr(n.kwargs["fill"])

        def size(d: int) -> str:  # the output's size along d
            return str(n.sym[d]) if isinstance(n.sym[d], int) else self.operand(Sym(n.sym[d], n.shape[d]))

        # a concatenation's part or a constant pad: x at o - offset, the fill outside (no slice)
        shift = n.kwargs.get("clip") and not n.kwargs.get("ceil") and all(t[5] == 1 for t in taps)
        pads: list[str] = []
        index = ["slice(None)"] * x_rank
        for d in range(x_rank - 1, taps[0][0] - 1, -1):
            t = next((t for t in taps if t[0] == d), None)
            if t is None:
                pads += ["0", "0"]
                continue
            _d, stride, dilation, padding, tap, _window, _size = t
            before = self.operand(padding) if isinstance(padding, Sym) else str(padding)
            if shift:
                pads += [before, f"{size(d)} - ({before}) - {x}.shape[{d}]"]
                continue
            start = tap * dilation
            # room for the last window's reach, whatever the output's size says (ceil mode's
            # overhang, a constant pad's own end folded into the padding)
            pads += [before, f"max(0, {start} + {stride} * ({size(d)} - 1) + 1 - {before} - {x}.shape[{d}])"]
            index[d] = f"slice({start}, {start} + {stride} * ({size(d)} - 1) + 1, {stride})"
        padded = f"torch.nn.functional.pad({x}, [{', '.join(pads)}], value={fill})"
        if shift:
            return padded
        return f"{padded}[{', '.join(index)}]"

    def layout(self, n: Node, x: str) -> str:
        if n.op == "flatten":
            return f"{x}.flatten({n.args[1]}, {n.args[2]})"
        if n.op == "unsqueeze":
            return f"{x}.unsqueeze({n.args[1]})"
        if n.op == "squeeze":
            return f"torch.squeeze({x}, {tuple(n.args[1])})"
        if n.op == "permute":
            return f"{x}.permute({list(n.args[1])})"
        if n.op == "expand":
            return f"{x}.expand({', '.join(self.arg(s) for s in n.args[1])})"
        if n.op == "view":
            if self.view_shape is not None:
                return f"{x}.reshape({self.view_shape(n, x)})"
            return f"{x}.reshape({', '.join(self.size(s) for s in n.sym)})"
        raise EngineerError(f"no PyTorch form for layout op {n.op!r} in region {self.g.name}")

    def library_calls(self) -> tuple[dict[Node, LibraryCall], set[Node]]:
        """The group's ops that stand for one library call (`graph.LibraryCall`) and can be
        written as that call, and the nodes of their lowering the call replaces: those of the
        same origin that only it reads, computed in this group. A call is written only where
        each operand is a forward variable or a value of this group outside its lowering."""
        known = self.part.graph.library_calls if self.part is not None else {}
        calls = {n: known[n] for n in self.g.nodes if n in known}
        if not calls:
            return {}, set()
        members, outputs = set(self.g.nodes), {id(o) for o in self.g.outputs}
        users = self.part.graph.users()
        usable: dict[Node, LibraryCall] = {}
        absorbed: set[Node] = set()
        for n, call in calls.items():
            inner: set[Node] = set()
            stack = list(n.inputs())
            while stack:
                a = stack.pop()
                if a in members and a.origin == n.origin and a not in inner:
                    inner.add(a)
                    stack += a.inputs()
            operands = [a for a in call.operands if isinstance(a, Node)]
            if any(a in inner or not (a in self.var or a in members) for a in operands):
                continue
            if any(id(a) in outputs or any(u is not n and u not in inner for u in users[a])
                   for a in inner):
                continue
            usable[n] = call
            absorbed |= inner
        return usable, absorbed

    def library(self, call: LibraryCall) -> str:
        """The library call's source over the operands' torch values."""
        args = [self.operand(a) if isinstance(a, Node) else "None" for a in call.operands]
        params = dict(call.params)
        if call.op == "conv":
            x, w, b = args
            dims = call.operands[0].rank - 2
            return (f"torch.nn.functional.conv{dims}d({x}, {w}, {b}, stride={params['stride']}, "
                    f"padding={params['padding']}, dilation={params['dilation']}, "
                    f"groups={w}.shape[0])")
        if call.op == "batch_norm":
            x, mean, var, weight, bias = args
            return (f"torch.nn.functional.batch_norm({x}, {mean}, {var}, {weight}, {bias}, "
                    f"False, 0.0, {params['eps']!r})")
        if call.op == "max_pool":
            return (f"torch.nn.functional.max_pool{params['dims']}d({args[0]}, "
                    f"{params['kernel_size']}, {params['stride']}, {params['padding']}, "
                    f"{params['dilation']}, ceil_mode={params['ceil_mode']})")
        if call.op == "avg_pool":
            return (f"torch.nn.functional.avg_pool{params['dims']}d({args[0]}, "
                    f"{params['kernel_size']}, {params['stride']}, {params['padding']}, "
                    f"count_include_pad={params['count_include_pad']})")
        raise EngineerError(f"internal: no PyTorch form for library call {call.op!r}")

    def write(self) -> list[str]:
        """The statements; they assign `v_<name>` for each of the group's outputs."""
        calls, absorbed = self.library_calls()
        self.calls = calls
        for n in self.g.nodes:
            if n in self.local or n in absorbed:
                continue
            text = self.library(calls[n]) if n in calls else self.expr(n)
            name = f"t_{n.name}"
            self.lines.append(f"{name} = {text}  # {n.origin}: {n.op}")
            self.local[n] = name
        for o in self.g.outputs:
            src = self.local[o]
            # a fresh tensor, as the kernel writes: never a view or alias of an input. An op
            # that computes allocates its result: copying it again cost a pass over the
            # output (a transposed conv's region in PyTorch: 3.54 -> 3.74 ms, H200, 2026-11-29)
            copy = ", copy=True" if self.aliases(o) else ""
            self.lines.append(f"v_{o.name} = {src}.to({o.dtype}, "
                              f"memory_format=torch.contiguous_format{copy})")
        return self.lines

    def aliases(self, o: Node) -> bool:
        """Whether output `o`'s torch form may share memory with another tensor: a layout op
        (a view), an identity or a cast (`.to` returns its operand when the dtype matches), a
        pooling tap (a slice), a value this group did not compute, and, kept copied since no
        case here needs otherwise, a gather (`select`, squeezed) or a constant (`full`)."""
        if o not in self.g.nodes:
            return True
        if (self.g.kind == "conv" and o is self.g.anchor) or o in self.calls:
            return False
        return o.op in LAYOUT or o.op in ("identity", "cast", WINDOW_TAP, "select", "full")


def torch_region(group: Group, part: Partition, var: dict[Node, str], arg: Any, size: Any,
                 view_shape: Any = None) -> list[str]:
    """`group` as torch statements over forward's variables (raises EngineerError when an op
    has no PyTorch form: the region then has only its Triton form)."""
    return TorchRegion(group, part, var, arg, size, view_shape).write()
