"""Recurrent layers in the offline engineer: which graph nodes a candidate runs through
`_recurrent` (`kernels/recurrent.py`: an input product, then one kernel a layer or a step)
behind a region switch, and their launches. The export keeps a layer whole through
`harness.recurrent_ops.whole_recurrent_layers` (one `kopt::lstm` node, mapped back to
`aten.lstm.input` by `aten_target`).
"""

from __future__ import annotations

from typing import Any

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
