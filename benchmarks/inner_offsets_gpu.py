"""Whether a flat pointwise kernel's per-element coordinate divisions cost it bandwidth: the
concatenation kernel that KernelBench level-3 18 (SqueezeNet) generates (`relu(a)`, `relu(b)`
concatenated over channels, 64x64x126x126 float32 each) as generated, and with each input's
offset over its trailing dims taken from the flat index (`offs - c0 * span0 - c1 * span1`,
valid where those dims are laid out as the output's) instead of `c2 * s2 + c3 * s3`, which
leaves the per-element `// D3` and `% D2` dead. Against torch.cat of the two ReLUs (eager) and
a clone of the output's bytes.

    python benchmarks/inner_offsets_gpu.py

Each figure is the kernels' own GPU time (torch.profiler, mean of 20 calls, L2 flushed before
each). For deciding whether the generator should emit such offsets, not a figure of kopt's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from candidate_module import import_source  # noqa: E402  (beside this script)
from row_tile_gpu import gpu_us  # noqa: E402

from kopt.harness.case import load_case_dir  # noqa: E402
from kopt.harness.kernelbench import import_kernelbench  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402

PROBLEM = "18_SqueezeNet.py"
KERNEL = "_g5_cat_kernel"


def main() -> int:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}",
          flush=True)
    found = [p for p in ROOT.glob(f"shared/**/{PROBLEM}")] + \
        [p for p in (ROOT.parent / "shared" / "kernelbench").glob(f"**/{PROBLEM}")]
    if not found:
        print(f"no {PROBLEM} under shared/: copy it there for the call")
        return 2
    case = load_case_dir(import_kernelbench(found[0], name="p18", out=Path(tempfile.mkdtemp()) / "p18"))
    source = generate_candidate(case).source
    gen = import_source(source, "sq_gen")
    edits = [("c0 * x0_s0 + t1 * x0_s1 + c2 * x0_s2 + c3 * x0_s3",
              "c0 * x0_s0 + t1 * x0_s1 + (offs - c0 * span0 - c1 * span1)"),
             ("c0 * x1_s0 + t4 * x1_s1 + c2 * x1_s2 + c3 * x1_s3",
              "c0 * x1_s0 + t4 * x1_s1 + (offs - c0 * span0 - c1 * span1)")]
    start = source.index(f"def {KERNEL}(")  # (the last cat kernel has the same loads)
    end = source.index("\n\n\n", start)
    body = source[start:end]
    for old, new in edits:
        assert body.count(old) == 1, old
        body = body.replace(old, new)
    patched = source[:start] + body + source[end:]
    inner = import_source(patched, "sq_inner")
    rows = []
    for shape in ((64, 64, 126, 126), (64, 192, 63, 63), (64, 256, 31, 31)):
        a = torch.randn(shape, device="cuda")
        b = torch.randn(shape, device="cuda")
        n, c, h, w = shape
        ref = torch.cat([a.relu(), b.relu()], 1)
        args = (a.device, a, b, n, 2 * c, h, w, c, c)
        out_g = gen._launch_g5(*args)[0]
        out_i = inner._launch_g5(*args)[0]
        ok = torch.equal(out_g, ref) and torch.equal(out_i, ref)
        t_gen = gpu_us(lambda: gen._launch_g5(*args))
        t_inner = gpu_us(lambda: inner._launch_g5(*args))
        t_eager = gpu_us(lambda: torch.cat([a.relu(), b.relu()], 1))
        t_cat = gpu_us(lambda: torch.cat([a, b], 1))
        t_clone = gpu_us(lambda: ref.clone())
        rows.append((shape, t_gen, t_inner, t_eager, t_cat, t_clone, ok))
        print(rows[-1], flush=True)
    print("\n| inputs | as generated us | inner offsets us | eager relu+cat us | torch.cat alone us | clone of the output us | equal |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for shape, g, i, e, c, k, ok in rows:
        print(f"| 2x{'x'.join(map(str, shape))} | {g:.1f} | {i:.1f} | {e:.1f} | {c:.1f} | {k:.1f} | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
