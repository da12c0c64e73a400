"""The generated class-walk convolution kernel alone, its rank-1 loop unrolled or not.

    python benchmarks/class_walk_gpu.py

The offline engineer's candidate for a 3-channel 3x3x3 stride-2 transposed conv3d with an
epilogue (KernelBench level-2 50's shape: 128x3x16x32x32 -> 128x16x31x63x63) is generated,
then its `conv` kernel's launcher is timed alone (CUDA events, median of 30 after 5
warm-ups) under every (BLOCK_M, num_warps) of a small grid, with the OUTER loop unrolled U
times (`tl.range(..., loop_unroll_factor=U)`; the generator writes U = 2 since 2026-11-29).
cuDNN's `conv_transpose3d` is timed beside it (torch's defaults: TF32 allowed, so its
differences of ~3e-3 are cuDNN's; under a case's `strict` precision cuDNN's float32 engine
took 8.66 ms in the model's forward); the max abs difference from it is printed per row.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F
from small_conv_gpu import timed  # beside this script: CUDA events, median of 30 after 5

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(3, 16, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x) * 0.5
'''


def main() -> None:
    from kopt.harness.case import load_case_dir
    from kopt.phases.engineers.offline import generate_candidate

    work = Path(tempfile.mkdtemp())
    case_dir = work / "convt"
    case_dir.mkdir()
    (case_dir / "model.py").write_text(textwrap.dedent(MODEL))
    (case_dir / "manifest.yaml").write_text(
        "name: convt\nmodel: {module: model.py, class: Model}\n"
        "inputs:\n  args:\n    - {shape: [128, 3, 16, 32, 32], dtype: float32, init: normal}\n")
    result = generate_candidate(load_case_dir(case_dir))
    conv = next(k for k in result.kernels if k["kind"] == "conv")
    group = conv["name"].split("_")[1]
    loop = "        for k in tl.range(0, K_RED, loop_unroll_factor=2):"
    assert loop in result.source, "the OUTER loop was not generated"
    x = torch.randn(128, 3, 16, 32, 32, device="cuda")
    w = torch.randn(3, 16, 3, 3, 3, device="cuda") * 0.2
    ref = F.conv_transpose3d(x, w, None, stride=2, padding=1)
    rows = [("cuDNN conv_transpose3d", "-", "-", timed(lambda: F.conv_transpose3d(x, w, None, stride=2,
                                                                               padding=1)), 0.0)]
    print(rows[0], flush=True)
    for unroll in (1, 2, 4, 8):
        text = result.source.replace(
            loop, f"        for k in tl.range(0, K_RED, loop_unroll_factor={unroll}):")
        path = work / f"cand_{unroll}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"cand_{unroll}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        launch = getattr(mod, f"_launch_{group}")
        for block_m in (64, 128, 256):
            for warps in (4, 8):
                mod.KOPT_CONFIG[conv["name"]].update(BLOCK_M=block_m, num_warps=warps)
                try:
                    (y,) = launch("cuda", x, w)
                    torch.cuda.synchronize()
                    err = float((y - ref).abs().max())
                    t = timed(lambda: launch("cuda", x, w))  # noqa: B023 (called in this iteration)
                except Exception as e:  # noqa: BLE001
                    print(unroll, block_m, warps, "failed:", str(e).splitlines()[0], flush=True)
                    continue
                rows.append((f"generated, unroll {unroll}", block_m, warps, t, err))
                print(rows[-1], flush=True)
    print("\n| kernel | BLOCK_M | warps | ms | max abs diff |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, bm, wp, t, err in rows:
        print(f"| {name} | {bm} | {wp} | {t:.3f} | {err:.1e} |")


if __name__ == "__main__":
    main()
