"""Whether the split outer reduction's second read of x can come from L2: the column
standardisation (65536x4096 float32) as generated, and launched strip by strip -- a strip of
column blocks small enough for L2 gets its statistics (PHASE 1) and then its map (PHASE 2)
before the next strip is touched, so PHASE 2 re-reads x from L2 instead of HBM. `paired`
launches PHASE 2 of strip s and PHASE 1 of strip s+1 as one kernel (half the launches).

    python benchmarks/column_strips_gpu.py

The kernel is the generated one with its first column block moved by a run-time offset (a
source patch); every variant runs inside one CUDA graph (what the generated forward replays),
timed with triton.testing.do_bench (its L2 flush between calls), checked against PyTorch.
For deciding whether the generator should schedule strips, not a figure of kopt's.
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

from candidate_module import import_source  # noqa: E402  (beside this script)

from kopt.harness.case import load_case  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402

CASE = ROOT / "tests" / "corpus" / "cases" / "column_standardize"
KERNEL = "_g0_mean_sub_var_kernel"


def patched(source: str) -> str:
    """The kernel with a run-time first column block (PID0) and a paired kernel beside it."""
    edits = [("    part_ptr, n_split, n_all,\n", "    part_ptr, n_split, n_all, PID0,\n"),
             ("    pid = tl.program_id(0).to(tl.int64)\n", "    pid = tl.program_id(0).to(tl.int64) + PID0\n")]
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def main() -> int:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    source = generate_candidate(load_case(str(CASE))).source
    gen = import_source(source, "col_as_generated")
    mod = import_source(patched(source), "col_strips")
    kernel = getattr(mod, KERNEL)

    @triton.jit
    def paired(x0_ptr, x0_s0, x0_s1, y0_ptr, y0_s0, y0_s1, n_cols, D1, part_ptr, n_split, n_all,
               PID0, BPS: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_C: tl.constexpr,
               EVEN: tl.constexpr, SPLIT_P: tl.constexpr):
        # programs [0, BPS): PHASE 2 of the strip at PID0; [BPS, 2 BPS): PHASE 1 of the next
        if tl.program_id(0) < BPS:
            kernel(x0_ptr, x0_s0, x0_s1, y0_ptr, y0_s0, y0_s1, n_cols, D1, part_ptr, n_split,
                   n_all, PID0, BLOCK_SIZE, BLOCK_C, False, EVEN, 2, SPLIT_P)
        else:
            kernel(x0_ptr, x0_s0, x0_s1, y0_ptr, y0_s0, y0_s1, n_cols, D1, part_ptr, n_split,
                   n_all, PID0, BLOCK_SIZE, BLOCK_C, False, EVEN, 1, SPLIT_P)

    x = torch.randn(65536, 4096, device="cuda")
    ref = (x - x.mean(0)) / (x.std(0) + 1e-5)
    rows_, cols = x.shape
    bs, bc = 64, 64
    n_blocks = cols // bc

    def strips(y, part, bps, n_split, pair, warps):
        common = (x, *x.stride(), y, *y.stride(), rows_, cols, part, n_split, cols)
        even = rows_ % (n_split * bs) == 0
        sp = triton.next_power_of_2(n_split)
        if not pair:
            for s0 in range(0, n_blocks, bps):
                for phase in (1, 2):
                    kernel[(bps, n_split)](*common, s0, BLOCK_SIZE=bs, BLOCK_C=bc, ONE_PASS=False,
                                           EVEN=even, PHASE=phase, SPLIT_P=sp, num_warps=warps)
            return
        kernel[(bps, n_split)](*common, 0, BLOCK_SIZE=bs, BLOCK_C=bc, ONE_PASS=False, EVEN=even,
                               PHASE=1, SPLIT_P=sp, num_warps=warps)
        for s0 in range(0, n_blocks - bps, bps):
            paired[(2 * bps, n_split)](*common, s0, BPS=bps, BLOCK_SIZE=bs, BLOCK_C=bc, EVEN=even,
                                       SPLIT_P=sp, num_warps=warps)
        kernel[(bps, n_split)](*common, n_blocks - bps, BLOCK_SIZE=bs, BLOCK_C=bc, ONE_PASS=False,
                               EVEN=even, PHASE=2, SPLIT_P=sp, num_warps=warps)

    def graphed(fn):
        fn()  # compile outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g

    results = []
    model = gen.ModelNew().cuda()
    out = model(x)
    model(x)
    ms = triton.testing.do_bench(lambda: model(x), rep=300)
    ok = torch.allclose(out, ref, atol=1e-3, rtol=1e-3)
    print(f"--- as generated (its own graph): {ms:.4f} ms, matches {ok}", flush=True)
    results.append(("as generated", "-", "-", ms, ok))
    for bps, n_split, pair, warps in [(64, 32, False, 4), (1, 128, False, 4), (2, 64, False, 4),
                                      (2, 128, False, 4), (1, 256, False, 4), (4, 64, False, 4),
                                      (1, 128, True, 4), (2, 64, True, 4), (2, 128, True, 4),
                                      (1, 256, True, 4), (4, 32, True, 4), (2, 128, True, 8)]:
        y = torch.empty_like(x)
        part = torch.empty((4, n_split, cols), device="cuda")
        label = f"{bps} block(s) a strip ({bps * bc * rows_ * 4 >> 20} MB), {n_split} splits" + (
            ", paired" if pair else "") + f", {warps} warps"
        try:
            g = graphed(lambda a=(y, part, bps, n_split, pair, warps): strips(*a))
            y.zero_()
            g.replay()
            torch.cuda.synchronize()
            ok = torch.allclose(y, ref, atol=1e-3, rtol=1e-3)
            ms = triton.testing.do_bench(g.replay, rep=300)
        except Exception as err:  # noqa: BLE001 - one variant failing is a row, not the end
            print(f"--- {label}: {type(err).__name__}: {str(err)[:300]}", flush=True)
            continue
        print(f"--- {label}: {ms:.4f} ms, matches {ok}", flush=True)
        results.append((label, bps, n_split, ms, ok))
    compiled = torch.compile(lambda t: (t - t.mean(0)) / (t.std(0) + 1e-5))
    compiled(x)
    ms = triton.testing.do_bench(lambda: compiled(x), rep=300)
    results.append(("torch.compile", "-", "-", ms, True))
    floor = 2 * x.numel() * 4 / 1e9  # GB: x read once, y written once
    print("\n| variant | ms | GB/s at the copy floor's bytes | matches |\n|---|---:|---:|---|")
    for label, _, _, ms, ok in results:
        print(f"| {label} | {ms:.4f} | {floor / ms * 1e3:.0f} | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
