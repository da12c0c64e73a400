"""On a GPU: verification catches work hidden from the timer, and the honest candidates' bench.

    python benchmarks/verify_gpu.py [--part verify|bench|all] [--no-compile]

Part `verify` verifies three GPU cheats against the bundled `layernorm_gelu` case (16384x4096
bf16) and then times them with `--unverified` to show the bench refuses them too:
  - side_stream: the kernel runs on a side stream the caller's stream never waits for;
  - returns_before_done: a long spin then the kernel, queued on a side stream, so forward
    returns long before its output exists;
  - deferred_thread: forward returns a buffer and a Python thread launches the kernel later.
Part `bench` runs `kopt bench` on the honest corpus candidates (layernorm_gelu, softmax,
rmsnorm). Prints markdown tables last (for BENCHMARKS.md). Writes only under a temp dir.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HONEST = ROOT / "tests" / "corpus" / "honest"

KERNEL = '''
import threading
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = xc * rstd * w + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(y_ptr + row * cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def launch(x, w, b, eps, y):
    cols = x.shape[-1]
    _ln_gelu_kernel[(x.numel() // cols,)](x, w, b, y, cols, eps, BLOCK=triton.next_power_of_2(cols))


class Base(nn.Module):
    def __init__(self, hidden: int = 4096):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
'''

CHEATS = {
    "side_stream": KERNEL + '''

class ModelNew(Base):
    def forward(self, x):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            y = torch.empty_like(x)
            launch(x, self.norm.weight, self.norm.bias, self.norm.eps, y)
        return y
''',
    "returns_before_done": KERNEL + '''

class ModelNew(Base):
    def forward(self, x):
        y = torch.empty_like(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # ~10 ms of spinning before the real work
            launch(x, self.norm.weight, self.norm.bias, self.norm.eps, y)
        return y
''',
    "deferred_thread": KERNEL + '''

class ModelNew(Base):
    def forward(self, x):
        y = torch.empty_like(x)
        w, b, eps = self.norm.weight, self.norm.bias, self.norm.eps

        def later():
            import time
            time.sleep(0.002)
            launch(x, w, b, eps, y)

        threading.Thread(target=later).start()
        return y
''',
}

BENCHES = [
    ("layernorm_gelu", ["layernorm_gelu.py", "layernorm_gelu_two_kernels.py"]),
    ("softmax", ["softmax.py"]),
    ("rmsnorm", ["rmsnorm.py", "rmsnorm_partial_fusion.py"]),
]


def _fmt(v: object, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def part_verify(tmp: Path, lines: list[str], device: str = "cuda", case: str = "layernorm_gelu") -> None:
    from kopt.harness.bench import bench_case
    from kopt.harness.verify import verify_candidate

    lines += ["", "### GPU cheats (layernorm_gelu, 16384x4096 bf16)", "",
              "| candidate | verify | failed checks | first failure | bench --unverified | verify s |",
              "| --- | --- | --- | --- | --- | --- |"]
    files = []
    for name, source in CHEATS.items():
        path = tmp / f"{name}.py"
        path.write_text(source)
        files.append(path)
    for path in files:
        t0 = time.monotonic()
        report = verify_candidate(case, path, device=device)
        took = time.monotonic() - t0
        print(report.to_text(), flush=True)
        failed = [c for c in report.checks if not c.passed]
        first = failed[0].detail[:140].replace("|", "/") if failed else ""
        rows = bench_case(case, [path], device=device, unverified=True, baselines=("eager",))
        cand = rows[-1]
        bench = (f"timed {cand['median_ms']:.4f} ms (NOT CAUGHT)" if cand["median_ms"]
                 else (cand.get("note") or "")[:140].replace("|", "/"))
        lines.append(f"| {path.stem} | {'accepted (NOT CAUGHT)' if report.accepted else 'rejected'} "
                     f"| {', '.join(c.name for c in failed)} | {first} | {bench} | {took:.1f} |")


def part_bench(lines: list[str], compile_row: bool, device: str = "cuda",
               benches: list[tuple[str, list[str]]] = BENCHES) -> None:
    from kopt.harness.bench import bench_case

    for case, names in benches:
        t0 = time.monotonic()
        rows = bench_case(case, [HONEST / n for n in names], device=device,
                          baselines=("eager", "compile") if compile_row else ("eager",))
        lines += ["", f"### kopt bench {case} (main inputs, H100, {time.monotonic() - t0:.0f} s)", "",
                  "| variant | median ms | p20-p80 ms | GB/s | TFLOP/s | % of floor | vs eager "
                  "| vs compile | verified | note |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            lines.append(
                f"| {r['variant']} | {_fmt(r['median_ms'], '.4f')} | {_fmt(r['p20_ms'], '.4f')}-"
                f"{_fmt(r['p80_ms'], '.4f')} | {_fmt(r['gbps'], '.0f')} | {_fmt(r['tflops'], '.2f')} "
                f"| {_fmt(r['pct_of_floor'], '.0f')} | {_fmt(r['speedup_vs_eager'], '.2f')} "
                f"| {_fmt(r['speedup_vs_compile'], '.2f')} | {r['verified']} "
                f"| {(r.get('note') or '')[:120].replace('|', '/')} |")
        print("\n".join(lines[-len(rows) - 4:]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["verify", "bench", "all"], default="all")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile rows")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    lines: list[str] = [f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}"]
    with tempfile.TemporaryDirectory(prefix="kopt-verify-gpu-") as tmp:
        os.environ["KOPT_HOME"] = tmp
        os.chdir(tmp)
        if args.part in ("verify", "all"):
            part_verify(Path(tmp), lines)
        if args.part in ("bench", "all"):
            part_bench(lines, not args.no_compile)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
