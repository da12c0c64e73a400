"""Is layernorm_gelu's offline kernel memory-bound or ALU-bound on a GPU? Times the
generated kernel against edits of it that drop work -- the GELU, then everything but the
row's loads and stores (timing only: the edited outputs are wrong on purpose) -- at the
case's full size.

    python benchmarks/lngelu_gpu.py

triton.testing.do_bench medians; % of the copy floor at 2971 GB/s; markdown table last.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.case import load_case  # noqa: E402
from phases.engineers.offline import generate_candidate  # noqa: E402

GELU = re.compile(r"\((0\.5 \* (v\d+) \* \(1\.0 \+ _erf\(\2 \* 0\.7071067811865476\)\))\)")
STORE = re.compile(r"_to_bf16\((v\d+)\), mask=cmask\)")
LOAD = re.compile(r"(x\d+) = tl\.load\(x0_ptr")


def _no_gelu(src: str) -> str:
    """GELU -> identity: what the normalisation alone costs."""
    return GELU.sub(lambda m: m.group(2), src, count=1)


def _copy_only(src: str) -> str:
    """Store the loaded row as it is (the compiler drops the rest): what a one-row-per-program
    kernel of this shape can reach at all."""
    x = LOAD.search(src).group(1)
    return STORE.sub(f"{x}.to(tl.bfloat16), mask=cmask)", src, count=1)


def _warps(n: int):
    def edit(src: str) -> str:
        return re.sub(r'("_g0_layer_norm_gelu_kernel": \{"BLOCK_SIZE": \d+, "num_warps": )\d+',
                      lambda m: m.group(1) + str(n), src, count=1)
    return edit


EDITS = {
    "as generated": [],
    "no GELU (normalisation only)": [_no_gelu],
    "copy only (loads and stores of the kernel)": [_copy_only],
    "copy only, 8 warps": [_copy_only, _warps(8)],
}


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
        for edit in edits:
            edited = edit(src)
            assert edited != src, (name, edit.__name__)
            src = edited
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
            ms = triton.testing.do_bench(lambda m=model: m(x), warmup=100, rep=500, return_mode="median")
        rows.append((name, ms, floor_ms / ms * 100))
        print(f"  {name}: {ms:.4f} ms ({floor_ms / ms * 100:.0f}% of floor)", flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; triton {triton.__version__}\n")
    print("| kernel | median ms | % of floor |\n| --- | ---: | ---: |")
    for name, ms, pct in rows:
        print(f"| {name} | {ms:.4f} | {pct:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
