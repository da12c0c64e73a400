"""The convolution template: an implicit GEMM over (output positions) x (output channels).

A convolution is a product: one row per output position (batch x output spatial, flattened),
one column per output channel of a group, reduced over the group's input channels times the
kernel's taps. No im2col buffer is written: each BLOCK_K chunk of (input channel, tap) pairs
is loaded straight from x at the coordinates its tap gives, masked outside x (the zero
padding), and multiplied into a float32 accumulator with `tl.dot`. Groups are the grid's
third axis; the bias (when there is one) is added to the accumulator before the one store.

Forward: output position o reads input position i = o * stride - padding + k * dilation for
tap k. Transposed (the weight laid out (C_in, C_out / groups, *k)): output position o takes
input position i = (o + padding - k * dilation) / stride where that divides exactly and lies
inside x; the output_padding only lengthens the output.

A transposed convolution with a stride above 1 (and no dilation) walks its output by residue
classes: along each dim, the outputs o = q * stride + r of one residue r take only the taps
k = (r + padding) % stride + j * stride inside the window (ceil((K - (r + padding) % stride)
/ stride) of them: the program counts its class's taps), at input q + (r + padding) // stride
- j. Each program takes the rows of one class (the grid's third axis: group x class), so its
reduction is stride**dims times shorter and has no divisibility masks: with every tap masked
by the stride, 7 of 8 products of a 3-D stride-2 window were zeros. On an
H200 (2026-11-29, BENCHMARKS.md), cuDNN's float32 engine took 8.66 ms (+1.3 ms of
`setTensor5d`) for KernelBench level-2 50's transposed 3-D convolution of 3 channels; the
class walk's rank-1 updates take 2.26 ms.

Every kernel has two loops, picked by the launch configuration's `OUTER`: `tl.dot` over
BLOCK_K chunks, or one rank-1 update of the (BLOCK_M, BLOCK_N) accumulator per (input channel,
tap) pair, an x value per row times a weight per column. A short reduction starts with the
second (`convolution.starts_rank1`: a class walk of at most 32 pairs a class, a float32
convolution of at most 81), where a float32 `tl.dot` of a few dozen pairs spends its time
staging tiles; up to 256 pairs the tuner tries both (`OUTER` in the kernel's tunables).

The index math is written for the convolution's number of spatial dims; stride, padding and
dilation are the model's constants, every size (batch, channels, spatial, kernel) is read from
the tensors at run time.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kopt.phases.engineers.offline.convolution import (
    MAX_RANK1_TUNED,
    rank1_pairs,
    starts_rank1,
    walks_classes,
)
from kopt.phases.engineers.offline.fusion import Group, Partition
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _origins,
    _store_type,
    float32_dot,
)

# Launch parameters: the matmul template's tile shapes narrowed along N (a group's output
# channels are often 64 or fewer) and along K for float32 (as matmul.py's). Not tuned: at these
# defaults an H200 ran KernelBench level-1 50 and 54 (float32, strict) at 0.35x and 0.27x of
# cuDNN, 57 at 2.33x (2026-11-27, BENCHMARKS.md); the accelerator searches TUNABLES.
HALF_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}
FLOAT_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
TUNABLES = {"BLOCK_M": [64, 128, 256], "BLOCK_N": [32, 64, 128], "BLOCK_K": [16, 32, 64],
            "num_warps": [4, 8], "num_stages": [2, 3, 4]}
OUTER_BLOCK_M = 256
"""Rows per program of a class walk's rank-1 updates (OUTER). On the H200, level-2 50's
transposed conv3d (3 -> 16 channels, 24 pairs per class) ran 2.68 ms at 256 rows and 4
warps, 3.46 ms at 128, 12.0 ms at 64, and 3.2-20.9 ms at 8 warps; unrolling the loop by two
took 2.68 to 2.33 ms (`benchmarks/class_walk_gpu.py`, 2026-11-29)."""
CLASS_FLOAT_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 16, "num_warps": 4, "num_stages": 4}
"""A float32 class walk's tl.dot tiles. On the H200 (strict float32) the ten stride-2
transposed convs of KernelBench level 2 (32-64 input channels, 2-D and 3-D) ran at this tile
within 0-23% of the best of eight tiles and fastest on four; FLOAT_CONFIG's BLOCK_K 32 and 3
stages took 1.17-1.34x as long (`benchmarks/class_walk_dot_gpu.py`, 2026-11-29, before a class
looped over its own taps only)."""


def _scaled(var: str, factor: int) -> str:
    return var if factor == 1 else f"{var} * {factor}"


def _shifted(text: str, shift: int) -> str:
    if shift == 0:
        return text
    return f"{text} + {shift}" if shift > 0 else f"{text} - {-shift}"


def _unravel(flat: str, lead: str, inner: list[tuple[str, str]], indent: str) -> list[str]:
    """Kernel lines splitting row-major index `flat` into its `inner` coordinates ((name,
    size) pairs, the last fastest) and what is left above them, named `lead`."""
    lines = [f"{indent}{lead} = {flat}"]
    for var, size in reversed(inner):
        lines += [f"{indent}{var} = {lead} % {size}", f"{indent}{lead} = {lead} // {size}"]
    return lines


def _input_coordinates(dims: int, transposed: bool, stride: list[int], padding: list[int],
                       dilation: list[int], tile: bool = True) -> tuple[list[str], list[str]]:
    """Kernel lines computing i{d} (BLOCK_M, BLOCK_K), the input coordinate each (output
    position, tap) pair reads along spatial dim d, and the conditions under which it lies
    inside x (and, transposed, under which the stride divides exactly). `tile` False: one tap
    (a scalar t{d}) for every output position (the rank-1 loop: i{d} is (BLOCK_M,))."""
    lines: list[str] = []
    inside: list[str] = []
    for d in range(dims):
        s, p, dl = stride[d], padding[d], dilation[d]
        o, t = (f"o{d}[:, None]", f"t{d}[None, :]") if tile else (f"o{d}", f"t{d}")
        if not transposed:
            lines.append(f"i{d} = {_shifted(f'{_scaled(o, s)} + {_scaled(t, dl)}', -p)}")
            if p:  # with no padding every window lies inside x (the output's size says so)
                inside.append(f"(i{d} >= 0) & (i{d} < I{d})")
            continue
        lines.append(f"u{d} = {_shifted(o, p)} - {_scaled(t, dl)}  # the stride times i{d}")
        if s == 1:
            lines.append(f"i{d} = u{d}")
            inside.append(f"(u{d} >= 0) & (u{d} < I{d})")
        else:
            lines.append(f"i{d} = u{d} // {s}")
            inside.append(f"(u{d} >= 0) & (u{d} % {s} == 0) & (i{d} < I{d})")
    return lines, inside


def _class_tap(d: int, stride: int, padding: int, q: str, j: str) -> tuple[str, str]:
    """The tap t{d} and input coordinate i{d} along dim d of a residue-class walk (transposed,
    dilation 1), from the class's residue r{d}, the output's position q in its class and the
    tap's step j (their texts: scalars, or broadcast blocks)."""
    tap = f"t{d} = (r{d} + {padding}) % {stride} + j{d} * {stride}" if stride > 1 else f"t{d} = j{d}"
    base = f"(r{d} + {padding}) // {stride}" if stride > 1 else str(padding)
    return tap, f"i{d} = {q} + {base} - {j}"


