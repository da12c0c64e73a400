"""Pointwise ops as Triton expressions.

Every value in a generated kernel is computed in its *compute type*: float32 for float16,
bfloat16 and float32 tensors (float32 accumulation, docs/CASES.md), float64 for float64, the
integer type for integers and int1 for bools. Explicit casts in the model (`.to(bf16)`)
round through the narrow type, so a kernel rounds where eager PyTorch does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kopt.harness.errors import EngineerError

TL_TYPES = {
    torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16", torch.float32: "tl.float32",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
    torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}

# Helper @triton.jit functions a kernel file defines when its expressions use them.
HELPERS = {
    "_tiled_split": '''# A tiled reduction whose grid has fewer programs than this splits its reduced dim across
# programs (partial statistics per split, then each split's outputs from all of them).
# 2048: the 65536x4096 float32 column standardisation at its default tiles (64x64, 4 warps,
# whole tiles) took 0.8117 ms with 2048 (32 splits), 0.8626 with 1024 and 0.8171 with 4096,
# its second launch 0.546 ms against 0.582 (H200, 2026-11-29, benchmarks/column_phases_gpu.py);
# with masked tiles 1024 had been ahead at five of seven settings (2026-11-28).
SPLIT_PROGRAMS = 2048
SPLIT_MIN_TILES = 4


def _tiled_split(programs, n_cols, block):
    """How many programs share one column block's reduced extent: doubled while the grid has
    fewer than SPLIT_PROGRAMS and each split keeps SPLIT_MIN_TILES tiles (at most 64). In the
    CPU interpreter, two wherever the extent loops (the split path is exercised there too)."""
    if _INTERPRETED:
        return 2 if n_cols > block else 1
    s = 1
    while s < 64 and programs * s * 2 <= SPLIT_PROGRAMS and n_cols >= block * SPLIT_MIN_TILES * s * 2:
        s *= 2
    return s''',
    "_dense_walk": '''def _dense_walk(x, shape, walk):
    """Whether x has the domain's shape and lies dense in memory in the kernel's walk order
    (dims outermost first): its element at the walk's flat index i is x's i-th element."""
    if tuple(x.shape) != shape:
        return False
    expected = 1
    for d in reversed(walk):
        if x.shape[d] != 1 and x.stride(d) != expected:
            return False
        expected *= x.shape[d]
    return True''',
    "_laid_from": '''def _laid_from(x, shape):
    """The first dim from which x is laid out as a contiguous tensor of the domain's shape:
    over dims k.. its strides are the domain's row-major ones (a size-1 dim of both, any), so a
    kernel reads its offset over them from the flat index instead of from coordinates divided
    out per element. len(shape) when not even the last dim is."""
    if x.dim() != len(shape):
        return len(shape)
    expected, k = 1, len(shape)
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] != 1 and (x.shape[d] != shape[d] or x.stride(d) != expected):
            break
        expected *= shape[d]
        k = d
    return k''',
    "_welford_combine": '''@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # Two lanes' (mean, sum of squared deviations, count) as one (Chan et al.); empty lanes
    # (n = 0) leave the other side as it is.
    n = n_a + n_b
    w = n_b / tl.maximum(n, 1.0)
    delta = mean_b - mean_a
    return mean_a + delta * w, m2_a + m2_b + delta * delta * n_a * w, n
''',
    "_to_bf16": '''@triton.jit
def _to_bf16(x):
    # Round to nearest even. GPUs do this in .to(); the CPU interpreter truncates, so there
    # the rounding is done on the float32 bits first (a no-op branch when compiled for a GPU).
    if ROUND_BF16_BY_HAND:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(tl.bfloat16)
''',
    "_erf": '''@triton.jit
def _erf(x):
    # erf of a float32 value without libdevice (exact GELU on an H100 was ALU-bound on tl.erf:
    # layernorm_gelu 16384x4096 bf16 reached 73% of the roofline floor with it, 94% with GELU
    # removed; 2026-11-22). |x| < 0.9: x * P(x^2), so tiny x keeps ~1 ulp relative error;
    # beyond: 1 - 2^Q(|x|), |x| clamped at 4 where erf rounds to 1.0 in float32. P and Q are
    # Lawson (minimax) fits of erf(x)/x and log2(erfc(x)) made for kopt. Max abs error vs
    # float64 erf: 8.9e-8 over 2e6 float32 points of [-6, 6] through the interpreter
    # (tests/test_offline_fast_erf.py); a GPU's ex2.approx adds at most ~5e-8. Cost: one exp2
    # and 11 FMAs, no division and no branch. NaN stays NaN, +-inf gives +-1.
    a = tl.abs(x)
    s = x * x
    p = -0.0005938376416452229
    p = p * s + 0.00497779855504632
    p = p * s + -0.026750916615128517
    p = p * s + 0.11281134188175201
    p = p * s + -0.3761237561702728
    p = p * s + 1.1283791065216064
    t = tl.where(a > 4.0, 4.0, a)  # not tl.minimum: a NaN must not become 4
    q = 0.0002844752452801913
    q = q * t + -0.004408331122249365
    q = q * t + 0.0321391262114048
    q = q * t + -0.15009436011314392
    q = q * t + -0.919082760810852
    q = q * t + -1.626998782157898
    q = q * t + -0.000256042112596333
    tail = 1.0 - tl.exp2(q)
    return tl.where(a < 0.9, x * p, tl.where(x < 0, -tail, tail))
''',
    "_tanh": '''@triton.jit
def _tanh(x):
    # tanh through sigmoid: portable across the interpreter and every GPU backend.
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0
''',
}


def compute_type(dtype: torch.dtype) -> str:
    """The Triton type a value of `dtype` is computed in."""
    if dtype in (torch.float16, torch.bfloat16, torch.float32):
        return "tl.float32"
    if dtype not in TL_TYPES:
        raise EngineerError(f"no Triton type for {dtype}")
    return TL_TYPES[dtype]


def is_float_type(t: str) -> bool:
    return t in ("tl.float32", "tl.float64")


def literal(v: Any) -> str:
    """A Python scalar as Triton source."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if math.isinf(v):
            return 'float("inf")' if v > 0 else '-float("inf")'
        if math.isnan(v):
            return 'float("nan")'
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    raise EngineerError(f"unsupported constant {v!r} in a fused op")


