"""Recurrent layers (LSTM, GRU, RNN) kept whole under torch's tracing and counting, cheaply.

torch runs `aten.lstm` (and its siblings) outside cuDNN as a Python decomposition, cell by
cell: exporting KernelBench level-3 38 (six bidirectional layers over 512 steps, 12,288 LSTM
cells) propagated shapes for 206 s of a 2-core CPU's codegen for one graph node, and counting
level-3 36's FLOPs on the meta device took 12 s of a GPU host's bench job (28 s on a 2-core
CPU) for a number one formula gives.

`whole_recurrent_layers()` routes `torch._VF.lstm` / `gru` / `rnn_tanh` / `rnn_relu` (what
`nn.LSTM.forward` and its siblings call) through custom ops of the same signature whose fake
implementation only computes the output shapes, while it is held. An exported program then
holds one `kopt::lstm` node, which `aten_target` maps back to `aten.lstm.input` for the
candidate to call: the same op eager runs, dispatched to cuDNN on a GPU;
`recurrent_flop_mapping()` gives torch's FlopCounterMode each op's products
(`recurrent_flops`). Packed sequences (the `batch_sizes`
overloads) keep torch's own path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

_KINDS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_OPS: dict[str, Any] = {}


def _out_shapes(x: torch.Tensor, hx: torch.Tensor, bidirectional: bool) -> tuple[int, ...]:
    """The output's shape: the input's with its feature dim the hidden size times the
    directions (an LSTM with a projection has the projected size in hx)."""
    width = hx.shape[-1] * (2 if bidirectional else 1)
    return (*x.shape[:-1], width)


def _register() -> dict[str, Any]:
    """The custom ops, registered once per process."""
    if _OPS:
        return _OPS
    from torch.library import custom_op

    @custom_op("kopt::lstm", mutates_args=())
    def lstm(x: torch.Tensor, hx: list[torch.Tensor], params: list[torch.Tensor],
             has_biases: bool, num_layers: int, dropout: float, train: bool,
             bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, h, c = torch.ops.aten.lstm.input(x, hx, params, has_biases, num_layers, dropout,
                                              train, bidirectional, batch_first)
        return out.clone(), h.clone(), c.clone()

    @lstm.register_fake
    def _(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):  # noqa: ANN001, ANN202
        out = x.new_empty(_out_shapes(x, hx[0], bidirectional))
        return out, hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)

    _OPS["lstm"] = lstm
    for kind in ("gru", "rnn_tanh", "rnn_relu"):
        aten = getattr(torch.ops.aten, kind).input

        def make(aten: Any, kind: str) -> Any:
            @custom_op(f"kopt::{kind}", mutates_args=())
            def op(x: torch.Tensor, hx: torch.Tensor, params: list[torch.Tensor],
                   has_biases: bool, num_layers: int, dropout: float, train: bool,
                   bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
                out, h = aten(x, hx, params, has_biases, num_layers, dropout, train,
                              bidirectional, batch_first)
                return out.clone(), h.clone()

            @op.register_fake
            def _(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):  # noqa: ANN001, ANN202
                return x.new_empty(_out_shapes(x, hx, bidirectional)), hx.new_empty(hx.shape)

            return op

        _OPS[kind] = make(aten, kind)
    return _OPS


@contextmanager
def whole_recurrent_layers() -> Iterator[None]:
    """While held (an export, a FLOP count): `torch._VF`'s recurrent layers as the custom ops
    above (the input-tensor overload only; anything else, a packed sequence, goes to torch's
    own)."""
    ops = _register()
    vf = torch._VF
    saved = {k: vf.__dict__.get(k) for k in _KINDS}

    def route(kind: str) -> Any:
        original = getattr(torch._C._VariableFunctions, kind)

        def call(*args: Any, **kwargs: Any) -> Any:
            # (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
            # batch_first); the packed overload has the integer batch_sizes second (hx is
            # a float tensor, or LSTM's (h, c) pair)
            packed = isinstance(args[1], torch.Tensor) and not args[1].is_floating_point() \
                if len(args) > 1 else True
            if kwargs or len(args) != 9 or packed:
                return original(*args, **kwargs)
            x, hx, params, *rest = args
            hx = list(hx) if kind == "lstm" else hx
            return ops[kind](x, hx, list(params), *rest)

        return call

    try:
        for kind in _KINDS:
            setattr(vf, kind, route(kind))
        yield
    finally:
        for kind, value in saved.items():
            if value is None:
                vf.__dict__.pop(kind, None)
            else:
                setattr(vf, kind, value)


def aten_target(target: Any) -> Any:
    """The aten op a candidate calls for an exported node's target (`kopt::lstm` ->
    `aten.lstm.input`); any other target as it is."""
    name = getattr(getattr(target, "overloadpacket", None), "_qualified_op_name", "")
    if name.startswith("kopt::") and name[6:] in _KINDS:
        return getattr(torch.ops.aten, name[6:]).input
    return target


def recurrent_flops(x_shape: Any, hx_shape: Any, params_shapes: Any, has_biases: bool,
                    num_layers: int, dropout: float, train: bool, bidirectional: bool,
                    batch_first: bool, out_shape: Any = None, **kwargs: Any) -> int:
    """The products of one call, as FlopCounterMode counts a decomposed layer's (a multiply
    and an add each; biases and cells not counted): per layer and direction, every step's
    input and recurrent products, 2 * T * B * G*H * (I + H), and an LSTM's projection."""
    per = len(params_shapes) // (num_layers * (2 if bidirectional else 1))
    rows = math.prod(x_shape[:-1])  # steps x sequences (an unbatched input: steps)
    total = 0
    for i in range(0, len(params_shapes), per):
        w_ih, w_hh = params_shapes[i], params_shapes[i + 1]
        total += 2 * rows * w_ih[0] * (w_ih[1] + w_hh[1])
        if per in (3, 5):  # proj_size: W_hr (P, H) last
            total += 2 * rows * params_shapes[i + per - 1][0] * params_shapes[i + per - 1][1]
    return total


def recurrent_flop_mapping() -> dict[Any, Any]:
    """FlopCounterMode's custom_mapping for the custom ops (registered on first use)."""
    _register()
    return {getattr(torch.ops.kopt, kind): recurrent_flops for kind in _KINDS}
