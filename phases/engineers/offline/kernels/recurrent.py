"""Recurrent layers (LSTM, GRU, Elman RNN) as Triton kernels: one product for every step's
input, then the steps, in one launch a layer or one a step.

A recurrent layer is a chain of small dependent steps: h_t needs h_{t-1}, and each step is a
small product and a few pointwise ops. cuDNN takes 9.7 us an LSTM step and 14.6 us a GRU step
at KernelBench's sizes (level-3 36 and 40: six layers, 512 steps of 10 sequences, hidden 256;
29.7 and 44.8 ms a forward on an H200, 2026-11-30). Here:

- `_rnn_input_kernel`: every step's input product at once, x (T, B, I) @ W_ih^T + b_ih, into
  a float32 buffer of gate pre-activations (T*B, G*H): the one large product of the layer;
- `_rnn_layer_kernel`: every step of a layer, its directions side by side: each program owns
  a block of hidden units (and of sequences) and, step after step, computes the recurrent
  product h_{t-1} @ W_hh^T for its units of each gate, adds that step's input gates, runs the
  cell (LSTM: i, f, g, o and the cell state, kept in registers; GRU: r, z, n; RNN: tanh or
  relu) and writes h_t to the layer's output and to one of two float32 state buffers; then
  the direction's programs meet at a barrier in memory (an atomic count, a release before and
  an acquire after) before anyone reads h_t. A barrier needs every program resident at once:
  the layer kernel is launched only when its programs are no more than the GPU's
  multiprocessors, and in the interpreter (which runs programs one after another) as one
  program a direction;
- `_rnn_resident_kernel`: the layer kernel with each program's rows of W_hh held in registers
  for the whole layer (read once, where the layer kernel reads them every step): a step is one
  product h_{t-1} @ W^T over the program's units of every gate side by side (LAYER 2, an
  LSTM's default: 1.8x faster than the layer kernel on an H200, STEP_DEFAULT);
- `_rnn_step_kernel`: the same step as its own launch, for a layer too wide to hold (or where
  the tuner picks it: LAYER 0).

The candidate's forward replays as one CUDA graph (`_graphed`), so a step's launch costs the
graph's few microseconds, not Python's. Layers, directions and steps run as PyTorch does them
(`torch.ops.aten.lstm.input`'s arguments: flat weights per layer and direction, `batch_first`,
`bidirectional`; nn.LSTM passes an unbatched input as a batch of one). What this does not
cover runs the aten op itself (cuDNN on a GPU), which is the baseline's own library call: an
LSTM with projections (`proj_size`), dropout between layers while training, double inputs.
"""

from __future__ import annotations

STEP_KERNEL = "_rnn_step_kernel"
STEP_TUNABLES = {"LAYER": [1, 2, 0], "BH": [8, 16, 32], "BK": [32, 64, 128], "num_warps": [2, 4, 8],
                 "num_stages": [1, 2, 3]}