def _class_coordinates(dims: int, padding: list[int], stride: list[int]) -> tuple[list[str], list[str]]:
    """Kernel lines of a residue-class walk's tl.dot loop: the tap t{d} (BLOCK_K,) and input
    coordinate i{d} (BLOCK_M, BLOCK_K) of each (output position, tap) pair along dim d, and
    the conditions under which the input lies inside x (the tap is in the window: j{d} runs
    over the class's own taps, N{d})."""
    lines: list[str] = []
    inside: list[str] = []
    for d in range(dims):
        lines += _class_tap(d, stride[d], padding[d], f"q{d}[:, None]", f"j{d}[None, :]")
        inside.append(f"(i{d} >= 0) & (i{d} < I{d})")
    return lines, inside


def _class_taps(dims: int, padding: list[int], stride: list[int]) -> list[str]:
    """Kernel lines counting the taps of this program's residue class: along dim d the taps
    k = (r + p) % s + j * s inside the window, N{d} = ceil((K - (r + p) % s) / s) of them, and
    K_CLASS, the class's (input channel, tap) pairs. ceil(K / s) bounds N{d}; a kernel that
    looped to the bound masked up to (1 - N / ceil(K / s)) of its products (for K 3, stride 2
    in 3-D: 37 of 64)."""
    lines = []
    for d in range(dims):
        s, p = stride[d], padding[d]
        lines.append(f"    N{d} = (KS{d} - (r{d} + {p}) % {s} + {s - 1}) // {s}" if s > 1
                     else f"    N{d} = KS{d}")
    return lines + [f"    K_CLASS = CI_G * {' * '.join(f'N{d}' for d in range(dims))}"]


