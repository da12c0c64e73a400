"""Convolutions the offline engineer generates instead of calling cuDNN.

A depthwise convolution (one input channel per group, one output channel per input channel)
has no reduction over channels: each output element is the sum, over the taps of its window,
of one input element times one weight. That is a pointwise op over the window's taps
(`graph.WINDOW_TAP`, the masked loads pooling uses, zero outside the input), so the
convolution, its bias and whatever follows it (an eval-mode BatchNorm, a ReLU6) are one kernel
that reads the input once per tap from cache and writes the output once. cuDNN runs the
convolution alone and the epilogue as a second pass. Other convolutions (a reduction over
input channels: a GEMM) stay library calls.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from kopt.phases.engineers.offline.graph import WINDOW_TAP, Builder, Node, pooled_size

MAX_CONV_TAPS = 64
"""The largest window (elements) generated as taps: 7x7 and 4x4x4 are; a larger one is a
loop's worth of loads per output element and stays in cuDNN."""


def depthwise_window(x: Any, weight: Any, stride: Any, padding: Any, dilation: Any,
                     transposed: Any, groups: Any) -> list[int] | None:
    """The window of a depthwise convolution that `lower_depthwise_convolution` generates
    (not transposed, groups equal to the input's and output's channels, integer parameters,
    at most MAX_CONV_TAPS taps, every window holding an element of x), else None."""
    if not isinstance(x, Node) or not isinstance(weight, Node) or transposed or \
            not isinstance(groups, int) or weight.rank != x.rank or x.rank < 3:
        return None
    window = list(weight.shape[2:])
    dims = len(window)
    if weight.shape[1] != 1 or not (groups == x.shape[1] == weight.shape[0]) or \
            not all(isinstance(k, int) for k in window) or math.prod(window) > MAX_CONV_TAPS:
        return None
    params = [stride, padding, dilation]
    if not all(isinstance(p, (list, tuple)) and len(p) == dims and
               all(isinstance(e, int) for e in p) for p in params):
        return None
    for i, k in enumerate(window):
        if x.shape[2 + i] + 2 * padding[i] < dilation[i] * (k - 1) + 1:
            return None
    return window


def lower_depthwise_convolution(b: Builder, x: Node, weight: Node, bias: Node | None,
                                window: list[int], stride: list[int], padding: list[int],
                                dilation: list[int], name: str, origin: str) -> Node:
    """out[n, c, o] = bias[c] + sum over the taps t of x[n, c, o * stride + t * dilation -
    padding] * weight[c, 0, t], summed in float32 in the window's order; sizes follow x at run
    time (`Builder.runtime_size`), the convolved ones too."""
    dims = len(window)
    tail = (1,) * dims
    shape, sym = list(x.shape), [b.runtime_size(x, d) for d in range(x.rank)]
    sizes = [sym[2 + i] for i in range(dims)]
    for i, k in enumerate(window):
        shape[2 + i] = pooled_size(x.shape[2 + i], k, stride[i], padding[i], dilation[i])
        sym[2 + i] = pooled_size(sizes[i], k, stride[i], padding[i], dilation[i])
    channels = (weight.shape[0], *tail), (weight.sym[0], *tail)

    def per_channel(v: Node, what: str) -> Node:
        return b.add(Node(f"{name}_{what}_c", "view", [v, [-1, *tail]], {}, channels[0],
                          channels[1], v.dtype, target=torch.ops.aten.view.default,
                          origin=origin))

    # the weight as (C, *window), one view; each tap's weights are a window tap of it (a load
    # in the kernel at the tap's offset), not a view of their own made in forward
    taps_of = b.add(Node(f"{name}_w", "view", [weight, [-1, *window]], {},
                         (weight.shape[0], *window), (weight.sym[0], *window), weight.dtype,
                         target=torch.ops.aten.view.default, origin=origin))
    acc: Node | None = None
    for j, taps in enumerate(itertools.product(*(range(k) for k in window))):
        spec = [(2 + i, stride[i], dilation[i], padding[i], t, window[i], sizes[i])
                for i, t in enumerate(taps)]
        tap = b.add(Node(f"{name}_tap{j}", WINDOW_TAP, [x], {"taps": spec, "fill": 0.0},
                         tuple(shape), tuple(sym), x.dtype, origin=origin))
        w = b.add(Node(f"{name}_w{j}", WINDOW_TAP, [taps_of],
                       {"taps": [(1 + i, 1, 1, 0, t, k, k) for i, (t, k) in
                                 enumerate(zip(taps, window))], "fill": 0.0},
                       channels[0], channels[1], weight.dtype, origin=origin))
        term = b.op(f"{name}_mul{j}", "mul", [tap, w], tap, dtype=torch.float32, origin=origin)
        acc = term if acc is None else b.op(f"{name}_sum{j}", "add", [acc, term], term,
                                            origin=origin)
    assert acc is not None
    if bias is not None:
        acc = b.op(f"{name}_biased", "add", [acc, per_channel(bias, "bias")], acc, origin=origin)
    return b.op(name, "identity", [acc], acc, dtype=x.dtype, origin=origin)
