"""Where the column standardisation's time goes, launch by launch, and what a contiguous tail
would give: `(x - x.mean(0)) / (x.std(0) + 1e-5)` on 65536x4096 float32.

    python benchmarks/column_tail_gpu.py

Rows: torch.compile and the offline engineer's candidate (its forward launched from Python),
each with its CUDA kernels by device time (torch.profiler, 10 forwards); then a hand-written
three-launch form timed with triton.testing.do_bench: per-split column partials (sum and sum
of squares about a shift), a combine into mean and 1/(std + eps) per column, and the map as a
flat walk over x in memory order (each column's two statistics read back by index). A
diagnostic for the generator's design, not a kernel kopt ships. Markdown table last.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from candidate_module import generated  # noqa: E402  (beside this script)

CASE = ROOT / "tests" / "corpus" / "cases" / "column_standardize"
ROWS, COLS = 65536, 4096


@triton.jit
def _partials(x_ptr, part_ptr, n_rows, n_cols, chunk, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cb, sp = tl.program_id(0), tl.program_id(1)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < n_cols
    lo = sp * chunk
    s = tl.zeros((BLOCK_C,), tl.float32)
    q = tl.zeros((BLOCK_C,), tl.float32)
    for r0 in range(lo, lo + chunk, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        m = (rows[:, None] < n_rows) & cmask[None, :]
        v = tl.load(x_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :], mask=m, other=0.0)
        s += tl.sum(v, 0)
        q += tl.sum(v * v, 0)
    tl.store(part_ptr + (sp * 2) * n_cols + cols, s, mask=cmask)
    tl.store(part_ptr + (sp * 2 + 1) * n_cols + cols, q, mask=cmask)


@triton.jit
def _combine(part_ptr, mean_ptr, inv_ptr, n_rows, n_cols, n_split, SPLIT_P: tl.constexpr,
             BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    sp = tl.arange(0, SPLIT_P)[:, None]
    m = (sp < n_split) & (cols[None, :] < n_cols)
    s = tl.sum(tl.load(part_ptr + (sp * 2) * n_cols + cols[None, :], mask=m, other=0.0), 0)
    q = tl.sum(tl.load(part_ptr + (sp * 2 + 1) * n_cols + cols[None, :], mask=m, other=0.0), 0)
    mean = s / n_rows
    var = (q - s * mean) / (n_rows - 1)
    tl.store(mean_ptr + cols, mean, mask=cols < n_cols)
    tl.store(inv_ptr + cols, 1.0 / (tl.sqrt(var) + 1e-5), mask=cols < n_cols)


@triton.jit
def _flat_map(x_ptr, mean_ptr, inv_ptr, y_ptr, numel, n_cols, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < numel
    c = i % n_cols
    v = tl.load(x_ptr + i, mask=m)
    y = (v - tl.load(mean_ptr + c, mask=m)) * tl.load(inv_ptr + c, mask=m)
    tl.store(y_ptr + i, y, mask=m)


def kernels(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:6]
    return [f"{e.device_time_total / 10 / 1000:.4f} ms/forward x{e.count // 10}  {e.key[:70]}"
            for e in rows if e.device_time_total > 0]


def main() -> int:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    mod = generated(CASE)
    model = mod.ModelNew().cuda()
    mod.KOPT_GRAPH = False
    x = torch.randn(ROWS, COLS, device="cuda")
    ref = (x - x.mean(0)) / (x.std(0) + 1e-5)
    compiled = torch.compile(lambda t: (t - t.mean(0)) / (t.std(0) + 1e-5))
    compiled(x)
    table = []
    for what, fn in (("torch.compile", lambda: compiled(x)), ("kopt candidate", lambda: model(x))):
        out = fn()
        ok = torch.allclose(out, ref, atol=1e-3, rtol=1e-3)
        ms = triton.testing.do_bench(fn, rep=200)
        table.append((what, ms, ok))
        print(f"--- {what}: {ms:.4f} ms, matches {ok}")
        print("\n".join(kernels(fn)))

    mean = torch.empty(COLS, device="cuda")
    inv = torch.empty(COLS, device="cuda")
    y = torch.empty_like(x)
    for block_c, splits, block_r in ((64, 16, 32), (128, 16, 32), (64, 32, 32), (128, 32, 16),
                                     (256, 32, 16), (64, 64, 32)):
        part = torch.empty(splits * 2, COLS, device="cuda")
        chunk = triton.cdiv(triton.cdiv(ROWS, splits), block_r) * block_r

        def stats(block_c=block_c, splits=splits, block_r=block_r, part=part, chunk=chunk):
            _partials[(triton.cdiv(COLS, block_c), splits)](x, part, ROWS, COLS, chunk, BLOCK_R=block_r,
                                                            BLOCK_C=block_c, num_warps=4)
            _combine[(triton.cdiv(COLS, 128),)](part, mean, inv, ROWS, COLS, splits,
                                                SPLIT_P=triton.next_power_of_2(splits), BLOCK_C=128)

        def mapped(block=1024):
            _flat_map[(triton.cdiv(x.numel(), block),)](x, mean, inv, y, x.numel(), COLS, BLOCK=block,
                                                        num_warps=4)

        def whole(stats=stats, mapped=mapped):
            stats()
            mapped()

        whole()
        ok = torch.allclose(y, ref, atol=1e-3, rtol=1e-3)
        t_stats = triton.testing.do_bench(stats, rep=100)
        t_map = triton.testing.do_bench(mapped, rep=100)
        t_all = triton.testing.do_bench(whole, rep=200)
        what = f"hand: partials {block_r}x{block_c}, {splits} splits + combine + flat map"
        print(f"--- {what}: stats {t_stats:.4f} ms, map {t_map:.4f} ms, all {t_all:.4f} ms, matches {ok}")
        table.append((what, t_all, ok))
    gib = x.numel() * 4 / 2**30
    print("\n| variant | ms | matches | GB/s over 3 passes |\n|---|---:|---|---:|")
    for what, ms, ok in table:
        print(f"| {what} | {ms:.4f} | {ok} | {3 * gib * 2**30 / ms / 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