class Operand:
    """An emitted value: its source text and compute type (None for a Python scalar); `pair`,
    in a kernel that walks the last dim in pairs, what it is over them (`kernels/pairs.py`)."""

    def __init__(self, text: str, ctype: str | None, scalar: Any = None, pair: Any = None) -> None:
        self.text = text
        self.ctype = ctype
        self.scalar = scalar
        self.pair = pair

    def as_type(self, ctype: str) -> str:
        if self.ctype is None:
            if ctype == "tl.int1" and self.scalar is not None:
                # `mask & 1` is int32 and Triton deprecates non-boolean `where` conditions
                return "True" if bool(self.scalar) else "False"
            if is_float_type(ctype) and isinstance(self.scalar, (int, bool)) and not isinstance(self.scalar, float):
                return literal(float(self.scalar))
            return self.text
        if self.ctype == ctype:
            return self.text
        if ctype == "tl.int1":
            return f"({self.text} != 0)"
        return f"{self.text}.to({ctype})"


def _promote(ops: list[Operand]) -> str:
    types = [o.ctype for o in ops if o.ctype is not None]
    if "tl.float64" in types:
        return "tl.float64"
    if "tl.float32" in types or any(isinstance(o.scalar, float) for o in ops if o.ctype is None):
        return "tl.float32"
    ints = [t for t in types if t != "tl.int1"]
    if ints:
        return "tl.int64" if "tl.int64" in ints else ints[0]
    return "tl.int1" if types else "tl.int64"


def _erf(x: str, ct: str, helpers: set[str]) -> str:
    """erf of `x`: the `_erf` helper (max abs error 8.9e-8, far inside float32 strict's atol of
    1e-4) for float32 compute; libdevice's tl.erf for float64, whose cases expect ~1e-16."""
    if ct != "tl.float32":
        return f"tl.erf({x})"
    helpers.add("_erf")
    return f"_erf({x})"


