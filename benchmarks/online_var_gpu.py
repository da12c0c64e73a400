"""The loop step of a long row's online variance, three ways, on the GPU: a group norm's
statistics over rows of tens of thousands of float32 elements (KernelBench level-2 92's
2048 x 63504 and a level-2-23-style 1024 x 59400), each row plus a per-row bias repeated
along it, as the offline engineer's looped reduction reads them.

    python benchmarks/online_var_gpu.py

- `div`: each lane's Welford step divides by its own count (the writer before 2026-12-02);
- `recip`: one reciprocal per loop step (only the last block is partial, so an active lane's
  count is the step's number);
- `shifted`: no Welford: sums of x - K and of its square, K the row's first element
  (the textbook shifted-data variance).

Each kernel's median over 50 launches (CUDA events, after warm-ups), its bandwidth, and its
largest relative error of the variance against float64. Prints a table last.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from conv_layout_gpu import ms  # beside this script: CUDA events, median after warm-ups


@triton.jit
def _combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    w = tl.where(n == 0, 0.0, n_b / tl.maximum(n, 1.0))
    d = mean_b - mean_a
    return mean_a + d * w, m2_a + m2_b + d * d * n_a * w, n


@triton.jit
def _stats(x_ptr, b_ptr, var_ptr, n_cols, MODE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    base = x_ptr + row * n_cols
    n = tl.zeros([BLOCK], tl.float32)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    step = 0.0
    k = tl.load(base) + tl.load(b_ptr + (row % 8) * n_cols)
    for start in range(0, n_cols, BLOCK):
        cr = start + cols
        cmask = cr < n_cols
        v = tl.load(base + cr, mask=cmask, other=0) + tl.load(b_ptr + (row % 8) * n_cols + cr, mask=cmask, other=0)
        step += 1.0
        e = tl.where(cmask, v, 0.0)
        if MODE == 2:
            d = tl.where(cmask, e - k, 0.0)
            mean += d
            m2 += d * d
            n += cmask.to(tl.float32)
        else:
            tot = n + cmask.to(tl.float32)
            delta = e - mean
            if MODE == 0:
                mean = mean + tl.where(cmask, delta / tl.maximum(tot, 1.0), 0.0)
            else:
                mean = mean + tl.where(cmask, delta * (1.0 / step), 0.0)
            m2 = m2 + tl.where(cmask, delta * (e - mean), 0.0)
            n = tot
    if MODE == 2:
        s1 = tl.sum(mean, 0)
        s2 = tl.sum(m2, 0)
        var = (s2 - s1 * s1 / n_cols) / n_cols
    else:
        _, m2_all, _ = tl.reduce((mean, m2, n), 0, _combine)
        var = m2_all / n_cols
    tl.store(var_ptr + row, var)


def main() -> None:
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "triton", triton.__version__)
    rows = []
    for n_rows, n_cols in ((1024, 59400), (2048, 63504)):
        x = torch.randn(n_rows, n_cols, device="cuda") * 0.5 + 3.0
        b = torch.randn(8, n_cols, device="cuda")
        full = (x.view(n_rows // 8, 8, n_cols) + b).view(n_rows, n_cols).double()
        truth = full.var(dim=1, unbiased=False)
        for mode, name in enumerate(("div", "recip", "shifted")):
            for block, warps in ((4096, 8), (2048, 8), (2048, 4)):
                out = torch.empty(n_rows, device="cuda")

                def run() -> None:
                    _stats[(n_rows,)](x, b, out, n_cols, MODE=mode, BLOCK=block, num_warps=warps)

                t = ms(run)
                err = ((out.double() - truth).abs() / truth).max().item()
                rows.append((f"{n_rows}x{n_cols}", name, block, warps, t,
                             x.numel() * 4 / t / 1e9, err))
    print(f"{'shape':<12} {'step':<8} {'block':>6} {'warps':>5} {'ms':>8} {'TB/s':>6} {'max rel err':>12}")
    for r in rows:
        print(f"{r[0]:<12} {r[1]:<8} {r[2]:>6} {r[3]:>5} {r[4]:8.4f} {r[5]:6.2f} {r[6]:12.2e}")


if __name__ == "__main__":
    main()
