"""Recurrent layers (LSTM, GRU, Elman RNN) as Triton kernels: one product for every step's
input, then one kernel per time step.

A recurrent layer is a chain of small dependent steps: h_t needs h_{t-1}, and each step is a
small product and a few pointwise ops. cuDNN takes 9.7 us an LSTM step and 14.6 us a GRU step
at KernelBench's sizes (level-3 36 and 40: six layers, 512 steps of 10 sequences, hidden 256;
29.7 and 44.8 ms a forward on an H200, 2026-11-30). Here:

- `_rnn_input_kernel`: every step's input product at once, x (T, B, I) @ W_ih^T + b_ih, into
  a float32 buffer of gate pre-activations (T*B, G*H): the one large product of the layer;
- `_rnn_step_kernel`: one time step of one direction: the recurrent product h_{t-1} @ W_hh^T
  for each gate's block of hidden units, plus that step's input gates, the cell (LSTM:
  i, f, g, o and the cell state; GRU: r, z, n; RNN: tanh or relu), h_t written to the layer's
  output and to a float32 state buffer for the next step.

The candidate's forward replays as one CUDA graph (`_graphed`), so a step's launch costs the
graph's few microseconds, not Python's. Layers, directions and steps run as PyTorch does them
(`torch.ops.aten.lstm.input`'s arguments: flat weights per layer and direction, `batch_first`,
`bidirectional`; nn.LSTM passes an unbatched input as a batch of one). What this does not
cover runs the aten op itself (cuDNN on a GPU), which is the baseline's own library call: an
LSTM with projections (`proj_size`), dropout between layers while training, double inputs.
"""

from __future__ import annotations

STEP_KERNEL = "_rnn_step_kernel"
STEP_TUNABLES = {"BH": [16, 32], "BK": [32, 64, 128], "num_warps": [2, 4, 8], "num_stages": [2, 3]}
"""The step kernel's launch parameters the accelerator may search (KOPT_TUNABLES): hidden
units a program, the reduction's chunk, warps, pipeline stages."""
STEP_DEFAULT = {"BH": 32, "BK": 64, "num_warps": 4, "num_stages": 3}
"""What it launches with until tuned: the fastest of STEP_TUNABLES's 36 launches for both an
LSTM and a GRU on an H200 (KernelBench level-3 36 and 40: six layers, 512 steps of 10
sequences, hidden 256; graphed forwards, `benchmarks/recurrent_gpu.py --sweep`, 2026-12-01):
LSTM 25.6 ms (cuDNN 27.0), GRU 20.3 ms (cuDNN 46.9). The first default (BH 16, BK 128,
2 warps, 3 stages) spilled 1296 bytes a thread on sm_90; the second (BH 16, BK 32, 4 warps,
2 stages) did not spill and ran 44.6 / 32.9 ms. A wider unit block halves the programs that
each read the whole h_{t-1}, and a chunk of 64 with 3 stages keeps W_hh's tiles in flight."""


def recurrent_code(precision: str) -> str:
    """The kernels and `_recurrent`, the candidate's stand-in for the aten op. `precision`:
    the case's (strict: float32 products as three TF32 products, `tf32x3`)."""
    from kopt.phases.engineers.offline.kernels.writer import STRICT_FLOAT32_DOT
    dot = STRICT_FLOAT32_DOT if precision == "strict" else "tf32"
    return _CODE.replace("@DOT@", dot)


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


def _rnn_blocks(B, H):
    """(BB, BH, BK, warps, stages) of the step kernel: batch rows padded to tl.dot's 16, hidden units
    and the reduction's chunk as KOPT_CONFIG says (no wider than the layer). In the
    interpreter, one program takes every hidden unit (fewer Python-level programs)."""
    cfg = KOPT_CONFIG.get("_rnn_step_kernel", {})
    bb = min(64, max(16, _pow2(B)))
    bh = min(_pow2(H), 128) if _INTERPRETED else min(cfg.get("BH", 16), _pow2(H))
    bk = min(cfg.get("BK", 32), _pow2(H))
    return bb, max(16, bh), max(16, bk), cfg.get("num_warps", 4), cfg.get("num_stages", 2)


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
    bb, bh, bk, warps, stages = _rnn_blocks(batch, hidden)
    layer_in = x
    for layer in range(num_layers):
        if layer_in.stride(-1) != 1:
            layer_in = layer_in.contiguous()
        shape = (batch, steps, dirs * hidden) if batch_first else (steps, batch, dirs * hidden)
        out = torch.empty(shape, device=device, dtype=x.dtype)
        xs_t, xs_b = (layer_in.stride(1), layer_in.stride(0)) if batch_first else \\
            (layer_in.stride(0), layer_in.stride(1))
        os_t, os_b = (out.stride(1), out.stride(0)) if batch_first else (out.stride(0), out.stride(1))
        for d in range(dirs):
            i = layer * dirs + d
            w_ih, w_hh = params[i * per].contiguous(), params[i * per + 1].contiguous()
            b_ih = params[i * per + 2] if has_biases else w_ih
            b_hh = params[i * per + 3] if has_biases else w_hh
            k_in, n = w_ih.shape[1], gates * hidden
            gx = torch.empty((steps * batch, n), device=device, dtype=torch.float32)
            bm, bn = (min(128, max(16, _pow2(steps * batch))), min(128, max(16, _pow2(n)))) \\
                if _INTERPRETED else (64, 64)
            _rnn_input_kernel[(_cdiv(steps * batch, bm), _cdiv(n, bn))](
                layer_in, xs_t, xs_b, w_ih, b_ih, gx, steps, batch, k_in, n, HAS_BIAS=has_biases,
                BM=bm, BN=bn, BK=32, DOT=RECURRENT_DOT, num_warps=4)
            h = torch.empty((batch, hidden), device=device, dtype=torch.float32)
            h.copy_(h0[i])
            h_next = torch.empty_like(h)
            c = None
            if kind == "lstm":
                c = torch.empty((batch, hidden), device=device, dtype=torch.float32)
                c.copy_(hx[1][i])
            grid = (_cdiv(batch, bb), _cdiv(hidden, bh))
            for s in range(steps):
                t = steps - 1 - s if d else s
                _rnn_step_kernel[grid](gx, t, h, h_next, w_hh, b_hh, h if c is None else c, out,
                                       os_t, os_b, d * hidden, batch, hidden,
                                       KIND=_RNN_KIND[kind], G=gates, HAS_BIAS=has_biases, BB=bb, BH=bh,
                                       BK=bk, DOT=RECURRENT_DOT, num_warps=warps,
                                       num_stages=stages)
                h, h_next = h_next, h
            h_n[i].copy_(h)
            if c is not None:
                c_n[i].copy_(c)
        layer_in = out
    return (out, h_n, c_n) if kind == "lstm" else (out, h_n)
'''
