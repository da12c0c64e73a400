"""A column standardisation that reads x once: one launch, a register tile per program, in ticket order.

`(x - x.mean(0)) / (x.std(0) + 1e-5)` over a tall float32 matrix needs every row of a column
before any output of that column; the two-launch split (kopt's PHASE 1 / PHASE 2) reads x
twice. Here each program holds a (BM, BC) tile in registers, publishes its partial mean and
sum of squared deviations, and the column block's last program to arrive merges them; the
others wait for its flag and write their tile from registers. Programs take their tile from
a ticket (an atomic counter), so a waiting program only waits for tiles already started, and
a column block has at most as many tiles as the GPU has SMs: every tile it waits for can run.
Unlike `column_coop_gpu.py` (persistent programs, one per SM, walking column strips), the
grid is every tile: several column blocks are in flight per SM, so one block's wait overlaps
the next block's loads.

Prints the device times (triton.testing.do_bench, median) of eager, torch.compile, a plain
copy (the read-once write-once floor in practice), kopt's generated candidate when given,
and the one-read kernel at several tile shapes, with each variant's error against float64.

Usage: python benchmarks/column_ticket_gpu.py [--rows 65536] [--cols 4096] [--candidate FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _column_standardize_one_read(x_ptr, y_ptr, part_ptr, sync_ptr, M, N, n_split, n_cb, eps,
                                 BM: tl.constexpr, BC: tl.constexpr, SPLIT_P: tl.constexpr):
    t = tl.atomic_add(sync_ptr, 1)  # the ticket: tiles start in ticket order
    cb = t // n_split
    ps = t % n_split
    rows = ps * BM + tl.arange(0, BM)[:, None]
    c1 = cb * BC + tl.arange(0, BC)
    cm = c1 < N
    mask = (rows < M) & cm[None, :]
    x = tl.load(x_ptr + rows.to(tl.int64) * N + c1[None, :], mask=mask, other=0.0)
    cnt = tl.minimum(M - ps * BM, BM).to(tl.float32)
    mean_p = tl.sum(x, axis=0) / cnt
    d = tl.where(mask, x - mean_p[None, :], 0.0)
    m2_p = tl.sum(d * d, axis=0)
    stride = (n_split + 1) * N
    tl.store(part_ptr + ps * N + c1, mean_p, mask=cm)
    tl.store(part_ptr + stride + ps * N + c1, m2_p, mask=cm)
    tl.debug_barrier()
    arrived = tl.atomic_add(sync_ptr + 1 + cb, 1, sem="acq_rel")
    if arrived == n_split - 1:  # the column block's last tile: merge every tile's partials
        sp = tl.arange(0, SPLIT_P)[:, None]
        pm = (sp < n_split) & cm[None, :]
        means = tl.load(part_ptr + sp * N + c1[None, :], mask=pm, other=0.0, cache_modifier=".cg")
        m2s = tl.load(part_ptr + stride + sp * N + c1[None, :], mask=pm, other=0.0,
                      cache_modifier=".cg")
        cnts = tl.where(pm, tl.minimum(M - sp * BM, BM).to(tl.float32), 0.0)
        mean = tl.sum(means * cnts, axis=0) / M
        dm = tl.where(pm, means - mean[None, :], 0.0)
        m2 = tl.sum(m2s + cnts * dm * dm, axis=0)
        tl.store(part_ptr + n_split * N + c1, mean, mask=cm)
        tl.store(part_ptr + stride + n_split * N + c1, m2, mask=cm)
        tl.debug_barrier()
        tl.atomic_xchg(sync_ptr + 1 + n_cb + cb, 1, sem="release")
    flag = tl.atomic_add(sync_ptr + 1 + n_cb + cb, 0, sem="acquire")
    while flag == 0:
        flag = tl.atomic_add(sync_ptr + 1 + n_cb + cb, 0, sem="acquire")
    mean = tl.load(part_ptr + n_split * N + c1, mask=cm, other=0.0, cache_modifier=".cg")
    m2 = tl.load(part_ptr + stride + n_split * N + c1, mask=cm, other=0.0, cache_modifier=".cg")
    std = tl.sqrt(m2 / tl.maximum(M - 1.0, 0.0))
    y = (x - mean[None, :]) / (std[None, :] + eps)
    tl.store(y_ptr + rows.to(tl.int64) * N + c1[None, :], y, mask=mask)


def one_read(x, bm, bc, warps):
    m, n = x.shape
    n_split = triton.cdiv(m, bm)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    if n_split > sms:
        raise ValueError(f"{n_split} tiles per column block > {sms} SMs")
    n_cb = triton.cdiv(n, bc)
    y = torch.empty_like(x)
    part = torch.empty((2, n_split + 1, n), device=x.device, dtype=torch.float32)
    sync = torch.zeros(1 + 2 * n_cb, device=x.device, dtype=torch.int32)
    _column_standardize_one_read[(n_split * n_cb,)](
        x, y, part, sync, m, n, n_split, n_cb, 1e-5, BM=bm, BC=bc,
        SPLIT_P=triton.next_power_of_2(n_split), num_warps=warps)
    return y


def model(x):
    return (x - x.mean(0)) / (x.std(0) + 1e-5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--candidate", help="a kopt candidate.py (ModelNew) to time beside")
    a = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(a.rows, a.cols, device="cuda") * 3 + 5
    truth = model(x.double())
    variants = {"eager": lambda: model(x), "torch.compile": (lambda f: lambda: f(x))(torch.compile(model)),
                "x.clone()": lambda: x.clone()}
    if a.candidate:
        spec = importlib.util.spec_from_file_location("cand", a.candidate)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        cand = mod.ModelNew().cuda()
        variants["kopt as generated"] = lambda: cand(x)
    for bm, bc, w in [(512, 32, 4), (512, 32, 8), (512, 32, 16), (512, 64, 8), (512, 64, 16),
                      (1024, 16, 8), (1024, 16, 16), (1024, 32, 16), (512, 16, 4), (1024, 32, 32)]:
        variants[f"one read {bm}x{bc} w{w}"] = (lambda bm, bc, w: lambda: one_read(x, bm, bc, w))(bm, bc, w)
    floor_ms = 2 * x.numel() * 4 / 4.8e12 * 1e3
    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}; "
          f"{a.rows}x{a.cols} fp32, bytes floor at 4.8 TB/s {floor_ms:.3f} ms")
    rows = []
    for name, fn in variants.items():
        try:
            out = fn()
            torch.cuda.synchronize()
            err = (out.double() - truth).abs().max().item()
            ms = triton.testing.do_bench(fn, warmup=25, rep=300, return_mode="median")
            rows.append((name, ms, err))
        except Exception as e:  # noqa: BLE001 (a variant that fails is a row, not the end)
            rows.append((name, float("nan"), f"{type(e).__name__}: {str(e)[:120]}"))
        print(f"{name:28s} {rows[-1][1]:8.4f} ms  {floor_ms / rows[-1][1] * 100:5.1f}%  err {rows[-1][2]}",
              flush=True)
    print("\n| variant | ms | % of floor | max error vs float64 |\n|---|---:|---:|---|")
    for name, ms, err in rows:
        print(f"| {name} | {ms:.4f} | {floor_ms / ms * 100:.0f}% | {err} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
