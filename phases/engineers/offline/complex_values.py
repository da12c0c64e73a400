"""Complex values as their real and imaginary parts, so that kernels compute with them.

Triton has no complex type, so an exported op that makes or reads a complex tensor ran in
PyTorch. The common use is a rotation of pairs written with complex numbers (Meta's LLaMA
rotary embedding: `view_as_complex(x.reshape(..., -1, 2)) * freqs_cis`, then `view_as_real(...)
.flatten(3)`), where nothing else was left to generate. Here a complex value is a `Complex`:
two real nodes of the complex shape. The ops that only move or combine values are lowered on
the parts: `view_as_complex` of a view that splits the last dim in pairs takes its even and odd
elements (strided slices, which a kernel reads at 2 q and 2 q + 1), `view_as_real` stacks the
parts along a new last dim (a `cat`, which the view merging it back interleaves:
`scatter.lower_interleave_view`), a product is (ac - bd, ad + bc), sums and differences are
part-wise, and layout ops (slices, views, unsqueezes, expands, permutes, copies) apply to both
parts. A complex input or buffer is read through `view_as_real` (a view, in PyTorch). Any other
op with a complex operand runs in PyTorch as before, its complex operands rebuilt with
`torch.complex(re, im)` (`materialized`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kopt.phases.engineers.offline.graph import _SIMPLE, _VIEWS, Builder, Node, lower_cat, norm_dim

_BIG = 9223372036854775807
"""A slice's end that means 'to the end', as torch.export writes it."""

_LAYOUT = {p: _VIEWS.get(p) or _SIMPLE[p] for p in (
    "slice", "view", "_unsafe_view", "reshape", "unsqueeze", "expand", "permute", "clone", "alias",
    "contiguous")}
"""Layout ops applied to both parts, by export's name -> the graph's (as capture maps them)."""
_TARGETS = {"slice": torch.ops.aten.slice.Tensor, "select_index": torch.ops.aten.select.int}
"""The aten op the forward calls for a layout node the candidate runs in PyTorch."""


@dataclass(frozen=True)
class Complex:
    """A complex value as two real nodes of its shape."""

    re: Node
    im: Node


def lower_complex(b: Builder, packet: str, args: list[Any], shape: tuple[int, ...],
                  sym: tuple[Any, ...], dtype: torch.dtype, name: str) -> Any | None:
    """The exported call `packet(*args)` on the parts of its complex values, or None where it
    is not one of the ops above (the caller runs it in PyTorch)."""
    if packet == "view_as_complex" and isinstance(args[0], Node) and args[0].rank >= 1 and \
            args[0].shape[-1] == 2 and not args[0].dtype.is_complex:
        return _pairs(b, args[0], shape, sym, name)
    if packet == "view_as_real" and args and _is_complex(args[0]) and len(shape) >= 1:
        z = parts(b, args[0], name)
        halves = [b.add(Node(f"{name}_{k}", "unsqueeze", [v, v.rank], {}, v.shape + (1,),
                             v.sym + (1,), v.dtype, origin=name)) for k, v in (("re", z.re), ("im", z.im))]
        return lower_cat(b, halves, len(shape) - 1, tuple(shape), dtype, name, name)
    if not dtype.is_complex:
        return None
    real = dtype.to_real()
    if packet in ("mul", "add", "sub") and len(args) >= 2 and any(_is_complex(a) for a in args[:2]):
        x, y = (parts(b, a, name) if _is_complex(a) else a for a in args[:2])
        if packet == "add" or packet == "sub":
            if not (isinstance(x, Complex) and isinstance(y, Complex)):
                return None  # (a real operand adds to the real part only: rare, left to PyTorch)
            return Complex(_real(b, packet, [x.re, y.re], shape, sym, real, f"{name}_re"),
                           _real(b, packet, [x.im, y.im], shape, sym, real, f"{name}_im"))
        if not isinstance(x, Complex):
            x, y = y, x
        if not isinstance(y, Complex):  # a real factor scales both parts
            if not (isinstance(y, (Node, int, float)) and not isinstance(y, bool)):
                return None
            return Complex(_real(b, "mul", [x.re, y], shape, sym, real, f"{name}_re"),
                           _real(b, "mul", [x.im, y], shape, sym, real, f"{name}_im"))

        def times(u: Node, v: Node, tag: str) -> Node:
            return _real(b, "mul", [u, v], shape, sym, real, f"{name}_{tag}")

        re = _real(b, "sub", [times(x.re, y.re, "rr"), times(x.im, y.im, "ii")], shape, sym, real, f"{name}_re")
        im = _real(b, "add", [times(x.re, y.im, "ri"), times(x.im, y.re, "ir")], shape, sym, real, f"{name}_im")
        return Complex(re, im)
    if packet in _LAYOUT and args and _is_complex(args[0]):
        z = parts(b, args[0], name)
        op, rest = _LAYOUT[packet], list(args[1:])
        if op == "identity":
            rest = []
        elif op == "unsqueeze":
            rest = [norm_dim(rest[0], len(shape))]
        elif op == "permute":
            rest = [[norm_dim(d, len(shape)) for d in rest[0]]]
        elif op == "slice":
            rest = [norm_dim(rest[0], len(shape)), *rest[1:]]
        target = _TARGETS.get(op)
        return Complex(*(b.add(Node(f"{name}_{tag}", op, [v, *rest], {}, tuple(shape), tuple(sym),
                                    real, target=target, origin=name))
                         for tag, v in (("re", z.re), ("im", z.im))))
    return None


