"""Is layernorm_gelu's offline kernel memory-bound or ALU-bound on a GPU? Times the
generated kernel against edits of it that drop work -- the GELU, then everything but the
row's loads and stores (timing only: the edited outputs are wrong on purpose) -- and
against a hand-written persistent form of the same computation (whose output must match),
at the case's full size.

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

from kopt.harness.case import load_case  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402

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


# A hand-written persistent form of the same computation, to see what the generator could
# gain: a few programs per SM, the weight and bias loaded once per program, the rows
# walked with tl.range (NUM_STAGES: the next row's load issued while this one computes).
PERSISTENT = """

@triton.jit
def _persistent_kernel(x_ptr, x_s0, w_ptr, b_ptr, y_ptr, y_s0, n_rows, n_cols,
                       BLOCK_SIZE: tl.constexpr, NUM_STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=NUM_STAGES):
        r = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r * x_s0 + cols, mask=cmask, other=0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        d = tl.where(cmask, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / n_cols
        v = d * tl.rsqrt(var + 1e-05) * w + b
        g = 0.5 * v * (1.0 + _erf(v * 0.7071067811865476))
        tl.store(y_ptr + r * y_s0 + cols, _to_bf16(g), mask=cmask)


PERSIST = {"programs": 528, "num_warps": 4, "stages": 2}


def _launch_persistent(x, w, b):
    y = torch.empty_like(x)
    n_rows, n_cols = x.shape
    _persistent_kernel[(min(n_rows, PERSIST["programs"]),)](
        x, x.stride(0), w, b, y, y.stride(0), n_rows, n_cols,
        BLOCK_SIZE=triton.next_power_of_2(n_cols), NUM_STAGES=PERSIST["stages"],
        num_warps=PERSIST["num_warps"])
    return y


class ModelNew(ModelNew):
    def forward(self, x):
        return _launch_persistent(x, self.get_parameter("norm.weight"), self.get_parameter("norm.bias"))
"""


def _persistent(programs_per_sm: int, warps: int, stages: int):
    def edit(src: str) -> str:
        return src + PERSISTENT.replace(
            'PERSIST = {"programs": 528, "num_warps": 4, "stages": 2}',
            f'PERSIST = {{"programs": {programs_per_sm} * torch.cuda.get_device_properties(0)'
            f'.multi_processor_count, "num_warps": {warps}, "stages": {stages}}}')
    edit.__name__ = f"persistent_{programs_per_sm}_{warps}_{stages}"
    return edit


EDITS.update({f"persistent, {p} programs/SM, {w} warps, {st} stages": [_persistent(p, w, st)]
              for p in (2, 4, 8) for w in (4, 8) for st in (1, 2, 3)})


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    case = load_case("layernorm_gelu")
    source = generate_candidate(case).source
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    weight, bias = torch.randn(2, 4096, device="cuda", dtype=torch.bfloat16)
    floor_ms = 2 * x.numel() * 2 / 2971e9 * 1e3
    tmp = Path(tempfile.mkdtemp())
    rows = []
    reference = None
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
            model.norm.weight.copy_(weight)
            model.norm.bias.copy_(bias)
            out = model(x)
            if reference is None:
                reference = out
            torch.cuda.synchronize()
            diff = (out.float() - reference.float()).abs().max().item()
            ms = triton.testing.do_bench(lambda m=model: m(x), warmup=100, rep=500, return_mode="median")
        rows.append((name, ms, floor_ms / ms * 100, diff))
        print(f"  {name}: {ms:.4f} ms ({floor_ms / ms * 100:.1f}% of floor), "
              f"max |diff| vs generated {diff:.3g}", flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; triton {triton.__version__}\n")
    print("| kernel | median ms | % of floor | max abs diff vs generated |\n| --- | ---: | ---: | ---: |")
    for name, ms, pct, diff in rows:
        print(f"| {name} | {ms:.4f} | {pct:.1f}% | {diff:.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
