"""Convolutions with few input channels computed as sums over window taps, against cuDNN.

    python benchmarks/small_conv_gpu.py

KernelBench level 2 has 3-D convolutions and transposed convolutions with 3 input channels
(a 3x3x3 window: 81 products per output element) where cuDNN's kernel takes most of the
forward (its transposed 3-D conv with 3 channels runs at ~1% of the floor). A kernel over the
output (one lane per output element, NCDHW order) that sums x times w over (input channel,
tap) needs no GEMM tile and writes the output once. Variants:

- taps: every tap of the window, masked where it falls outside x (and, transposed, where the
  stride does not divide);
- parity (transposed only): along each dim only the taps k = (o + padding) % stride + j *
  stride can divide, ceil(K / stride) of them, their weights gathered per lane.

Each variant is checked against PyTorch's (max abs error printed) and timed with CUDA events
(median of 30 after 5 warm-ups); the table is last.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from conv_layout_gpu import ms  # beside this script: CUDA events, median after warm-ups

ALL = 0
"""1: also time the per-element variants (taps, parity): 4-9x slower than cuDNN on the H200."""


@triton.jit
def _conv3d_taps(x_ptr, w_ptr, b_ptr, y_ptr, total, C_OUT, OD, OH, OW, ID, IH, IW,
                 C_IN: tl.constexpr, K: tl.constexpr, S: tl.constexpr, P: tl.constexpr,
                 TRANSPOSED: tl.constexpr, PARITY: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offs < total
    ow = offs % OW
    r = offs // OW
    oh = r % OH
    r = r // OH
    od = r % OD
    r = r // OD
    co = r % C_OUT
    n = r // C_OUT
    acc = tl.load(b_ptr + co, mask=live, other=0.0).to(tl.float32)
    for ci in tl.static_range(C_IN):
        xbase = (n * C_IN + ci) * ID
        if TRANSPOSED:
            wbase = (ci * C_OUT + co) * K
        else:
            wbase = (co * C_IN + ci) * K
        if PARITY:
            for jd in tl.static_range((K + S - 1) // S):
                kd = (od + P) % S + jd * S
                ud = od + P - kd
                id_ = ud // S
                md = (kd < K) & (ud >= 0) & (id_ < ID)
                for jh in tl.static_range((K + S - 1) // S):
                    kh = (oh + P) % S + jh * S
                    uh = oh + P - kh
                    ih = uh // S
                    mh = md & (kh < K) & (uh >= 0) & (ih < IH)
                    for jw in tl.static_range((K + S - 1) // S):
                        kw = (ow + P) % S + jw * S
                        uw = ow + P - kw
                        iw = uw // S
                        m = mh & (kw < K) & (uw >= 0) & (iw < IW) & live
                        xv = tl.load(x_ptr + ((xbase + id_) * IH + ih) * IW + iw, mask=m, other=0.0)
                        wv = tl.load(w_ptr + ((wbase + kd) * K + kh) * K + kw, mask=m, other=0.0)
                        acc += xv.to(tl.float32) * wv.to(tl.float32)
        else:
            for kd in tl.static_range(K):
                if TRANSPOSED:
                    ud = od + P - kd
                    id_ = ud // S
                    md = (ud >= 0) & (ud % S == 0) & (id_ < ID)
                else:
                    id_ = od * S - P + kd
                    md = (id_ >= 0) & (id_ < ID)
                for kh in tl.static_range(K):
                    if TRANSPOSED:
                        uh = oh + P - kh
                        ih = uh // S
                        mh = md & (uh >= 0) & (uh % S == 0) & (ih < IH)
                    else:
                        ih = oh * S - P + kh
                        mh = md & (ih >= 0) & (ih < IH)
                    for kw in tl.static_range(K):
                        if TRANSPOSED:
                            uw = ow + P - kw
                            iw = uw // S
                            m = mh & (uw >= 0) & (uw % S == 0) & (iw < IW) & live
                        else:
                            iw = ow * S - P + kw
                            m = mh & (iw >= 0) & (iw < IW) & live
                        xv = tl.load(x_ptr + ((xbase + id_) * IH + ih) * IW + iw, mask=m, other=0.0)
                        wv = tl.load(w_ptr + ((wbase + kd) * K + kh) * K + kw, mask=live, other=0.0)
                        acc += xv.to(tl.float32) * wv.to(tl.float32)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=live)


@triton.jit
def _conv3d_outer(x_ptr, w_ptr, b_ptr, y_ptr, C_OUT, OD, OH, OW, ID, IH, IW, QD, QH, QW,
                  C_IN: tl.constexpr, K: tl.constexpr, S: tl.constexpr, P: tl.constexpr,
                  TRANSPOSED: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr):
    # one batch entry, one residue class (rd, rh, rw) of the output modulo the stride
    # (transposed; forward convs have one class), BLOCK_Q positions of that class, every
    # output channel: acc[q, c] += x[q at a tap] * w[c at that tap], the tap's weights a
    # vector over the channels shared by the block's positions
    pid_q = tl.program_id(0)
    cls = tl.program_id(1)
    n = tl.program_id(2)
    rw = cls % S
    rh = (cls // S) % S
    rd = cls // (S * S)
    q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    qw = q % QW
    qh = (q // QW) % QH
    qd = q // (QW * QH)
    if TRANSPOSED:
        od = qd * S + rd
        oh = qh * S + rh
        ow = qw * S + rw
    else:
        od = qd
        oh = qh
        ow = qw
    live = (qd < QD) & (od < OD) & (oh < OH) & (ow < OW)
    c = tl.arange(0, BLOCK_C)
    c_ok = c < C_OUT
    acc = tl.zeros((BLOCK_Q, BLOCK_C), tl.float32) + \
        tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    J: tl.constexpr = (K + S - 1) // S if TRANSPOSED else K
    for ci in tl.static_range(C_IN):
        xbase = x_ptr + (n * C_IN + ci).to(tl.int64) * ID * IH * IW
        for jd in tl.static_range(J):
            if TRANSPOSED:
                kd = (rd + P) % S + jd * S
                id_ = qd + (rd + P - kd) // S
            else:
                kd = jd
                id_ = od * S - P + kd
            md = live & (kd < K) & (id_ >= 0) & (id_ < ID)
            for jh in tl.static_range(J):
                if TRANSPOSED:
                    kh = (rh + P) % S + jh * S
                    ih = qh + (rh + P - kh) // S
                else:
                    kh = jh
                    ih = oh * S - P + kh
                mh = md & (kh < K) & (ih >= 0) & (ih < IH)
                for jw in tl.static_range(J):
                    if TRANSPOSED:
                        kw = (rw + P) % S + jw * S
                        iw = qw + (rw + P - kw) // S
                    else:
                        kw = jw
                        iw = ow * S - P + kw
                    m = mh & (kw < K) & (iw >= 0) & (iw < IW)
                    xv = tl.load(xbase + (id_ * IH + ih) * IW + iw, mask=m, other=0.0)
                    tap = (kd * K + kh) * K + kw
                    if TRANSPOSED:
                        woff = (ci * C_OUT + c) * (K * K * K) + tap
                    else:
                        woff = (c * C_IN + ci) * (K * K * K) + tap
                    wv = tl.load(w_ptr + woff, mask=c_ok & (kd < K) & (kh < K) & (kw < K), other=0.0)
                    acc += xv.to(tl.float32)[:, None] * wv.to(tl.float32)[None, :]
    sp = (od * OH + oh) * OW + ow
    yoff = (n * C_OUT + c).to(tl.int64)[None, :] * (OD * OH * OW) + sp[:, None]
    tl.store(y_ptr + yoff, acc.to(y_ptr.dtype.element_ty), mask=live[:, None] & c_ok[None, :])


def run_outer(x, w, b, y, transposed, K, S, P, block_q, warps):
    N, C_in, ID, IH, IW = x.shape
    _, C_out, OD, OH, OW = y.shape
    s = S if transposed else 1
    QD, QH, QW = (-(-OD // s), -(-OH // s), -(-OW // s)) if transposed else (OD, OH, OW)
    grid = (triton.cdiv(QD * QH * QW, block_q), s ** 3, N)
    _conv3d_outer[grid](x, w, b, y, C_out, OD, OH, OW, ID, IH, IW, QD, QH, QW, C_IN=C_in, K=K,
                        S=S, P=P, TRANSPOSED=transposed, BLOCK_Q=block_q,
                        BLOCK_C=triton.next_power_of_2(C_out), num_warps=warps)


def run_triton(x, w, b, y, transposed, parity, K, S, P, block, warps):
    N, C_in, ID, IH, IW = x.shape
    _, C_out, OD, OH, OW = y.shape
    total = y.numel()
    _conv3d_taps[(triton.cdiv(total, block),)](
        x, w, b, y, total, C_out, OD, OH, OW, ID, IH, IW, C_IN=C_in, K=K, S=S, P=P,
        TRANSPOSED=transposed, PARITY=parity, BLOCK=block, num_warps=warps)


def timed(fn) -> float:
    """The median of 30 CUDA-event times after 5 warm-ups (`conv_layout_gpu.ms`)."""
    return ms(fn, iters=30, warm=5)


def main() -> None:
    torch.manual_seed(0)
    cases = [  # name, N, C_in, C_out, (D, H, W), K, S, P, transposed
        ("convT3d 3->16 k3 s2 p1 (L2 50/58/60/96)", 128, 3, 16, (16, 32, 32), 3, 2, 1, True),
        ("convT3d 3->16 k3 s2 p1 (L2 72)", 64, 3, 16, (32, 32, 32), 3, 2, 1, True),
        ("convT3d 16->32 k3 s2 p1 (L2 74)", 16, 16, 32, (16, 32, 32), 3, 2, 1, True),
        ("conv3d 3->16 k3 (L2 6)", 128, 3, 16, (16, 32, 32), 3, 1, 0, False),
        ("conv3d 3->16 k3 (L2 48)", 128, 3, 16, (16, 64, 64), 3, 1, 0, False),
        ("conv3d 3->24 k3 (L2 24)", 128, 3, 24, (24, 32, 32), 3, 1, 0, False),
        ("conv3d 8->16 k3 (L2 8)", 128, 8, 16, (16, 64, 64), 3, 1, 0, False),
    ]
    rows = []
    for name, N, C_in, C_out, dhw, K, S, P, transposed in cases:
        x = torch.randn(N, C_in, *dhw, device="cuda")
        if transposed:
            w = torch.randn(C_in, C_out, K, K, K, device="cuda") * 0.2
            b = torch.randn(C_out, device="cuda")
            ref_fn = lambda: F.conv_transpose3d(x, w, b, stride=S, padding=P)  # noqa: E731, B023
        else:
            w = torch.randn(C_out, C_in, K, K, K, device="cuda") * 0.2
            b = torch.randn(C_out, device="cuda")
            ref_fn = lambda: F.conv3d(x, w, b, stride=S, padding=P)  # noqa: E731, B023
        ref = ref_fn()
        floor_ms = (x.numel() + ref.numel()) * 4 / 2.97e12 * 1e3 * 2  # read+write at copy bw
        row = {"case": name, "out": tuple(ref.shape), "cudnn": timed(ref_fn)}
        print(name, "cuDNN", f"{row['cudnn']:.3f} ms", flush=True)
        y = torch.empty_like(ref)
        variants = [("outer", None)] + [("taps", False)] * ALL + \
            ([("parity", True)] if transposed and ALL else [])
        for vname, parity in variants:
            best = None
            configs = ((32, 4), (64, 4), (128, 4), (256, 8), (128, 8)) if vname == "outer" \
                else ((128, 4), (256, 4))
            for block, warps in configs:
                if vname == "outer":
                    fn = lambda: run_outer(x, w, b, y, transposed, K, S, P, block, warps)  # noqa: E731, B023
                else:
                    fn = lambda: run_triton(x, w, b, y, transposed, parity, K, S, P, block, warps)  # noqa: E731, B023
                try:
                    y.zero_()
                    fn()
                    torch.cuda.synchronize()
                    err = (y - ref).abs().max().item()
                    ms = timed(fn)
                except Exception as e:  # noqa: BLE001
                    print(name, vname, block, warps, "failed:", str(e).splitlines()[0], flush=True)
                    continue
                print(name, vname, block, warps, f"{ms:.3f} ms err {err:.2e}", flush=True)
                if best is None or ms < best[0]:
                    best = (ms, block, warps, err)
            row[vname] = best
        row["floor"] = floor_ms
        rows.append(row)
    print("\n| case | output | cuDNN ms | outer ms (block, warps, err) | taps ms | parity ms | best vs cuDNN |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        cells = []
        best = r["cudnn"]
        for v in ("outer", "taps", "parity"):
            got = r.get(v)
            if got:
                cells.append(f"{got[0]:.3f} ({got[1]}, {got[2]}, {got[3]:.1e})")
                best = min(best, got[0])
            else:
                cells.append("-")
        print(f"| {r['case']} | {r['out']} | {r['cudnn']:.3f} | {' | '.join(cells)} | "
              f"{r['cudnn'] / best:.2f}x |")


if __name__ == "__main__":
    main()