def parts(b: Builder, v: Any, name: str) -> Complex:
    """A complex value's parts: itself if lowered so, else (an input, a buffer or a value
    PyTorch computed) its `view_as_real`'s two last-dim elements."""
    if isinstance(v, Complex):
        return v
    real = v.dtype.to_real()
    pairs = b.add(Node(f"{name}_as_real", "fallback", [v], {}, v.shape + (2,), v.sym + (2,), real,
                       target=torch.ops.aten.view_as_real.default, origin=name))
    return Complex(*(b.add(Node(f"{name}_{tag}", "select_index", [pairs, v.rank, k], {}, v.shape,
                                v.sym, real, target=_TARGETS["select_index"], origin=name))
                     for k, tag in ((0, "re"), (1, "im"))))


def materialized(b: Builder, v: Any, name: str) -> Any:
    """v with each `Complex` in it rebuilt as one complex tensor (`torch.complex(re, im)`, in
    PyTorch) for an op that runs there."""
    if isinstance(v, Complex):
        dtype = torch.complex128 if v.re.dtype == torch.float64 else torch.complex64
        return b.add(Node(f"{name}_complex", "fallback", [v.re, v.im], {}, v.re.shape, v.re.sym,
                          dtype, target=torch.ops.aten.complex.default, origin=name))
    if isinstance(v, (list, tuple)):
        return type(v)(materialized(b, x, name) for x in v)
    if isinstance(v, dict):
        return {k: materialized(b, x, name) for k, x in v.items()}
    return v


def _is_complex(v: Any) -> bool:
    return isinstance(v, Complex) or (isinstance(v, Node) and v.dtype.is_complex)


def _pairs(b: Builder, r: Node, shape: tuple[int, ...], sym: tuple[Any, ...], name: str) -> Complex:
    """`view_as_complex(r)`: r's last dim's two elements. Where r splits the last dim of x in
    pairs (`x.reshape(..., -1, 2)`), x's even and odd elements as strided slices of x (a
    kernel takes them at 2 q and 2 q + 1); else r's elements 0 and 1 of its last dim."""
    x = r.args[0] if r.op == "view" and r.args and isinstance(r.args[0], Node) else None
    if x is not None and x.rank == r.rank - 1 and tuple(x.shape[:-1]) == tuple(r.shape[:-2]) and \
            x.shape[-1] == 2 * r.shape[-2]:
        return Complex(*(b.add(Node(f"{name}_{tag}", "slice", [x, x.rank - 1, k, _BIG, 2], {},
                                    tuple(shape), tuple(sym), r.dtype, target=_TARGETS["slice"],
                                    origin=name))
                         for k, tag in ((0, "re"), (1, "im"))))
    return Complex(*(b.add(Node(f"{name}_{tag}", "select_index", [r, r.rank - 1, k], {},
                                tuple(shape), tuple(sym), r.dtype, target=_TARGETS["select_index"],
                                origin=name))
                     for k, tag in ((0, "re"), (1, "im"))))


def _real(b: Builder, op: str, args: list[Any], shape: tuple[int, ...], sym: tuple[Any, ...],
          dtype: torch.dtype, name: str) -> Node:
    return b.add(Node(name, op, list(args), {}, tuple(shape), tuple(sym), dtype, origin=name))
