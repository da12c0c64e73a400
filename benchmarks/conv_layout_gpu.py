"""Where conv2d_relu_bias's time goes on a GPU: the convolution in NCHW vs channels_last,
the layout conversions, and torch.compile's whole forward, at the case's full size.

    python benchmarks/conv_layout_gpu.py

triton.testing.do_bench medians (ms); prints a markdown table last.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton


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