def conv_kernel(group: Group, part: Partition, name: str, precision: str) -> KernelSource:
    """The kernel and launcher of a `conv` group (its anchor: ATen's convolution node)."""
    conv = group.anchor
    assert conv is not None
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = conv.args
    dims = conv.rank - 2
    sp = range(dims)
    dtype = str(x.dtype).removeprefix("torch.")
    kind = f"conv_transpose{dims}d" if transposed else f"conv{dims}d"
    dot_kw = float32_dot(x.dtype, precision)
    helpers: set[str] = set()
    if conv.dtype == torch.bfloat16:
        helpers.add("_to_bf16")
        stored = "_to_bf16(acc)"
    else:
        stored = f"acc.to({_store_type(conv.dtype)})"
    classes = walks_classes(bool(transposed), list(stride), list(dilation))
    if classes:
        coords, inside = _class_coordinates(dims, list(padding), list(stride))
    else:
        coords, inside = _input_coordinates(dims, bool(transposed), list(stride), list(padding),
                                            list(dilation))
    n_classes = math.prod(stride) if classes else 1
    ss = ", ".join
    kernel = [
        "@triton.jit",
        f"def {name}(",
        f"    x_ptr, x_sb, x_sc, {ss(f'x_s{d}' for d in sp)},  # (N, C_in, *in) {dtype}: {x.name}",
        f"    w_ptr, w_sg, w_sco, w_sci, {ss(f'w_s{d}' for d in sp)},  "
        f"# {'(C_in, C_out/groups, *k)' if transposed else '(C_out, C_in/groups, *k)'} {dtype}: "
        "per group, output channel, input channel, tap",
    ]
    if bias is not None:
        kernel.append(f"    b_ptr, b_s,  # (C_out,) {str(bias.dtype).removeprefix('torch.')}: "
                      f"{bias.name}")
    kernel += [
        f"    y_ptr, y_sb, y_sc, {ss(f'y_s{d}' for d in sp)},  # (N, C_out, *out) {dtype}",
        "    # run-time sizes: output positions, channels per group, (channel, tap) pairs,",
        "    # input, output and kernel extents" + (
            "; a residue class's positions per dim" if classes else ""),
        f"    M, CO_G, CI_G, K_RED, {ss(f'I{d}' for d in sp)}, {ss(f'O{d}' for d in sp)}, "
        f"{ss(f'KS{d}' for d in sp)},",
    ]
    if classes:
        kernel.append(f"    {ss(f'Q{d}' for d in sp)},")
    kernel += [
        "    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,",
        "    UPCAST: tl.constexpr,  # True only under the CPU interpreter, whose bf16 tl.dot is wrong",
        "    INDEX_64: tl.constexpr,",
    ]
    kernel.append("    OUTER: tl.constexpr,  # rank-1 updates instead of tl.dot (a short reduction)")
    kernel += [
        "):",
        f"    # {kind}, stride {list(stride)}, padding {list(padding)}, dilation {list(dilation)}, "
        f"groups {groups}" + (f", output_padding {list(output_padding)}" if transposed else ""),
        "    # FLOPs: 2*M*CO_G*K_RED*groups; bytes: x once per tap from cache, w per row tile, y once",
        "    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # output positions" + (
            " of one residue class" if classes else ""),
        "    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels of the group",
    ]
    if classes:
        kernel += [f"    grp = tl.program_id(2) // {n_classes}",
                   f"    # the residue class of this program's outputs modulo the stride {list(stride)}",
                   *_unravel(f"tl.program_id(2) % {n_classes}", "cls",
                             [(f"r{d}", str(stride[d])) for d in sp], "    "),
                   *_class_taps(dims, list(padding), list(stride))]
    else:
        kernel.append("    grp = tl.program_id(2)")
    kernel += [
        "    if INDEX_64:",
        "        rm = rm.to(tl.int64)",
        "        grp = grp.to(tl.int64)",
        "    m_ok = rm < M",
        "    n_ok = rn < CO_G",
    ]
    if classes:
        kernel += ["    # each row's batch index, position in the class and output coordinates",
                   *_unravel("rm", "nb", [(f"q{d}", f"Q{d}") for d in sp], "    ")]
        for d in sp:
            kernel += [f"    o{d} = q{d} * {stride[d]} + r{d}" if stride[d] > 1 else f"    o{d} = q{d}",
                       f"    m_ok = m_ok & (o{d} < O{d})"]
    else:
        kernel += ["    # each row's batch index and output coordinates (rm is row-major over (N, *out))",
                   *_unravel("rm", "nb", [(f"o{d}", f"O{d}") for d in sp], "    ")]
    kernel += [
        "    x_rows = nb * x_sb + grp * CI_G * x_sc",
        "    w_cols = grp * w_sg + rn * w_sco",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
    ]
    reduction = "K_CLASS" if classes else "K_RED"
    loop = [
        f"    for k in range(0, tl.cdiv({reduction}, BLOCK_K)):",
        "        rk = k * BLOCK_K + tl.arange(0, BLOCK_K)  # (input channel, tap) pairs, taps fastest",
        f"        k_ok = rk < {reduction}",
    ]
    if classes:
        loop += _unravel("rk", "ci", [(f"j{d}", f"N{d}") for d in sp], "        ")
    else:
        loop += _unravel("rk", "ci", [(f"t{d}", f"KS{d}") for d in sp], "        ")
    loop += [f"        {line}" for line in coords]
    x_off = " + ".join(["x_rows[:, None]", "ci[None, :] * x_sc"] + [f"i{d} * x_s{d}" for d in sp])
    w_off = " + ".join(["w_cols[None, :]", "ci[:, None] * w_sci"] +
                       [f"t{d}[:, None] * w_s{d}" for d in sp])
    w_mask = "k_ok[:, None] & n_ok[None, :]"
    loop += [
        f"        x_ok = {' & '.join(['m_ok[:, None] & k_ok[None, :]'] + inside)}",
        f"        a = tl.load(x_ptr + {x_off}, mask=x_ok, other=0.0)",
        f"        b = tl.load(w_ptr + {w_off}, mask={w_mask}, other=0.0)",
        "        if UPCAST:",
        "            a = a.to(tl.float32)",
        "            b = b.to(tl.float32)",
        f"        acc = tl.dot(a, b, acc{dot_kw})",
    ]
    kernel += ["    if OUTER:  # a short reduction: one rank-1 update per (input channel, tap) pair",
               f"        for k in tl.range(0, {reduction}, loop_unroll_factor=2):"]
    x_ok = ["m_ok"]
    if classes:
        kernel += _unravel("k", "ci", [(f"j{d}", f"N{d}") for d in sp], "            ")
        for d in sp:
            kernel += [f"            {line}" for line in _class_tap(d, stride[d], padding[d],
                                                                   f"q{d}", f"j{d}")]
            x_ok.append(f"(i{d} >= 0) & (i{d} < I{d})")
    else:
        kernel += _unravel("k", "ci", [(f"t{d}", f"KS{d}") for d in sp], "            ")
        lines1, inside1 = _input_coordinates(dims, bool(transposed), list(stride), list(padding),
                                             list(dilation), tile=False)
        kernel += [f"            {line}" for line in lines1]
        x_ok += inside1
    x_off1 = " + ".join(["x_rows", "ci * x_sc"] + [f"i{d} * x_s{d}" for d in sp])
    w_off1 = " + ".join(["w_cols", "ci * w_sci"] + [f"t{d} * w_s{d}" for d in sp])
    kernel += [
        f"            a = tl.load(x_ptr + {x_off1}, mask={' & '.join(x_ok)}, "
        "other=0.0).to(tl.float32)",
        f"            b = tl.load(w_ptr + {w_off1}, mask=n_ok, other=0.0).to(tl.float32)",
        "            acc += a[:, None] * b[None, :]",
        "    else:",
        *(f"    {line}" for line in loop),
    ]
    if bias is not None:
        kernel.append("    acc += tl.load(b_ptr + (grp * CO_G + rn) * b_s, mask=n_ok, "
                      "other=0.0).to(tl.float32)[None, :]")
    y_off = " + ".join(["nb[:, None] * y_sb", "(grp * CO_G + rn)[None, :] * y_sc"] +
                       [f"o{d}[:, None] * y_s{d}" for d in sp])
    kernel.append(f"    tl.store(y_ptr + {y_off}, {stored}, mask=m_ok[:, None] & n_ok[None, :])")

    launcher = _launcher(group, name, kind, dims, bool(transposed), list(stride), list(padding),
                         list(dilation), list(output_padding), groups, bias is not None, classes)
    call = ["device", f"@{x.name}", f"@{w.name}"] + ([f"@{bias.name}"] if bias is not None else [])
    config = dict(FLOAT_CONFIG if x.dtype == torch.float32 else HALF_CONFIG, OUTER=0)
    tunables = dict(TUNABLES)
    if rank1_pairs(conv) <= MAX_RANK1_TUNED:
        tunables["OUTER"] = [0, 1]
    if starts_rank1(conv):
        config.update(BLOCK_M=OUTER_BLOCK_M, num_warps=4, OUTER=1)
    elif classes and x.dtype == torch.float32:
        config = dict(CLASS_FLOAT_CONFIG, OUTER=0)
    return KernelSource(name, f"_launch_{group.name}", "conv", "\n".join(kernel) + "\n",
                        launcher, call, _origins(group), tunables, config, helpers)


