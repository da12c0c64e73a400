"""How many short rows a generated row-reduction program should take: the layer norm that
gpt2_block's candidate generates (`_launch_g0`), launched at several widths with ROW_TILE
(elements a program covers: ROW_TILE // width rows) and num_warps swept, against F.layer_norm
eager and under torch.compile, and the copy floor (x read once, y written once).

    python benchmarks/row_tile_gpu.py

For choosing the generator's default row tile, not a figure of kopt's. Each figure is the
kernels' own GPU time (torch.profiler, mean of 20 calls, L2 flushed before each): at 10-20 us a
kernel, do_bench's per-call events time the host's launch instead (the first run of this script,
2026-11-30, read 11-119 us for one kernel depending on host jitter).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from candidate_module import import_source  # noqa: E402  (beside this script)

from kopt.harness.case import load_case  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402

KERNEL = "_g0_layer_norm_kernel"
CALLS = 20


def gpu_us(fn) -> float:
    """fn's kernels' mean GPU time per call (us), each call after an L2 flush."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as alone:
        for _ in range(CALLS):
            flush.zero_()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages())
    flushes = sum(e.device_time_total for e in alone.key_averages())
    return (total - flushes) / CALLS


def main() -> int:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}",
          flush=True)
    mod = import_source(generate_candidate(load_case("gpt2_block")).source, "gpt2_rows")
    base_warps = mod.KOPT_CONFIG[KERNEL]["num_warps"]
    print(f"as generated: ROW_TILE {mod.ROW_TILE}, num_warps {base_warps}", flush=True)
    rows_total = 8192
    table = []
    for dtype in (torch.bfloat16, torch.float32):
        for width in (384, 768, 1024, 1280, 2048):
            x = torch.randn(8, rows_total // 8, width, device="cuda", dtype=dtype)
            w = torch.randn(width, device="cuda", dtype=dtype)
            b = torch.randn(width, device="cuda", dtype=dtype)
            ref = F.layer_norm(x.float(), (width,), w.float(), b.float())
            floor_gb = 2 * x.numel() * x.element_size() / 1e9
            eager = gpu_us(lambda: F.layer_norm(x, (width,), w, b))
            comp = torch.compile(lambda t: F.layer_norm(t, (width,), w, b))
            comp(x)
            compiled = gpu_us(lambda: comp(x))
            copy = gpu_us(lambda: x.clone())
            best = None
            rows = []
            for tile in (1024, 2048, 4096, 8192, 16384):
                for warps in (1, 2, 4, 8, 16):
                    mod.ROW_TILE = tile
                    mod.KOPT_CONFIG[KERNEL]["num_warps"] = warps
                    mod.KOPT_CONFIG[KERNEL]["BLOCK_SIZE"] = 16384
                    try:
                        y, = mod._launch_g0(x.device, x, w, b)
                        ok = torch.allclose(y.float(), ref, atol=5e-2, rtol=5e-2)
                        ms = gpu_us(lambda: mod._launch_g0(x.device, x, w, b))
                    except Exception as err:  # noqa: BLE001 - a config failing is a row
                        print(f"  {dtype} {width} tile {tile} warps {warps}: {type(err).__name__}: {err}"[:200])
                        continue
                    rows.append((tile, warps, ms, ok))
                    if best is None or ms < best[2]:
                        best = (tile, warps, ms, ok)
            default = next((r for r in rows if r[0] == 2048 and r[1] == base_warps), None)
            line = (f"{str(dtype)[6:]} {rows_total}x{width}: eager X (tile {best[0]}, {best[1]} warps, matches {best[3]})")
            print(line, flush=True)
            print("   " + "  ".join(f"{t}/{wp}:{ms :.1f}" for t, wp, ms, _ in rows), flush=True)
            table.append((str(dtype)[6:], width, eager, compiled, copy, default[2], best, floor_gb))
    print("\n| dtype | rows x width | eager us | compile us | clone us | kopt default us | best us (tile, warps) |")
    print("|---|---|---:|---:|---:|---:|---|")
    for dt, width, eager, compiled, copy, default, best, _ in table:
        print(f"| {dt} | {rows_total}x{width} | {eager :.1f} | {compiled :.1f} | "
              f"{copy :.1f} | {default :.1f} | {best[2] :.1f} ({best[0]}, {best[1]}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
