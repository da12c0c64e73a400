"""How far the baseline lands from its float64 result, plainly and under random rounding
(`harness.verification.rounding`), and what the random-rounding runs cost, per model.

Usage: python benchmarks/random_rounding_gpu.py [--runs N] FILE.py ...  (KernelBench-format
files: `Model`, `get_inputs`, `get_init_inputs`). On a GPU when there is one. Prints one row
per model: the plain forward's seconds, the random-rounding runs' seconds, and the relative
distances from float64 of the plain run and of the farthest random-rounding run, per output
the largest; a table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import torch

from kopt.harness.verification.rounding import farthest_runs
from kopt.harness.verification.tensors import flatten_outputs


def _distance(out: torch.Tensor, truth: torch.Tensor) -> float:
    if not out.is_floating_point():
        return 0.0
    t = truth.to(torch.float64)
    finite = torch.isfinite(t) & torch.isfinite(out)
    t = t[finite]
    return float(torch.linalg.vector_norm(out.to(torch.float64)[finite] - t)) / (
        float(torch.linalg.vector_norm(t)) or 1.0)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(file: Path, runs: int, device: str) -> dict[str, object]:
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(device).eval()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    with torch.no_grad():
        model(*inputs)  # warm
        _sync(device)
        t0 = time.perf_counter()
        plain = flatten_outputs(model(*inputs))[0]
        _sync(device)
        plain_s = time.perf_counter() - t0
        wide = module.Model(*module.get_init_inputs())
        wide.load_state_dict(model.state_dict())
        wide = wide.to(device, torch.float64).eval()
        truth = [t.to(torch.float64) for t in flatten_outputs(wide(*[
            x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in inputs]))[0]]
    t0 = time.perf_counter()
    rounded = farthest_runs(lambda: flatten_outputs(model(*inputs))[0], truth, runs)
    _sync(device)
    rr_s = time.perf_counter() - t0
    return {"model": file.stem[:34], "plain s": plain_s, "rr s": rr_s,
            "plain dist": max(_distance(o, t) for o, t in zip(plain, truth, strict=True)),
            "rr dist": max(_distance(o, t) for o, t in zip(rounded, truth, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for file in args.files:
        try:
            row = measure(file, args.runs, device)
        except Exception as err:  # noqa: BLE001 (one model's failure is its own row)
            row = {"model": file.stem[:34], "error": f"{type(err).__name__}: {err}"[:90]}
        print(row, flush=True)
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    print(f"\n{'model':34s} {'plain s':>8s} {'rr s':>8s} {'x':>6s} {'plain dist':>10s} {'rr dist':>10s}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:34s} {r['error']}")
            continue
        print(f"{r['model']:34s} {r['plain s']:8.4f} {r['rr s']:8.3f} "
              f"{r['rr s'] / max(r['plain s'], 1e-6) / args.runs:6.0f} {r['plain dist']:10.2e} {r['rr dist']:10.2e}")


if __name__ == "__main__":
    main()