def _launcher(group: Group, name: str, kind: str, dims: int, transposed: bool,
              stride: list[int], padding: list[int], dilation: list[int],
              output_padding: list[int], groups: int, has_bias: bool, classes: bool) -> str:
    sp = range(dims)
    rank = dims + 2
    taps = [_scaled(f"(w.shape[{2 + d}] - 1)", dilation[d]) for d in sp]
    if transposed:  # (I - 1) * s - 2p + d * (k - 1) + output_padding + 1
        sizes = [_shifted(f"{_scaled(f'(x.shape[{2 + d}] - 1)', stride[d])} + {taps[d]}",
                          output_padding[d] + 1 - 2 * padding[d]) for d in sp]
    else:  # (I + 2p - d * (k - 1) - 1) // s + 1
        sizes = [f"({_shifted(f'x.shape[{2 + d}] - {taps[d]}', 2 * padding[d] - 1)}) // "
                 f"{stride[d]} + 1" for d in sp]
    params = "device, x, w, b" if has_bias else "device, x, w"
    lines = [
        f"def _launch_{group.name}({params}):",
        f'    """Convolution kernel {name}: {kind} as an implicit GEMM, groups={groups}."""',
        f"    if x.dim() != {rank} or w.dim() != {rank}:",
        f'        raise ValueError(f"{name}: a {kind} needs {rank}-D x and weight, got '
        '{tuple(x.shape)} and {tuple(w.shape)}")',
        "    batch, c_in = x.shape[0], x.shape[1]",
    ]
    if transposed:
        lines += [f"    c_out = w.shape[1] * {groups}",
                  f"    fits = c_in % {groups} == 0 and w.shape[0] == c_in",
                  f"    ci_g, co_g = c_in // {groups}, w.shape[1]",
                  "    # weight (C_in, C_out/groups, *k): a group spans CI_G rows of it",
                  "    w_sg, w_sco, w_sci = ci_g * w.stride(0), w.stride(1), w.stride(0)"]
    else:
        lines += ["    c_out = w.shape[0]",
                  f"    fits = c_in % {groups} == 0 and c_out % {groups} == 0 and "
                  f"w.shape[1] * {groups} == c_in",
                  f"    ci_g, co_g = c_in // {groups}, c_out // {groups}",
                  "    # weight (C_out, C_in/groups, *k): a group spans CO_G rows of it",
                  "    w_sg, w_sco, w_sci = co_g * w.stride(0), w.stride(0), w.stride(1)"]
    lines += [
        "    if not fits:",
        f'        raise ValueError(f"{name}: weight {{tuple(w.shape)}} does not fit x '
        f'{{tuple(x.shape)}} with groups={groups}")',
        f"    out = ({', '.join(sizes)}{',' if dims == 1 else ''})",
        "    y = torch.empty((batch, c_out, *out), device=device, dtype=x.dtype)",
        "    taps = tuple(w.shape[2:])",
    ]
    if classes:
        strides = f"({', '.join(map(str, stride))}{',' if dims == 1 else ''})"
        lines += [
            f"    # residue classes modulo the stride {list(stride)}: each class's positions (the",
            "    # largest class's extent per dim) and the taps that can divide (ceil(K / stride))",
            f"    per_class = tuple(_cdiv(o, s) for o, s in zip(out, {strides}))",
            f"    class_taps = tuple(_cdiv(k, s) for k, s in zip(taps, {strides}))",
            "    m, k_red = batch * math.prod(per_class), ci_g * math.prod(class_taps)",
        ]
    else:
        lines.append("    m, k_red = batch * math.prod(out), ci_g * math.prod(taps)")
    lines += [
        "    if y.numel() == 0:",
        "        return y,",
        f'    cfg = _launch_config("{name}", "conv", co_g, m, k_red)',
        f'    grid = (_cdiv(m, cfg["BLOCK_M"]), _cdiv(co_g, cfg["BLOCK_N"]), '
        f'{groups * (math.prod(stride) if classes else 1)})',
        "    # the last row tile's masked rows address one batch entry past x and y",
        "    index_64 = max(_span(x) + x.stride(0), _span(w), y.numel() + y.stride(0)) >= 2**31",
    ]
    b_args = " b, b.stride(0)," if has_bias else ""
    lines += [
        f"    {name}[grid](",
        f"        x, *x.stride(), w, w_sg, w_sco, w_sci, *w.stride()[2:],{b_args} y, *y.stride(),",
        "        m, co_g, ci_g, k_red, *x.shape[2:], *out, *taps," +
        (" *per_class," if classes else ""),
        '        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],',
        '        UPCAST=_INTERPRETED and x.dtype != torch.float32, INDEX_64=index_64,',
        '        OUTER=bool(cfg.get("OUTER", 0)),',
        '        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])',
        "    return y,",
    ]
    return "\n".join(lines) + "\n"


def conv_flops(conv: Any) -> int:
    """The multiply-adds of `conv` times 2: each output element takes (input channels per
    group x taps) of them; transposed, each input element gives (output channels per group x
    taps) (the kernel's masked taps, stride**dims times more, are not counted)."""
    x, w, transposed = conv.args[0], conv.args[1], conv.args[6]
    fan = math.prod(w.shape[1:])  # (C_in/groups or C_out/groups) x taps
    return 2 * fan * math.prod(x.shape if transposed else conv.shape)