def emit_pointwise(op: str, args: list[Operand], out_dtype: torch.dtype, extra: list[Any],
                   helpers: set[str]) -> str:
    """Source text computing `op` on `args` in the compute type of `out_dtype`."""
    ct = compute_type(out_dtype)
    fl = is_float_type(ct)

    def a(i: int, t: str | None = None) -> str:
        return args[i].as_type(t or ct)

    if op == "cast":
        src = args[0]
        if out_dtype in (torch.float16, torch.bfloat16):
            if out_dtype == torch.bfloat16:
                helpers.add("_to_bf16")
                return f"_to_bf16({src.as_type('tl.float32')}).to(tl.float32)"
            return f"{src.as_type('tl.float32')}.to({TL_TYPES[out_dtype]}).to(tl.float32)"
        return src.as_type(ct)
    if op == "identity":
        return a(0)
    binary = {"add": "+", "sub": "-", "mul": "*"}
    if op in binary:
        return f"({a(0)} {binary[op]} {a(1)})"
    if op == "div":
        if not fl:
            raise EngineerError("integer true division with an integer result")
        return f"({a(0)} / {a(1)})"
    if op in ("truediv_floor", "truediv_trunc"):
        t = _promote(args)
        x, y = args[0].as_type(t), args[1].as_type(t)
        if is_float_type(t):
            q = f"({x} / {y})"
            return f"tl.floor({q})" if op == "truediv_floor" else \
                f"tl.where({q} >= 0, tl.floor({q}), tl.ceil({q}))"
        if op == "truediv_trunc":
            return f"({x} // {y})"
        return f"(({x} // {y}) - ((({x} % {y}) != 0) & (({x} < 0) != ({y} < 0))).to({t}))"
    if op in ("fmod", "remainder") and not is_float_type(_promote(args)):
        t = _promote(args)
        x, y = args[0].as_type(t), args[1].as_type(t)
        if op == "fmod":  # Triton's integer % truncates, as C and torch.fmod do
            return f"({x} % {y})"
        r = f"({x} % {y})"  # Python's remainder takes the divisor's sign
        return f"tl.where(({r} != 0) & (({r} < 0) != ({y} < 0)), {r} + {y}, {r})"
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        t = _promote(args)
        return f"({args[0].as_type(t)} {sym} {args[1].as_type(t)})"
    if op in ("logical_and", "logical_or", "logical_xor"):
        sym = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}[op]
        return f"({args[0].as_type('tl.int1')} {sym} {args[1].as_type('tl.int1')})"
    if op == "logical_not":
        return f"({args[0].as_type('tl.int1')} == 0)"
    if op == "where":
        return f"tl.where({args[0].as_type('tl.int1')}, {a(1)}, {a(2)})"
    if op in ("minimum", "maximum"):
        return f"tl.{op}({a(0)}, {a(1)})"
    if op == "clamp":
        x = a(0)
        lo = args[1] if len(args) > 1 else None
        hi = args[2] if len(args) > 2 else None
        if lo is not None and not (lo.ctype is None and lo.scalar is None):
            x = f"tl.maximum({x}, {lo.as_type(ct)})"
        if hi is not None and not (hi.ctype is None and hi.scalar is None):
            x = f"tl.minimum({x}, {hi.as_type(ct)})"
        return x
    if op == "neg":
        return f"(-{a(0)})"
    if op == "abs":
        return f"tl.abs({a(0)})"
    if op == "relu":
        return f"tl.maximum({a(0)}, {'0.0' if fl else '0'})"
    if op == "square":
        return f"({a(0)} * {a(0)})"
    if op == "sign":
        x = a(0)
        one, zero = ("1.0", "0.0") if fl else ("1", "0")
        return f"tl.where({x} > 0, {one}, tl.where({x} < 0, -{one}, {zero}))"
    if op == "isnan":
        x = args[0].as_type(_promote(args))
        return f"({x} != {x})"
    if op == "isinf":
        x = args[0].as_type(_promote(args))
        return f"(tl.abs({x}) == float(\"inf\"))" if is_float_type(_promote(args)) else f"({x} != {x})"
    if not fl:
        raise EngineerError(f"{op} on integers is not generated")
    x = a(0)
    if op == "erf":
        return _erf(x, ct, helpers)
    if op == "gelu":
        return f"(0.5 * {x} * (1.0 + {_erf(f'{x} * 0.7071067811865476', ct, helpers)}))"
    unary = {"exp": f"tl.exp({x})", "exp2": f"tl.exp2({x})", "log": f"tl.log({x})",
             "log2": f"tl.log2({x})", "sqrt": f"tl.sqrt({x})", "rsqrt": f"tl.rsqrt({x})",
             "sin": f"tl.sin({x})", "cos": f"tl.cos({x})", "sigmoid": f"tl.sigmoid({x})",
             "floor": f"tl.floor({x})", "ceil": f"tl.ceil({x})",
             "reciprocal": f"(1.0 / {x})",
             "log1p": f"tl.where(tl.abs({x}) < 1e-4, {x} - 0.5 * {x} * {x}, tl.log(1.0 + {x}))",
             "expm1": f"tl.where(tl.abs({x}) < 1e-4, {x} + 0.5 * {x} * {x}, tl.exp({x}) - 1.0)",
             "trunc": f"tl.where({x} >= 0, tl.floor({x}), tl.ceil({x}))",
             "round": f"tl.where(tl.abs({x} - tl.floor({x}) - 0.5) < 1e-7 * 0, tl.floor({x}), tl.floor({x} + 0.5))",
             "silu": f"({x} * tl.sigmoid({x}))",
             "hardsigmoid": f"tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)",
             "hardswish": f"({x} * tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0))",
             "sinh": f"(0.5 * (tl.exp({x}) - tl.exp(-{x})))",
             "cosh": f"(0.5 * (tl.exp({x}) + tl.exp(-{x})))"}
    if op in unary:
        return unary[op]
    if op in ("tanh", "gelu_tanh", "mish"):
        helpers.add("_tanh")
        if op == "tanh":
            return f"_tanh({x})"
        if op == "mish":
            sp = f"tl.where({x} > 20.0, {x}, tl.log(1.0 + tl.exp({x})))"
            return f"({x} * _tanh({sp}))"
        return f"(0.5 * {x} * (1.0 + _tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))))"
    if op == "leaky_relu":
        return f"tl.where({x} > 0, {x}, {x} * {literal(float(extra[0]))})"
    if op == "elu":  # scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1))
        alpha, scale, input_scale = (float(e) for e in (*extra, 1.0, 1.0)[:3])
        inner = x if input_scale == 1.0 else f"{x} * {literal(input_scale)}"
        body = f"tl.where({x} > 0, {x}, {literal(alpha)} * (tl.exp({inner}) - 1.0))"
        return body if scale == 1.0 else f"({literal(scale)} * {body})"
    if op == "softplus":
        beta, th = float(extra[0]), float(extra[1])
        return (f"tl.where({x} * {literal(beta)} > {literal(th)}, {x}, "
                f"tl.log(1.0 + tl.exp({x} * {literal(beta)})) / {literal(beta)})")
    if op in ("fmod", "remainder"):
        y = a(1)
        q = f"({x} / {y})"
        rounded = f"tl.where({q} >= 0, tl.floor({q}), tl.ceil({q}))" if op == "fmod" else f"tl.floor({q})"
        return f"({x} - {y} * {rounded})"
    if op == "pow":
        e = args[1]
        if e.ctype is None and isinstance(e.scalar, (int, float)):
            p = float(e.scalar)
            if p == 2.0:
                return f"({x} * {x})"
            if p == 1.0:
                return x
            if p == 0.5:
                return f"tl.sqrt({x})"
            if p == -0.5:
                return f"tl.rsqrt({x})"
            if p == 3.0:
                return f"({x} * {x} * {x})"
            if p == -1.0:
                return f"(1.0 / {x})"
            if p == 0.0:
                return f"({x} * 0.0 + 1.0)"
            if p.is_integer():
                mag = f"tl.exp2({literal(p)} * tl.log2(tl.abs({x})))"
                if int(p) % 2:
                    return f"tl.where({x} < 0, -{mag}, {mag})"
                return mag
            return f"tl.exp2({literal(p)} * tl.log2({x}))"
        if args[0].ctype is None:
            base = float(args[0].scalar)
            return f"tl.exp2({a(1)} * {literal(math.log2(base))})" if base > 0 else \
                f"tl.exp2({a(1)} * tl.log2({literal(base)} + 0.0 * {a(1)}))"
        y = a(1)
        return f"tl.exp2({y} * tl.log2({x}))"
    raise EngineerError(f"no Triton expression for pointwise op {op!r}")