"""The recurrent kernels' launch parameters the accelerator may search (KOPT_TUNABLES): one
launch a layer (1), one a layer with W_hh in registers (2) or one a step (0), hidden units a
program, the reduction's chunk, warps, pipeline stages."""
STEP_DEFAULT = {"LAYER": "auto", "BH": 16, "BK": 64, "num_warps": 8, "num_stages": 3}
"""What they launch with until tuned. LAYER "auto": an LSTM one launch a layer with W_hh in
registers (LAYER 2), a GRU or an Elman RNN one launch a layer reading W_hh every step (LAYER 1,
at LAYER_FALLBACK's launch). On an H200 (KernelBench level-3 36, 40, 42: six layers, 512 steps
of 10 sequences, hidden 256; graphed forwards, `benchmarks/recurrent_gpu.py --sweep-layer`,
2026-12-01) the resident launch at 16 units of each gate a program and 8 warps was the fastest
for all three: LSTM 12.9 ms, GRU 12.6 ms, bidirectional GRU 14.0 ms, against the layer
kernel's 23.1, 17.6 and 20.0 (one launch a step 25.6 and 20.3; cuDNN 27.0-34.1, 46.9-50.0 and
96.5 eager). But the verifier rejected the resident GRU on its hard draws (inputs and h0
spread to 200, level-3 40 and a bidirectional GRU's output: 1.7e-4 from float64 against
cuDNN's 2.5e-5), where the layer kernel passes: over six layers of such a GRU the resident
kernel's outputs were 1.3-4x further from float64 than the layer kernel's on 5 of 6 draws,
with float32 products (ieee) as well as tf32x3, and deterministic (no race). Its LSTM passed
on all four problems. The tuner may still pick LAYER 2 for a GRU: each winner is verified.
The first default of the step kernel (BK 128, 2 warps) spilled 1296 bytes a thread on sm_90
and ran 1.7x slower."""
LAYER_FALLBACK = {"BH": 32, "num_warps": 4, "num_stages": 3}
"""The layer kernel's own fastest launch (same sweep: LSTM 23.1 ms, GRU 17.6 ms), taken when
KOPT_CONFIG asks for W_hh in registers and a layer's rows do not fit: the resident launch's 16
units and 8 warps run the layer kernel 1.9x slower (LSTM 44.7 ms)."""


_LAYER_STEP_END = """        row = gd + (t * B + b).to(tl.int64)[:, None] * (G * H) + j[None, :]
        g0 = tl.load(row, mask=m, other=0.0)
        if KIND == 0:  # LSTM
            i = 1.0 / (1.0 + tl.exp(-(g0 + a0)))
            f = 1.0 / (1.0 + tl.exp(-(tl.load(row + H, mask=m, other=0.0) + a1)))
            g = tl.load(row + 2 * H, mask=m, other=0.0) + a2
            g = 2.0 / (1.0 + tl.exp(-2.0 * g)) - 1.0  # tanh
            o = 1.0 / (1.0 + tl.exp(-(tl.load(row + 3 * H, mask=m, other=0.0) + a3)))
            c = f * c + i * g
            h = o * (2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0)  # tanh
        elif KIND == 1:  # GRU: the new gate's recurrent part (bias included) scaled by r
            r = 1.0 / (1.0 + tl.exp(-(g0 + a0)))
            z = 1.0 / (1.0 + tl.exp(-(tl.load(row + H, mask=m, other=0.0) + a1)))
            n = tl.load(row + 2 * H, mask=m, other=0.0) + r * a2
            n = 2.0 / (1.0 + tl.exp(-2.0 * n)) - 1.0  # tanh
            h = (1.0 - z) * n + z * tl.load(h_in + state, mask=m, other=0.0, cache_modifier=".cg")
        elif KIND == 2:
            h = 2.0 / (1.0 + tl.exp(-2.0 * (g0 + a0))) - 1.0  # tanh
        else:
            h = tl.maximum(g0 + a0, 0.0)
        tl.store(hd + ((s + 1) % 2) * B * H + state, h, mask=m)
        dst = out_ptr + t.to(tl.int64) * os_t + b.to(tl.int64)[:, None] * os_b + d * H + j[None, :]
        tl.store(dst, h.to(out_ptr.dtype.element_ty), mask=m)
        # the barrier: this program's h_t is written (every thread's store, then a release at
        # GPU scope) before it counts itself in; it reads h_t of the others after all arrived
        tl.debug_barrier()
        tl.atomic_add(bar, 1, sem="release", scope="gpu")
        want = (s + 1) * programs
        seen = tl.atomic_add(bar, 0, sem="acquire", scope="gpu")
        while seen < want:
            seen = tl.atomic_add(bar, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
    if KIND == 0:
        tl.store(c_ptr + d * B * H + state, c, mask=m)"""
