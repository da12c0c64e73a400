"""Is layernorm_gelu's offline kernel memory-bound or ALU-bound on a GPU? Times the
generated kernel against edits of it that drop work (timing only: the edited outputs are
wrong on purpose), at the case's full size.

    python benchmarks/lngelu_gpu.py

triton.testing.do_bench medians; % of the copy floor at 2971 GB/s; markdown table last.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.case import load_case  # noqa: E402
from phases.engineers.offline import generate_candidate  # noqa: E402

ERF = "(0.5 * v16 * (1.0 + tl.erf(v16 * 0.7071067811865476)))"
WARPS = 'cfg["num_warps"] = max(4, min(cfg["num_warps"], block // 1024))'
EDITS = {
    "as generated": [],
    "no erf (gelu -> identity)": [(ERF, "v16")],
    "erf via exp (A&S 7.1.26)": [(ERF, "(0.5 * v16 * (1.0 + _erf_as(v16 * 0.7071067811865476)))")],
    "num_warps 8": [(WARPS, 'cfg["num_warps"] = 8')],
    "num_warps 2": [(WARPS, 'cfg["num_warps"] = 2')],
}
ERF_AS = '''
@triton.jit
def _erf_as(x):
    a = tl.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    r = 1.0 - p * tl.exp(-a * a)
    return tl.where(x < 0, -r, r)

'''


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    case = load_case("layernorm_gelu")
    source = generate_candidate(case).source
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    floor_ms = 2 * x.numel() * 2 / 2971e9 * 1e3
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for name, edits in EDITS.items():
        src = source
        for old, new in edits:
            assert old in src, (name, old)
            src = src.replace(old, new)
        if "_erf_as" in src:
            src = src.replace("@triton.jit\ndef _to_bf16", ERF_AS + "@triton.jit\ndef _to_bf16")
        path = tmp / f"v{len(rows)}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        model = mod.ModelNew().cuda()
        with torch.no_grad():
            model.norm.weight.normal_()
            model.norm.bias.normal_()
            model(x)
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(lambda: model(x), warmup=100, rep=500, return_mode="median")
        rows.append((name, ms, floor_ms / ms * 100))
        print(f"  {name}: {ms:.4f} ms ({floor_ms / ms * 100:.0f}% of floor)", flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; triton {triton.__version__}\n")
    print("| kernel | median ms | % of floor |\n| --- | ---: | ---: |")
    for name, ms, pct in rows:
        print(f"| {name} | {ms:.4f} | {pct:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
