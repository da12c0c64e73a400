"""The three patterns of issue 18's table through the offline engineer: column mean/std
standardisation, an elementwise chain over two inputs, LayerNorm(x) * silu(y). For each: the
generated candidate's kernel count, its outputs against eager, and eager / torch.compile /
kopt times (triton.testing.do_bench medians), each as % of the copy floor (bytes of the
inputs and outputs / the measured copy bandwidth: harness.roofline's ceilings, else 3000 GB/s)
and kopt's speedups. "kopt torch" is the same candidate with every region switched to its
PyTorch form (KOPT_REGIONS), what the accelerator compares each region against.

    python benchmarks/fusion_gpu.py                 # H100 sizes (the issue's table), float32
    python benchmarks/fusion_gpu.py --smoke         # tiny sizes on the CPU (Triton interpreter)

Markdown table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

_SMOKE = "--smoke" in sys.argv or not torch.cuda.is_available()
if _SMOKE:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.testing  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kopt.harness.case import load_case_dir  # noqa: E402
from kopt.harness.compare import compare_outputs  # noqa: E402
from kopt.harness.tolerance import tolerance_for  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402
from kopt.phases.engineers.offline.regions import SWITCH  # noqa: E402

# The patterns: model source (class Model), and input shapes at full and smoke size.
PATTERNS = {
    "column mean/std standardisation": (
        """
        class Model(nn.Module):
            def forward(self, x):
                return (x - x.mean(0)) / (x.std(0) + 1e-5)
        """, [[65536, 4096]], [[300, 77]]),
    "elementwise chain over two inputs": (
        """
        class Model(nn.Module):
            def __init__(self, alpha: float = 0.7):
                super().__init__()
                self.alpha = alpha

            def forward(self, a, b):
                z = a * torch.sigmoid(a) + torch.tanh(b) * self.alpha
                z = torch.clamp(z, -1.0, 2.0)
                z = torch.where(a > 0, z, z * 0.5)
                return z - b.abs().sqrt()
        """, [[16384, 8192]] * 2, [[37, 123]] * 2),
    "LayerNorm(x) * silu(y)": (
        """
        class Model(nn.Module):
            def __init__(self, hidden: int = 4096):
                super().__init__()
                self.norm = nn.LayerNorm(hidden)

            def forward(self, x, y):
                return self.norm(x) * F.silu(y)
        """, [[16384, 4096]] * 2, [[37, 123]] * 2),
}
DEFAULT_GBPS = 3000.0
"""H100 SXM copy bandwidth used when harness.roofline has no measured ceiling."""


def _case_dir(root: Path, name: str, source: str, shapes: list[list[int]], dtype: str) -> Path:
    d = root / re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40]
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.py").write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                                + textwrap.dedent(source))
    init = "{hidden: %d}" % shapes[0][-1] if "hidden" in source else "{}"
    args = "\n".join(f"    - {{shape: {s}, dtype: {dtype}}}" for s in shapes)
    (d / "manifest.yaml").write_text(f"name: fusion_{d.name}\nmodel: {{init_kwargs: {init}}}\n"
                                     f"inputs:\n  args:\n{args}\ndevice: auto\n")
    return d


def _load(source: str, path: Path):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time(fn, device: str) -> float:
    if device == "cuda":
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    fn()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _copy_gbps(device: str) -> float:
    if device != "cuda":
        return DEFAULT_GBPS
    try:
        from kopt.harness.roofline import ceilings

        return ceilings("cuda").copy_gbps or DEFAULT_GBPS
    except Exception as err:  # noqa: BLE001 - the figure is a reference, not the result
        print(f"  (no measured copy bandwidth: {err}; using {DEFAULT_GBPS:.0f} GB/s)")
        return DEFAULT_GBPS


def run(smoke: bool, dtype: str, use_compile: bool) -> list[dict]:
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    gbps = _copy_gbps(device)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (source, full, small) in PATTERNS.items():
            shapes = small if smoke else full
            case = load_case_dir(_case_dir(Path(tmp), name, source, shapes, dtype))
            t0 = time.perf_counter()
            result = generate_candidate(case)
            codegen_s = time.perf_counter() - t0
            module = _load(result.source, Path(tmp) / f"cand_{len(rows)}.py")
            gen = torch.Generator().manual_seed(0)
            torch_dtype = getattr(torch, dtype)
            inputs = [torch.randn(s, generator=gen).to(device=device, dtype=torch_dtype) for s in shapes]
            ref_mod = importlib.util.module_from_spec(
                importlib.util.spec_from_file_location("m", Path(case.directory) / "model.py"))
            ref_mod.__spec__.loader.exec_module(ref_mod)
            kwargs = {"hidden": shapes[0][-1]} if "hidden" in source else {}
            torch.manual_seed(1)
            eager = ref_mod.Model(**kwargs).to(device=device, dtype=torch_dtype).eval()
            new = module.ModelNew(**kwargs).to(device=device, dtype=torch_dtype).eval()
            new.load_state_dict(eager.state_dict())
            with torch.no_grad():
                want, got = eager(*inputs), new(*inputs)
                cmp = compare_outputs([got], [want], tolerance_for(case, want.dtype))
                nbytes = sum(t.numel() * t.element_size() for t in inputs) + want.numel() * want.element_size()
                floor = nbytes / (gbps * 1e9) * 1e3
                times = {"eager": _time(lambda: eager(*inputs), device)}
                if use_compile:
                    try:
                        compiled = torch.compile(eager)
                        compiled(*inputs)
                        times["compile"] = _time(lambda: compiled(*inputs), device)
                    except Exception as err:  # noqa: BLE001 - report and go on
                        print(f"  torch.compile failed on {name}: {type(err).__name__}: {str(err)[:120]}")
                times["kopt"] = _time(lambda: new(*inputs), device)
                switch = getattr(module, SWITCH)
                for k in switch:
                    switch[k] = "torch"
                times["kopt torch"] = _time(lambda: new(*inputs), device)
                for k in switch:
                    switch[k] = "triton"
            row = {"pattern": name, "shape": "x".join(map(str, shapes[0])), "kernels": len(result.kernels),
                   "kinds": ",".join(k["kind"] for k in result.kernels), "correct": cmp.ok,
                   "codegen_s": codegen_s, "floor_ms": floor, "times": times}
            rows.append(row)
            print(f"{name}: {row['kernels']} kernel(s) ({row['kinds']}), correct={cmp.ok}, codegen "
                  f"{codegen_s:.2f} s, " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()), flush=True)
            if not cmp.ok:
                print(textwrap.indent(cmp.to_text(), "    "))
    return rows


def table(rows: list[dict], label: str) -> str:
    cols = ["eager", "compile", "kopt", "kopt torch"]
    head = ["pattern", "shape", "kernels", "correct"] + [f"{c} ms (% floor)" for c in cols] + \
        ["vs eager", "vs compile", "codegen s"]
    out = [f"{label}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        t = r["times"]
        cells = [r["pattern"], r["shape"], str(r["kernels"]), "yes" if r["correct"] else "**NO**"]
        for c in cols:
            cells.append(f"{t[c]:.3f} ({100 * r['floor_ms'] / t[c]:.0f}%)" if c in t else "-")
        cells.append(f"{t['eager'] / t['kopt']:.2f}x")
        cells.append(f"{t['compile'] / t['kopt']:.2f}x" if "compile" in t else "-")
        cells.append(f"{r['codegen_s']:.2f}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (Triton interpreter)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (default on the CPU)")
    args = ap.parse_args()
    smoke = args.smoke or not torch.cuda.is_available()
    rows = run(smoke, args.dtype, use_compile=not args.no_compile and not smoke)
    device = torch.cuda.get_device_name() if not smoke else "CPU, Triton interpreter (times are not GPU times)"
    print()
    print(table(rows, f"{device}; torch {torch.__version__}, triton {triton.__version__}, {args.dtype}"))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
