"""Where conv2d_relu_bias's time goes on a GPU: the convolution in NCHW vs channels_last,
the layout conversions, and torch.compile's whole forward, at the case's full size.

    python benchmarks/conv_layout_gpu.py

triton.testing.do_bench medians (ms); prints a markdown table last. Also times a prototype
of the offline engineer's channels_last plan (x to NHWC by a Triton transpose, cuDNN conv
in channels_last without bias, one Triton epilogue reading NHWC and writing NCHW with the
conv bias, ReLU and the second bias) and prints the kernels torch.compile launches.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _to_nhwc_kernel(x_ptr, out_ptr, C, HW, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr):
    """out[n, hw, c] = x[n, c, hw]: read along hw, write along c (a tiled transpose)."""
    n = tl.program_id(2).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    hw = tl.program_id(0) * BLOCK_HW + tl.arange(0, BLOCK_HW)
    mask = (c[:, None] < C) & (hw[None, :] < HW)
    tile = tl.load(x_ptr + n * C * HW + c[:, None] * HW + hw[None, :], mask=mask)
    tl.store(out_ptr + n * C * HW + hw[None, :] * C + c[:, None], tile, mask=mask)


@triton.jit
def _epilogue_kernel(y_ptr, b_ptr, b2_ptr, out_ptr, C, HW,
                     BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr):
    """out[n, c, hw] = relu(y[n, hw, c] + b[c]) + b2[c]: y is the channels_last conv output."""
    n = tl.program_id(2).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    hw = tl.program_id(0) * BLOCK_HW + tl.arange(0, BLOCK_HW)
    mask = (hw[:, None] < HW) & (c[None, :] < C)
    y = tl.load(y_ptr + n * C * HW + hw[:, None] * C + c[None, :], mask=mask).to(tl.float32)
    b = tl.load(b_ptr + c, mask=c < C).to(tl.float32)
    b2 = tl.load(b2_ptr + c, mask=c < C).to(tl.float32)
    v = tl.maximum(y + b[None, :], 0.0) + b2[None, :]
    tl.store(out_ptr + n * C * HW + c[None, :] * HW + hw[:, None],
             v.to(out_ptr.dtype.element_ty), mask=mask)


def _prototype(x, w_cl, b, b2, bc=64, bhw=64, warps=4):
    n, c_in, h, wd = x.shape
    c_out = w_cl.shape[0]
    x_nhwc = torch.empty_like(x, memory_format=torch.channels_last)
    grid = (triton.cdiv(h * wd, bhw), triton.cdiv(c_in, bc), n)
    _to_nhwc_kernel[grid](x, x_nhwc, c_in, h * wd, BLOCK_C=bc, BLOCK_HW=bhw, num_warps=warps)
    y = F.conv2d(x_nhwc, w_cl, None, padding=1)
    assert y.is_contiguous(memory_format=torch.channels_last)
    out = torch.empty((n, c_out, h, wd), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(h * wd, bhw), triton.cdiv(c_out, bc), n)
    _epilogue_kernel[grid](y, b, b2, out, c_out, h * wd, BLOCK_C=bc, BLOCK_HW=bhw,
                           num_warps=warps)
    return out


def _compile_kernels(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total",
                                                                getattr(e, "cuda_time_total", 0)))
    return [f"{getattr(e, 'device_time_total', 0) / 5 / 1e3:.4f} ms  {e.key[:110]}"
            for e in rows[:8]]


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    dt = torch.bfloat16
    x = torch.randn(32, 256, 56, 56, device="cuda", dtype=dt)
    w = torch.randn(256, 256, 3, 3, device="cuda", dtype=dt) * 0.02
    b = torch.randn(256, device="cuda", dtype=dt)
    b2 = torch.randn(256, 1, 1, device="cuda", dtype=dt)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    y_cl = F.conv2d(x_cl, w_cl, b, padding=1)

    def eager():
        return torch.relu(F.conv2d(x, w, b, padding=1)) + b2

    compiled = torch.compile(eager)
    rows = [
        ("eager forward (NCHW)", lambda: eager()),
        ("torch.compile forward", lambda: compiled()),
        ("conv NCHW (+bias)", lambda: F.conv2d(x, w, b, padding=1)),
        ("conv NCHW no bias", lambda: F.conv2d(x, w, None, padding=1)),
        ("conv channels_last in/out (+bias)", lambda: F.conv2d(x_cl, w_cl, b, padding=1)),
        ("conv channels_last no bias", lambda: F.conv2d(x_cl, w_cl, None, padding=1)),
        ("x NCHW -> channels_last", lambda: x.contiguous(memory_format=torch.channels_last)),
        ("w -> channels_last", lambda: w.contiguous(memory_format=torch.channels_last)),
        ("y channels_last -> NCHW", lambda: y_cl.contiguous()),
        ("x.to(cl) + conv cl + relu/bias (torch ops)",
         lambda: torch.relu(F.conv2d(x.contiguous(memory_format=torch.channels_last), w_cl, b,
                                     padding=1)) + b2),
    ]
    with torch.no_grad():
        want = eager()
        for bc, bhw, warps in ((64, 64, 4), (32, 128, 4), (64, 128, 8), (128, 32, 4)):
            got = _prototype(x, w_cl, b, b2, bc, bhw, warps)
            err = (got.float() - want.float()).abs().max().item()
            print(f"  prototype {bc}x{bhw} w{warps}: max abs err {err:.4f}", flush=True)
            rows.append((f"prototype: Triton x->NHWC + conv cl no bias + Triton epilogue->NCHW "
                         f"(tile {bc}x{bhw}, {warps} warps)",
                         lambda bc=bc, bhw=bhw, warps=warps: _prototype(x, w_cl, b, b2, bc, bhw,
                                                                       warps)))
        rows.append(("Triton x->NHWC alone (64x64)", lambda: _to_nhwc_kernel[
            (triton.cdiv(56 * 56, 64), 4, 32)](x, x_cl, 256, 56 * 56, BLOCK_C=64, BLOCK_HW=64)))
    print("torch.compile's kernels (per forward):")
    for line in _compile_kernels(compiled):
        print("   ", line, flush=True)
    out = []
    for name, fn in rows:
        fn()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")
        out.append((name, ms))
        print(f"  {name}: {ms:.4f} ms", flush=True)
    print(f"\ncompiled output strides {tuple(compiled().stride())}, eager {tuple(eager().stride())}")
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; cudnn "
          f"{torch.backends.cudnn.version()}\n")
    print("| what | median ms |\n| --- | ---: |")
    for name, ms in out:
        print(f"| {name} | {ms:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
