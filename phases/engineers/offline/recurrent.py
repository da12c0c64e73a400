"""Recurrent layers (LSTM, GRU, RNN) kept whole through torch.export, cheaply.

A recurrent layer stays a library call in the candidate (cuDNN's fused cells), but exporting
one was slow: torch.export propagates shapes through `aten.lstm` by running its Python
decomposition cell by cell on fake tensors, 12,288 LSTM cells for KernelBench level-3 38 (six
bidirectional layers over 512 steps), 206 s of a 2-core CPU's codegen for one graph node.

`whole_recurrent_layers()` routes `torch._VF.lstm` / `gru` / `rnn_tanh` / `rnn_relu` (what
`nn.LSTM.forward` and its siblings call) through custom ops of the same signature whose fake
implementation only computes the output shapes, for the duration of an export. The exported
program then holds one `kopt::lstm` node, which `aten_target` maps back to `aten.lstm.input`
for the candidate to call: the same op eager runs, dispatched to cuDNN on a GPU.
Packed sequences (the `batch_sizes` overloads) keep torch's own path.

A candidate runs such a node through `_recurrent` (`kernels/recurrent.py`: an input product
and a Triton kernel a step) behind a region switch, `recurrent_kind` naming the layer.
"""

from __future__ import annotations

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
    """While exporting: `torch._VF`'s recurrent layers as the custom ops above (the
    input-tensor overload only; anything else, a packed sequence, goes to torch's own)."""
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


RECURRENT_OPS = {"aten.lstm.input": "lstm", "aten.gru.input": "gru",
                 "aten.rnn_tanh.input": "rnn_tanh", "aten.rnn_relu.input": "rnn_relu"}
"""The aten ops (as `str(node.target)`) a candidate runs through `_recurrent`, by kind."""


def recurrent_kind(n: Any) -> str | None:
    """"lstm" / "gru" / "rnn_tanh" / "rnn_relu" when graph node `n` is a recurrent layer the
    candidate runs through `_recurrent` (its aten op, called positionally), else None: the one
    test the partitioner, the forward's writer and the engineer share."""
    if n.op != "fallback" or n.kwargs:
        return None
    return RECURRENT_OPS.get(str(n.target))


def recurrent_launches(x_shape: tuple[int, ...], num_layers: int, bidirectional: bool,
                       batch_first: bool) -> int:
    """Kernel launches of one call at the traced sizes, at most: an input product and T steps
    per layer and direction when the candidate launches a step at a time (what the forward's
    CUDA graph saves Python's launch time on). One launch a layer (`_rnn_layer_kernel`, the
    default where the GPU holds its programs) takes a layer's steps in one."""
    steps = x_shape[1 if batch_first and len(x_shape) == 3 else 0]
    return num_layers * (2 if bidirectional else 1) * (steps + 1)