"""The end of a step in both layer kernels (one text, written into each): the step's input
gates and the cell from the recurrent product's a0..a3, h_t to the state buffer and to the
layer's output, then the direction's barrier; after the last step, an LSTM's cell state."""


def recurrent_code(precision: str) -> str:
    """The kernels and `_recurrent`, the candidate's stand-in for the aten op. `precision`:
    the case's (strict: float32 products as three TF32 products, `tf32x3`)."""
    from kopt.phases.engineers.offline.kernels.writer import STRICT_FLOAT32_DOT
    dot = STRICT_FLOAT32_DOT if precision == "strict" else "tf32"
    return _CODE.replace("@LAYER_STEP_END@", _LAYER_STEP_END).replace("@DOT@", dot).replace(
        "@LAYER_FALLBACK@", repr(LAYER_FALLBACK))


_CODE = '''
# Recurrent layers: the products' float32 precision (the case's: tf32x3 at strict).
RECURRENT_DOT = "@DOT@"
_RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_RNN_KIND = {"lstm": 0, "gru": 1, "rnn_tanh": 2, "rnn_relu": 3}
_RNN_ATEN = {"lstm": torch.ops.aten.lstm.input, "gru": torch.ops.aten.gru.input,
             "rnn_tanh": torch.ops.aten.rnn_tanh.input, "rnn_relu": torch.ops.aten.rnn_relu.input}


@torch.compiler.disable
def _rnn_library(kind, *args):
    """The library's layer (the aten op: cuDNN on a GPU), the region switch's other side. Run
    as it is under torch.compile: traced, the op decomposes into every step's cell, and
    Inductor compiled that graph for minutes (KernelBench level-3 38 on an H200, 2026-12-01)."""
    return _RNN_ATEN[kind](*args)


@triton.jit
def _rnn_input_kernel(x_ptr, xs_t, xs_b, w_ptr, b_ptr, y_ptr, T, B, K, N,
                      HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, DOT: tl.constexpr):
    # y[t * B + b, n] = sum_k x[t, b, k] * w[n, k] (+ bias[n]), in float32: every step's
    # input gates of one layer and direction (x's features contiguous, w (N, K) contiguous)
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    rmask = r < T * B
    nmask = n < N
    xrow = (r // B).to(tl.int64) * xs_t + (r % B).to(tl.int64) * xs_b
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        km = k < K
        a = tl.load(x_ptr + xrow[:, None] + k[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
        w = tl.load(w_ptr + n[None, :].to(tl.int64) * K + k[:, None], mask=nmask[None, :] & km[:, None],
                    other=0.0)
        acc += tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision=DOT)
    if HAS_BIAS:
        acc += tl.load(b_ptr + n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + r.to(tl.int64)[:, None] * N + n[None, :], acc, mask=rmask[:, None] & nmask[None, :])


@triton.jit(do_not_specialize=["t"])  # one compiled kernel for every step (t == 1 included)
def _rnn_step_kernel(gx_ptr, t, h_ptr, h_next_ptr, w_ptr, bh_ptr, c_ptr, out_ptr, os_t, os_b,
                     o_off, B, H, KIND: tl.constexpr, G: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BB: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr):
    # one time step t of one direction: h_next = cell(gx[t] + h @ W_hh^T + b_hh); KIND 0 LSTM
    # (gates i, f, g, o; c updated in place), 1 GRU (r, z, n), 2 RNN tanh, 3 RNN relu.
    # h, h_next, c: (B, H) float32, contiguous; out: the layer's output at row stride os_b,
    # step stride os_t, this direction's features from o_off; G: the gates (4, 3 or 1)
    b = tl.program_id(0) * BB + tl.arange(0, BB)
    j = tl.program_id(1) * BH + tl.arange(0, BH)
    bm = b < B
    jm = j < H
    m = bm[:, None] & jm[None, :]
    a0 = tl.zeros((BB, BH), tl.float32)
    a1 = tl.zeros((BB, BH), tl.float32)
    a2 = tl.zeros((BB, BH), tl.float32)
    a3 = tl.zeros((BB, BH), tl.float32)
    # (no @triton.jit function is called in here, tl.sigmoid included: the CPU interpreter pays
    # ~1.3 ms to enter one, and this kernel runs once a step; sigmoid and tanh are written out)
    for k0 in range(0, H, BK):
        k = k0 + tl.arange(0, BK)
        wm = jm[None, :] & (k < H)[:, None]
        hk = tl.load(h_ptr + b[:, None] * H + k[None, :], mask=bm[:, None] & (k < H)[None, :], other=0.0)
        w = w_ptr + j[None, :].to(tl.int64) * H + k[:, None]  # gate 0's (BK, BH) tile of W_hh^T
        a0 += tl.dot(hk, tl.load(w, mask=wm, other=0.0).to(tl.float32), input_precision=DOT)
        if G > 1:
            a1 += tl.dot(hk, tl.load(w + H * H, mask=wm, other=0.0).to(tl.float32), input_precision=DOT)
        if G > 2:
            a2 += tl.dot(hk, tl.load(w + 2 * H * H, mask=wm, other=0.0).to(tl.float32),
                         input_precision=DOT)
        if G > 3:
            a3 += tl.dot(hk, tl.load(w + 3 * H * H, mask=wm, other=0.0).to(tl.float32),
                         input_precision=DOT)
    row = (t * B + b).to(tl.int64)[:, None] * (G * H) + j[None, :]
    if HAS_BIAS:
        a0 += tl.load(bh_ptr + j, mask=jm, other=0.0).to(tl.float32)[None, :]
        if G > 1:
            a1 += tl.load(bh_ptr + H + j, mask=jm, other=0.0).to(tl.float32)[None, :]
        if G > 2:
            a2 += tl.load(bh_ptr + 2 * H + j, mask=jm, other=0.0).to(tl.float32)[None, :]
        if G > 3:
            a3 += tl.load(bh_ptr + 3 * H + j, mask=jm, other=0.0).to(tl.float32)[None, :]
    g0 = tl.load(gx_ptr + row, mask=m, other=0.0)
    state = b[:, None] * H + j[None, :]
    if KIND == 0:  # LSTM
        i = 1.0 / (1.0 + tl.exp(-(g0 + a0)))
        f = 1.0 / (1.0 + tl.exp(-(tl.load(gx_ptr + row + H, mask=m, other=0.0) + a1)))
        g = tl.load(gx_ptr + row + 2 * H, mask=m, other=0.0) + a2
        g = 2.0 / (1.0 + tl.exp(-2.0 * g)) - 1.0  # tanh
        o = 1.0 / (1.0 + tl.exp(-(tl.load(gx_ptr + row + 3 * H, mask=m, other=0.0) + a3)))
        c = f * tl.load(c_ptr + state, mask=m, other=0.0) + i * g
        tl.store(c_ptr + state, c, mask=m)
        h = o * (2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0)  # tanh
    elif KIND == 1:  # GRU: the new gate's recurrent part (bias included) scaled by r
        r = 1.0 / (1.0 + tl.exp(-(g0 + a0)))
        z = 1.0 / (1.0 + tl.exp(-(tl.load(gx_ptr + row + H, mask=m, other=0.0) + a1)))
        n = tl.load(gx_ptr + row + 2 * H, mask=m, other=0.0) + r * a2
        n = 2.0 / (1.0 + tl.exp(-2.0 * n)) - 1.0  # tanh
        h = (1.0 - z) * n + z * tl.load(h_ptr + state, mask=m, other=0.0)
    elif KIND == 2:
        h = 2.0 / (1.0 + tl.exp(-2.0 * (g0 + a0))) - 1.0  # tanh
    else:
        h = tl.maximum(g0 + a0, 0.0)
    tl.store(h_next_ptr + state, h, mask=m)
    dst = out_ptr + t.to(tl.int64) * os_t + b.to(tl.int64)[:, None] * os_b + o_off + j[None, :]
    tl.store(dst, h.to(out_ptr.dtype.element_ty), mask=m)



@triton.jit
def _rnn_layer_kernel(gx_ptr, h_ptr, c_ptr, w_ptr, w2_ptr, bh_ptr, bh2_ptr, out_ptr, bar_ptr, T,
                      os_t, os_b, B, H,
                      KIND: tl.constexpr, G: tl.constexpr, HAS_BIAS: tl.constexpr,
                      BB: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr):
    # Every step of one layer in one launch, its directions side by side (program_id(2) = d;
    # the backward one walks t down). A step is _rnn_step_kernel's; between steps the programs
    # of a direction meet at a barrier in memory (bar[d] counts arrivals), so the caller
    # launches no more programs than the GPU holds at once. gx (dirs, T*B, G*H) f32; h (dirs, 2,
    # B, H) f32, two buffers taking turns (h[d, 0] = h0 on entry, h[d, T % 2] = h_n on exit);
    # c (dirs, B, H) f32, the LSTM's c0 in and c_n out (its block stays in registers between);
    # w, w2: W_hh (G*H, H) of the forward and the backward direction (the same pointer twice
    # for one direction); bh, bh2 their b_hh (G*H); bar (dirs,) int32 zeros.
    d = tl.program_id(2)
    b = tl.program_id(0) * BB + tl.arange(0, BB)
    j = tl.program_id(1) * BH + tl.arange(0, BH)
    programs = tl.num_programs(0) * tl.num_programs(1)
    bm = b < B
    jm = j < H
    m = bm[:, None] & jm[None, :]
    state = b[:, None] * H + j[None, :]
    hd = h_ptr + d * 2 * B * H
    wd = tl.where(d == 0, w_ptr, w2_ptr) + j[None, :].to(tl.int64) * H
    gd = gx_ptr + d.to(tl.int64) * T * B * G * H
    bar = bar_ptr + d
    b0 = tl.zeros((BH,), tl.float32)
    b1 = tl.zeros((BH,), tl.float32)
    b2 = tl.zeros((BH,), tl.float32)
    b3 = tl.zeros((BH,), tl.float32)
    if HAS_BIAS:
        bd = tl.where(d == 0, bh_ptr, bh2_ptr) + j
        b0 = tl.load(bd, mask=jm, other=0.0).to(tl.float32)
        if G > 1:
            b1 = tl.load(bd + H, mask=jm, other=0.0).to(tl.float32)
        if G > 2:
            b2 = tl.load(bd + 2 * H, mask=jm, other=0.0).to(tl.float32)
        if G > 3:
            b3 = tl.load(bd + 3 * H, mask=jm, other=0.0).to(tl.float32)
    c = tl.zeros((BB, BH), tl.float32)
    if KIND == 0:
        c = tl.load(c_ptr + d * B * H + state, mask=m, other=0.0)
    for s in range(T):
        t = s + d * (T - 1 - 2 * s)
        h_in = hd + (s % 2) * B * H
        a0 = tl.zeros((BB, BH), tl.float32) + b0[None, :]
        a1 = tl.zeros((BB, BH), tl.float32) + b1[None, :]
        a2 = tl.zeros((BB, BH), tl.float32) + b2[None, :]
        a3 = tl.zeros((BB, BH), tl.float32) + b3[None, :]
        for k0 in range(0, H, BK):
            k = k0 + tl.arange(0, BK)
            wm = jm[None, :] & (k < H)[:, None]
            # h_{t-1} from L2 (.cg: another program wrote it; L1 may hold the buffer's last turn)
            hk = tl.load(h_in + b[:, None] * H + k[None, :], mask=bm[:, None] & (k < H)[None, :],
                         other=0.0, cache_modifier=".cg")
            w = wd + k[:, None]  # gate 0's (BK, BH) tile of W_hh^T, read every step: kept cached
            a0 += tl.dot(hk, tl.load(w, mask=wm, other=0.0, eviction_policy="evict_last").to(tl.float32),
                         input_precision=DOT)
            if G > 1:
                a1 += tl.dot(hk, tl.load(w + H * H, mask=wm, other=0.0,
                                         eviction_policy="evict_last").to(tl.float32), input_precision=DOT)
            if G > 2:
                a2 += tl.dot(hk, tl.load(w + 2 * H * H, mask=wm, other=0.0,
                                         eviction_policy="evict_last").to(tl.float32), input_precision=DOT)
            if G > 3:
                a3 += tl.dot(hk, tl.load(w + 3 * H * H, mask=wm, other=0.0,
                                         eviction_policy="evict_last").to(tl.float32), input_precision=DOT)
@LAYER_STEP_END@


@triton.jit
def _rnn_resident_kernel(gx_ptr, h_ptr, c_ptr, w_ptr, w2_ptr, bh_ptr, bh2_ptr, out_ptr, bar_ptr, T,
                         os_t, os_b, B, H,
                         KIND: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BB: tl.constexpr, BU: tl.constexpr, HP: tl.constexpr, DOT: tl.constexpr):
    # _rnn_layer_kernel's steps and barrier, with the program's rows of W_hh held in registers
    # for the whole layer (read once, not once a step): a program owns BU hidden units of every
    # gate, and a step is one product h_{t-1} (BB, H) @ W^T (H, GP*BU), its columns gate-major
    # (GP: the gates rounded up to a power of two, a padding gate of zeros for the GRU).
    d = tl.program_id(2)
    b = tl.program_id(0) * BB + tl.arange(0, BB)
    u0 = tl.program_id(1) * BU
    programs = tl.num_programs(0) * tl.num_programs(1)
    col = tl.arange(0, GP * BU)
    gate = col // BU
    unit = u0 + col % BU
    cm = (gate < G) & (unit < H)
    k = tl.arange(0, HP)
    km = k < H
    w_rows = tl.where(d == 0, w_ptr, w2_ptr) + (gate * H + unit).to(tl.int64)[None, :] * H
    w = tl.load(w_rows + k[:, None], mask=cm[None, :] & km[:, None], other=0.0).to(tl.float32)
    bias = tl.zeros((GP * BU,), tl.float32)
    if HAS_BIAS:
        bias = tl.load(tl.where(d == 0, bh_ptr, bh2_ptr) + gate * H + unit, mask=cm, other=0.0)
        bias = bias.to(tl.float32)
    j = u0 + tl.arange(0, BU)
    bm = b < B
    jm = j < H
    m = bm[:, None] & jm[None, :]
    state = b[:, None] * H + j[None, :]
    hd = h_ptr + d * 2 * B * H
    gd = gx_ptr + d.to(tl.int64) * T * B * G * H
    bar = bar_ptr + d
    c = tl.zeros((BB, BU), tl.float32)
    if KIND == 0:
        c = tl.load(c_ptr + d * B * H + state, mask=m, other=0.0)
    for s in range(T):
        t = s + d * (T - 1 - 2 * s)
        h_in = hd + (s % 2) * B * H
        hk = tl.load(h_in + b[:, None] * H + k[None, :], mask=bm[:, None] & km[None, :], other=0.0,
                     cache_modifier=".cg")
        acc = tl.dot(hk, w, input_precision=DOT) + bias[None, :]
        if GP == 1:
            a0 = acc
            a1 = acc
            a2 = acc
            a3 = acc
        else:  # (BB, GP*BU) gate-major -> (BB, BU, 2, 2) -> the four gates' (BB, BU)
            by_unit = tl.reshape(tl.permute(tl.reshape(acc, (BB, GP, BU)), (0, 2, 1)), (BB, BU, 2, 2))
            even, odd = tl.split(by_unit)
            a0, a2 = tl.split(even)
            a1, a3 = tl.split(odd)
@LAYER_STEP_END@

_SM_COUNT = {}
_LAYER_FALLBACK = @LAYER_FALLBACK@  # the layer kernel's own fastest launch (a GRU's default)


def _rnn_blocks(B, H, gates, dirs, device):
    """(LAYER, BB, BH, BK, warps, stages): the launch (0 a kernel a step, 1 a kernel a layer,
    2 a kernel a layer holding its W_hh rows in registers), batch rows padded to tl.dot's 16,
    hidden units a program and the reduction's chunk as KOPT_CONFIG says (no wider than the
    layer). A layer's launch holds its programs for every step, so it is taken only when the
    GPU holds them all at once (one a multiprocessor), and the resident one only where a
    program's rows fit in 64 KB of registers; otherwise the next launch down. In the
    interpreter, which runs programs one after another, one program a direction takes a whole
    layer (a step launch takes every hidden unit up to 128: fewer Python-level programs)."""
    cfg = KOPT_CONFIG.get("_rnn_step_kernel", {})
    bk = max(16, min(cfg.get("BK", 64), _pow2(H)))
    mode = cfg.get("LAYER", 1)
    if mode == "auto":  # STEP_DEFAULT: W_hh in registers for an LSTM only
        mode, cfg = (2, cfg) if gates == 4 else (1, {**cfg, **_LAYER_FALLBACK})
    mode = int(mode)
    gp = 1 if gates == 1 else 4
    if _INTERPRETED:
        if mode:
            return mode, max(16, _pow2(B)), max(16 // gp, _pow2(H)), bk, 4, 2
        return 0, min(64, max(16, _pow2(B))), max(16, min(_pow2(H), 128)), bk, 4, 2
    bb = min(64, max(16, _pow2(B)))
    if device not in _SM_COUNT:
        _SM_COUNT[device] = torch.cuda.get_device_properties(device).multi_processor_count
    if mode == 2:
        # as many of the asked units as fit 16384 weights (64 KB of float32 registers)
        bh = max(16 // gp, min(cfg.get("BH", 16), _pow2(H), 16384 // (_pow2(H) * gp)))
        if (_cdiv(B, bb) * _cdiv(H, bh) * dirs <= _SM_COUNT[device]
                and _pow2(H) * gp * bh <= 16384):
            return 2, bb, bh, bk, cfg.get("num_warps", 8), cfg.get("num_stages", 3)
        mode, cfg = 1, {**cfg, **_LAYER_FALLBACK}
    bh = max(16, min(cfg.get("BH", 32), _pow2(H)))
    if mode == 1 and _cdiv(B, bb) * _cdiv(H, bh) * dirs > _SM_COUNT[device]:
        mode = 0
    return mode, bb, bh, bk, cfg.get("num_warps", 4), cfg.get("num_stages", 3)


# Under torch.compile this runs as it is (a graph break): Dynamo would unroll the step loop
# into thousands of kernel calls and Inductor would compile that graph for minutes.
@torch.compiler.disable
def _recurrent(kind, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
               batch_first):
    """torch.ops.aten.<kind>.input(...) with Triton kernels: (output, h_n[, c_n]) as PyTorch
    returns them. A configuration they do not cover runs the aten op (cuDNN on a GPU)."""
    h0 = hx[0] if kind == "lstm" else hx
    gates = _RNN_GATES[kind]
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    hidden = h0.shape[-1]
    if (x.dim() != 3 or x.dtype not in (torch.float32, torch.float16, torch.bfloat16)
            or len(params) != num_layers * dirs * per or params[1].shape != (gates * hidden, hidden)
            or (dropout and train and num_layers > 1) or x.numel() == 0):
        return _rnn_library(kind, x, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first)
    steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    device = x.device
    h_n = torch.empty(h0.shape, device=device, dtype=h0.dtype)
    c_n = torch.empty(hx[1].shape, device=device, dtype=hx[1].dtype) if kind == "lstm" else None
    mode, bb, bh, bk, warps, stages = _rnn_blocks(batch, hidden, gates, dirs, device)
    kw = dict(KIND=_RNN_KIND[kind], G=gates, HAS_BIAS=has_biases, BB=bb, DOT=RECURRENT_DOT,
              num_warps=warps, num_stages=stages)
    n = gates * hidden
    layer_in = x
    for layer in range(num_layers):
        if layer_in.stride(-1) != 1:
            layer_in = layer_in.contiguous()
        shape = (batch, steps, dirs * hidden) if batch_first else (steps, batch, dirs * hidden)
        out = torch.empty(shape, device=device, dtype=x.dtype)
        xs_t, xs_b = (layer_in.stride(1), layer_in.stride(0)) if batch_first else \
            (layer_in.stride(0), layer_in.stride(1))
        os_t, os_b = (out.stride(1), out.stride(0)) if batch_first else (out.stride(0), out.stride(1))
        first = layer * dirs  # this layer's directions in params, h0 and h_n
        gx = torch.empty((dirs, steps * batch, n), device=device, dtype=torch.float32)
        for d in range(dirs):
            w_ih = params[(first + d) * per].contiguous()
            b_ih = params[(first + d) * per + 2] if has_biases else w_ih
            bm, bn = (min(128, max(16, _pow2(steps * batch))), min(128, max(16, _pow2(n)))) \
                if _INTERPRETED else (64, 64)
            _rnn_input_kernel[(_cdiv(steps * batch, bm), _cdiv(n, bn))](
                layer_in, xs_t, xs_b, w_ih, b_ih, gx[d], steps, batch, w_ih.shape[1], n,
                HAS_BIAS=has_biases, BM=bm, BN=bn, BK=32, DOT=RECURRENT_DOT, num_warps=4)
        # (each direction's own tensors: a stack of them would be PyTorch's work each forward)
        w_hh = [params[(first + d) * per + 1].contiguous() for d in range(dirs)]
        b_hh = [params[(first + d) * per + 3] for d in range(dirs)] if has_biases else w_hh
        h = torch.empty((dirs, 2, batch, hidden), device=device, dtype=torch.float32)
        h[:, 0].copy_(h0[first:first + dirs])
        c = h
        if kind == "lstm":
            c = torch.empty((dirs, batch, hidden), device=device, dtype=torch.float32)
            c.copy_(hx[1][first:first + dirs])
        if mode:
            bar = torch.zeros(dirs, device=device, dtype=torch.int32)
            layer_args = (gx, h, c, w_hh[0], w_hh[-1], b_hh[0], b_hh[-1], out, bar, steps, os_t,
                          os_b, batch, hidden)
            grid = (_cdiv(batch, bb), _cdiv(hidden, bh), dirs)
            if mode == 2:
                _rnn_resident_kernel[grid](*layer_args, GP=1 if gates == 1 else 4, BU=bh,
                                           HP=_pow2(hidden), **kw)
            else:
                _rnn_layer_kernel[grid](*layer_args, BH=bh, BK=bk, **kw)
        else:
            grid = (_cdiv(batch, bb), _cdiv(hidden, bh))
            for d in range(dirs):
                for s in range(steps):
                    _rnn_step_kernel[grid](gx[d], steps - 1 - s if d else s, h[d, s % 2],
                                           h[d, (s + 1) % 2], w_hh[d], b_hh[d],
                                           c[d] if kind == "lstm" else h[d, 0], out, os_t, os_b,
                                           d * hidden, batch, hidden, BH=bh, BK=bk, **kw)
        h_n[first:first + dirs].copy_(h[:, steps % 2])  # the buffer the last step wrote
        if c_n is not None:
            c_n[first:first + dirs].copy_(c)
        layer_in = out
    return (out, h_n, c_n) if kind == "lstm" else (out, h_n)
'''
