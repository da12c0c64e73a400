"""Convolutions the offline engineer generates instead of calling cuDNN.

A depthwise convolution (one input channel per group, one output channel per input channel)
has no reduction over channels: each output element is the sum, over the taps of its window,
of one input element times one weight. That is a pointwise op over the window's taps
(`graph.WINDOW_TAP`, the masked loads pooling uses, zero outside the input), so the
convolution, its bias and whatever follows it (an eval-mode BatchNorm, a ReLU6) are one kernel
that reads the input once per tap from cache and writes the output once. cuDNN runs the
convolution alone and the epilogue as a second pass.

Other convolutions reduce over input channels: a GEMM. One whose result no pointwise op or
reduction reads (a model that is one convolution, or one a view or a library call reads) is a
`conv` fusion group, the implicit-GEMM template of `kernels/convolution.py`
(`conv_group_refusal`). One with a pointwise epilogue stays in cuDNN, its bias and epilogue
fused into the kernel after it (`fusion.split_conv_bias`), except a strided transposed
convolution: cuDNN's strict float32 kernel for it reduces over every tap, most of them zeros
(1-25% of the floor on KernelBench level 2), and the template walks one residue class of the
stride at a time over that class's own taps, so it is a `conv` group whose output the
epilogue's kernel reads (the bias still added there); on a GPU the region switch times it
against cuDNN's and keeps the faster.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from kopt.phases.engineers.offline.graph import (
    POINTWISE,
    REDUCTIONS,
    WINDOW_TAP,
    Builder,
    LibraryCall,
    Node,
    pooled_size,
)
from kopt.phases.engineers.offline.window_prologues import exact_tap

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
                                 enumerate(zip(taps, window, strict=True))], "fill": 0.0},
                       channels[0], channels[1], weight.dtype, origin=origin))
        term = b.op(f"{name}_mul{j}", "mul", [tap, w], tap, dtype=torch.float32, origin=origin)
        acc = term if acc is None else b.op(f"{name}_sum{j}", "add", [acc, term], term,
                                            origin=origin)
    assert acc is not None
    if bias is not None:
        acc = b.op(f"{name}_biased", "add", [acc, per_channel(bias, "bias")], acc, origin=origin)
    out = b.op(name, "identity", [acc], acc, dtype=x.dtype, origin=origin)
    b.library_calls[out] = LibraryCall("conv", (x, weight, bias), (
        ("stride", list(stride)), ("padding", list(padding)), ("dilation", list(dilation))))
    return out


MAX_CLASS_REDUCTION = 32
"""The longest reduction per residue class ((input channels per group) x (taps that divide per
class)) that a strided transposed convolution's kernel runs as rank-1 updates (`OUTER`) rather
than `tl.dot` tiles. KernelBench level 2's 3-channel 3x3x3 stride-2 ones reduce over 3 x 8 = 24:
on an H200 cuDNN's float32 engine took 8.66 ms for what the rank-1 loop does in 2.26 ms
(BENCHMARKS.md, 2026-11-29)."""

MAX_RANK1_REDUCTION = 81
"""The longest reduction per output element ((input channels per group) x taps) of a float32
`conv` group that does not walk classes whose kernel starts with rank-1 updates (such a
convolution with an epilogue still stays in cuDNN: `conv_group_refusal`). 81 is a 3-channel
3x3x3 window (KernelBench level 2's 6, 24, 48): a hand-written (positions x output channels)
tile of rank-1 updates ran their conv3d in 0.375 and 1.42 ms against TF32 cuDNN's 0.508 and
2.05 ms, and lost on 24 (1.43 against 0.84 ms; H200, 2026-11-29, `benchmarks/small_conv_gpu.py`);
a `tl.dot` tile took 3.7x cuDNN's time on level 1's 54 (3 channels, 3x3x3; 2026-11-27)."""

MAX_RANK1_TUNED = 256
"""Up to this many (channel, tap) pairs a convolution's tuner also tries the other loop
(`OUTER` in TUNABLES); beyond it the rank-1 loop is not tried."""

CONV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""What the implicit-GEMM template reads and writes (accumulating in float32)."""


def _readers(n: Node, users: dict[Node, list[Node]]) -> list[Node]:
    """What reads `n`'s values: its users, seen through views, flattens and a pooling's exact
    taps (a softmax over the flattened spatial dims, a global average pool; a pooling that
    computes the epilogue at its taps: `window_prologues`). A concatenation's clipped parts are not seen through: a convolution
    that only a `cat` reads keeps its `conv` group."""
    out, stack, seen = [], list(users[n]), set()
    while stack:
        u = stack.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        if u.op in ("view", "flatten") or any(exact_tap(u, x) for x in u.inputs()[:1]):
            stack.extend(users[u])
        else:
            out.append(u)
    return out


def conv_group_refusal(n: Node, users: dict[Node, list[Node]]) -> str | None:
    """Why ATen convolution `n` stays a library call, or None when it becomes a `conv` group:
    1-, 2- or 3-D, forward or transposed, integer stride, padding, dilation, output_padding
    and groups, x, weight, bias and result of one floating dtype, and no pointwise op or
    reduction reading the result, directly or through a view, flatten or a pooling's exact tap
    (that epilogue is fused after cuDNN's convolution instead, with the bias:
    `fusion.split_conv_bias`), unless the convolution walks residue classes (`walks_classes`).
    `users`: the graph's readers of each node."""
    if len(n.args) != 9:
        return "a convolution with extra arguments stays in cuDNN"
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = n.args
    dims = n.rank - 2
    if not isinstance(x, Node) or not isinstance(w, Node) or not 1 <= dims <= 3 or \
            x.rank != n.rank or w.rank != n.rank:
        return "a convolution that is not 1-, 2- or 3-D over batched input stays in cuDNN"
    if not all(isinstance(p, (list, tuple)) and len(p) == dims and
               all(isinstance(e, int) for e in p)
               for p in (stride, padding, dilation, output_padding)) or \
            not isinstance(groups, int) or groups < 1 or not isinstance(transposed, bool):
        return "a convolution with run-time parameters stays in cuDNN"
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        return "a convolution with a non-positive stride or dilation stays in cuDNN"
    if n.dtype not in CONV_DTYPES or x.dtype != n.dtype or w.dtype != n.dtype or \
            (b is not None and (not isinstance(b, Node) or b.dtype != n.dtype or b.rank != 1)):
        return "a convolution over mixed or non-float dtypes stays in cuDNN"
    if walks_classes(transposed, list(stride), list(dilation)):
        # cuDNN's strict float32 transposed convolutions ran at 1-25% of the floor; the region
        # switch times this kernel against cuDNN's and keeps the faster (its epilogue reads
        # the kernel's output either way)
        return None
    if any(u.op in POINTWISE or u.op in REDUCTIONS for u in _readers(n, users)):
        return "convolution stays in cuDNN; its pointwise epilogue is fused"
    return None


def walks_classes(transposed: bool, stride: list[int], dilation: list[int]) -> bool:
    """Whether a convolution's kernel walks its output by residue classes of the stride."""
    return bool(transposed) and max(stride) > 1 and all(d == 1 for d in dilation)


def rank1_pairs(conv: Node) -> int:
    """The (input channel, tap) pairs an output element of `conv` reduces over in its kernel's
    loop: per residue class where it walks classes (`class_reduction`), else the input channels
    of a group times the window's taps (1 << 30 when not known from the traced shapes)."""
    x, w, _, stride, _, dilation, transposed, _, groups = conv.args
    if walks_classes(bool(transposed), list(stride), list(dilation)):
        return class_reduction(x, w, stride, groups)
    if not all(isinstance(k, int) for k in (*w.shape[2:], x.shape[1])):
        return 1 << 30
    return x.shape[1] // groups * math.prod(w.shape[2:])


def starts_rank1(conv: Node) -> bool:
    """Whether `conv`'s kernel starts with rank-1 updates (`OUTER`): a class walk of at most
    MAX_CLASS_REDUCTION pairs a class, or a float32 convolution of at most MAX_RANK1_REDUCTION."""
    x, _, _, stride, _, dilation, transposed, _, _ = conv.args
    if walks_classes(bool(transposed), list(stride), list(dilation)):
        return rank1_pairs(conv) <= MAX_CLASS_REDUCTION
    return x.dtype == torch.float32 and rank1_pairs(conv) <= MAX_RANK1_REDUCTION


def class_reduction(x: Node, w: Node, stride: Any, groups: int) -> int:
    """A transposed convolution's reduction per residue class of its stride: the input channels
    of a group times, along each dim, the taps that can divide (ceil(K / stride))."""
    window = w.shape[2:]
    if not all(isinstance(k, int) for k in window) or not isinstance(x.shape[1], int):
        return 1 << 30
    return x.shape[1] // groups * math.prod(-(-k // s) for k, s in zip(window, stride, strict=True))
