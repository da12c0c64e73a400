"""Two products of one input that meet only in a pointwise join (a gated MLP's
`silu(x @ W1^T) * (x @ W3^T)`): cuBLAS with the weights side by side plus a join kernel,
against one Triton kernel holding both accumulators and writing only the joined tile.

    python benchmarks/dual_gemm_gpu.py [--m 1024] [--k 4096] [--n 11008]

The question (issue 20, LLaMA's block at 1.02x torch.compile, 1.05x wanted): whether the
gate/up products' 45 MB written and read back, and the join's launch, are worth more than
what a Triton product gives up against cuBLAS at these sizes. bf16 inputs, float32
accumulators; each variant replayed as a CUDA graph of 10 calls (do_bench median per call),
checked against eager. Markdown table last.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
import triton.testing


@triton.jit
def _join_kernel(h_ptr, o_ptr, N, total, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < total
    row, col = i // N, i % N
    g = tl.load(h_ptr + row * 2 * N + col, mask=mask).to(tl.float32)
    u = tl.load(h_ptr + row * 2 * N + N + col, mask=mask).to(tl.float32)
    tl.store(o_ptr + i, (g / (1 + tl.exp(-g)) * u).to(tl.bfloat16), mask=mask)


@triton.jit
def _dual_ptr_kernel(x_ptr, w_ptr, o_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = x_ptr + rm[:, None] * K + rk[None, :]
    g_ptrs = w_ptr + rn[None, :] * K + rk[:, None]
    u_ptrs = g_ptrs + N * K
    acc_g = tl.zeros((BM, BN), tl.float32)
    acc_u = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, K, BK):
        a = tl.load(a_ptrs)
        acc_g = tl.dot(a, tl.load(g_ptrs), acc_g)
        acc_u = tl.dot(a, tl.load(u_ptrs), acc_u)
        a_ptrs += BK
        g_ptrs += BK
        u_ptrs += BK
    out = acc_g / (1 + tl.exp(-acc_g)) * acc_u
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], out.to(tl.bfloat16))


@triton.jit
def _dual_tma_kernel(x_ptr, w_ptr, o_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr, GROUP_M: tl.constexpr, STAGES: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [K, 1], [BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, [2 * N, K], [K, 1], [BN, BK])
    o_desc = tl.make_tensor_descriptor(o_ptr, [M, N], [N, 1], [BM, BN])
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    off_m, off_n = pid_m * BM, pid_n * BN
    acc_g = tl.zeros((BM, BN), tl.float32)
    acc_u = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = x_desc.load([off_m, k])
        acc_g = tl.dot(a, w_desc.load([off_n, k]).T, acc_g)
        acc_u = tl.dot(a, w_desc.load([N + off_n, k]).T, acc_u)
    out = acc_g / (1 + tl.exp(-acc_g)) * acc_u
    o_desc.store([off_m, off_n], out.to(tl.bfloat16))


@triton.jit
def _dual_persistent_kernel(x_ptr, w_ptr, o_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                            BK: tl.constexpr, GROUP_M: tl.constexpr, STAGES: tl.constexpr,
                            SMS: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [K, 1], [BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, [2 * N, K], [K, 1], [BN, BK])
    o_desc = tl.make_tensor_descriptor(o_ptr, [M, N], [N, 1], [BM, BN])
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    tiles = num_m * num_n
    in_group = GROUP_M * num_n
    for tile in tl.range(tl.program_id(0), tiles, SMS, flatten=False):
        first_m = (tile // in_group) * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (tile % in_group) % size_m
        pid_n = (tile % in_group) // size_m
        off_m, off_n = pid_m * BM, pid_n * BN
        acc_g = tl.zeros((BM, BN), tl.float32)
        acc_u = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES):
            a = x_desc.load([off_m, k])
            acc_g = tl.dot(a, w_desc.load([off_n, k]).T, acc_g)
            acc_u = tl.dot(a, w_desc.load([N + off_n, k]).T, acc_u)
        out = acc_g / (1 + tl.exp(-acc_g)) * acc_u
        o_desc.store([off_m, off_n], out.to(tl.bfloat16))


@triton.jit
def _interleaved_kernel(x_ptr, w_ptr, o_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr, GROUP_M: tl.constexpr, STAGES: tl.constexpr,
                        SMS: tl.constexpr, WS: tl.constexpr):
    """One accumulator over weights interleaved row by row (gate j, up j): the tile's even
    columns are gate, its odd ones up; BN columns of product, BN // 2 of output."""
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [K, 1], [BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, [2 * N, K], [K, 1], [BN, BK])
    o_desc = tl.make_tensor_descriptor(o_ptr, [M, N], [N, 1], [BM, BN // 2])
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(2 * N, BN)
    tiles = num_m * num_n
    in_group = GROUP_M * num_n
    for tile in tl.range(tl.program_id(0), tiles, SMS, flatten=False):
        first_m = (tile // in_group) * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (tile % in_group) % size_m
        pid_n = (tile % in_group) // size_m
        off_m, off_n = pid_m * BM, pid_n * BN
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.range(0, K, BK, num_stages=STAGES, warp_specialize=WS):
            acc = tl.dot(x_desc.load([off_m, k]), w_desc.load([off_n, k]).T, acc)
        g, u = tl.split(tl.reshape(acc, (BM, BN // 2, 2)))
        out = g / (1 + tl.exp(-g)) * u
        o_desc.store([off_m, off_n // 2], out.to(tl.bfloat16))


def graphed(fn) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            fn()
    return triton.testing.do_bench(graph.replay, rep=300) / 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=11008)
    ap.add_argument("--quick", action="store_true", help="skip the first round's variants")
    a = ap.parse_args()
    M, K, N = a.m, a.k, a.n
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                  device="cuda"))
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(2 * N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5).contiguous()
    w1, w3 = w[:N], w[N:]
    want = torch.nn.functional.silu(x @ w1.t()) * (x @ w3.t())
    h = torch.empty(M, 2 * N, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    rows: list[tuple[str, float, str]] = []

    def check(name: str, fn) -> None:
        try:
            fn()
            torch.cuda.synchronize()
            err = (out.float() - want.float()).abs().max().item()
            ok = torch.allclose(out.float(), want.float(), atol=3e-2, rtol=3e-2)
            ms = graphed(fn)
            rows.append((name, ms, f"max err {err:.3g}" + ("" if ok else " WRONG")))
        except Exception as err:  # noqa: BLE001 (a config that does not compile is a row)
            rows.append((name, float("nan"), f"{type(err).__name__}: {str(err)[:120]}"))
        print(rows[-1], flush=True)

    total = M * N

    def cublas_two() -> None:
        torch.mm(x, w1.t(), out=h[:, :N])
        torch.mm(x, w3.t(), out=h[:, N:])

    def cublas_cat() -> None:
        torch.mm(x, w.t(), out=h)

    def join() -> None:
        _join_kernel[(triton.cdiv(total, 1024),)](h, out, N, total, BLOCK=1024)

    rows.append(("cuBLAS, one product N=2x" + str(N), graphed(cublas_cat), "product only"))
    rows.append(("cuBLAS, two products", graphed(lambda: (torch.mm(x, w1.t()), torch.mm(x, w3.t()))),
                 "products only"))
    check("cuBLAS side by side + join kernel", lambda: (cublas_cat(), join()))
    rows.append(("join kernel alone", graphed(join), ""))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    w_il = torch.stack([w1, w3], dim=1).reshape(2 * N, K).contiguous()
    for bm, bn, bk, st, wp, gm, ws in [(128, 256, 64, 3, 8, 8, False), (128, 256, 64, 4, 8, 8, False),
                                       (128, 256, 64, 3, 8, 8, True), (128, 128, 64, 4, 8, 8, False),
                                       (128, 128, 64, 4, 4, 8, False), (128, 256, 64, 3, 8, 4, False),
                                       (128, 256, 64, 3, 8, 16, False), (256, 128, 64, 3, 8, 8, False),
                                       (128, 128, 128, 3, 8, 8, False), (128, 256, 32, 5, 8, 8, False)]:
        tiles = triton.cdiv(M, bm) * triton.cdiv(2 * N, bn)
        for persistent in (True, False):
            grid = (min(sms, tiles),) if persistent else (tiles,)
            progs = sms if persistent else tiles
            check(f"Triton interleaved{' persistent' if persistent else ''} {bm}x{bn}x{bk} s{st} "
                  f"w{wp} g{gm}{' ws' if ws else ''}",
                  lambda: _interleaved_kernel[grid](x, w_il, out, M, N, K, BM=bm, BN=bn, BK=bk,
                                                    GROUP_M=gm, STAGES=st, SMS=progs, WS=ws,
                                                    num_warps=wp))
    for bm, bn, bk, st, wp, gm in [(128, 128, 64, 4, 8, 8), (128, 128, 64, 3, 8, 4), (128, 128, 64, 3, 8, 16)]:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        check(f"Triton dual, TMA persistent {bm}x{bn}x{bk} s{st} w{wp} g{gm}",
              lambda: _dual_persistent_kernel[(min(sms, tiles),)](
                  x, w, out, M, N, K, BM=bm, BN=bn, BK=bk, GROUP_M=gm, STAGES=st, SMS=sms,
                  num_warps=wp))
    for bm, bn, bk, st, wp, gm in [] if a.quick else [(128, 64, 64, 4, 8, 8), (128, 128, 64, 3, 8, 8),
                                   (128, 64, 64, 3, 4, 8), (64, 128, 64, 4, 4, 8),
                                   (128, 128, 32, 4, 8, 8), (128, 64, 128, 3, 8, 8),
                                   (256, 64, 64, 3, 8, 8)]:
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        check(f"Triton dual, pointers {bm}x{bn}x{bk} s{st} w{wp}",
              lambda: _dual_ptr_kernel[grid](x, w, out, M, N, K, BM=bm, BN=bn, BK=bk,
                                             GROUP_M=gm, num_stages=st, num_warps=wp))
        check(f"Triton dual, TMA {bm}x{bn}x{bk} s{st} w{wp}",
              lambda: _dual_tma_kernel[grid](x, w, out, M, N, K, BM=bm, BN=bn, BK=bk,
                                             GROUP_M=gm, STAGES=st, num_warps=wp))
    for bm, bn, bk, st, wp in [] if a.quick else [(128, 64, 64, 4, 8), (128, 128, 64, 3, 8), (128, 64, 64, 3, 4)]:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        check(f"Triton dual, TMA persistent {bm}x{bn}x{bk} s{st} w{wp}",
              lambda: _dual_persistent_kernel[(min(sms, tiles),)](
                  x, w, out, M, N, K, BM=bm, BN=bn, BK=bk, GROUP_M=8, STAGES=st, SMS=sms,
                  num_warps=wp))
    flops = 2 * M * K * 2 * N
    print(f"\nM={M} K={K} N={N} ({torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"triton {triton.__version__})\n")
    print("| variant | ms | TFLOP/s | note |\n| --- | ---: | ---: | --- |")
    for name, ms, note in rows:
        print(f"| {name} | {ms:.4f} | {flops / ms / 1e9:.0f} | {note} |")


if __name__ == "__main__":
    main()
