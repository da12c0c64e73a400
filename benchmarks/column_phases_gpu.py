"""The split outer reduction's two launches, each timed: the column standardisation
(65536x4096 float32) as the offline engineer generates it, and with a source patch per
hypothesis, so that a change to the generator is measured before it is made.

    python benchmarks/column_phases_gpu.py

Per variant: the forward's median (triton.testing.do_bench, launched from Python), whether it
matches PyTorch, and each launch's device time from torch.profiler (PHASE 1: the splits'
partial statistics; PHASE 2: the partials merged and the output written). Markdown table last.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from candidate_module import import_source  # noqa: E402  (beside this script)

from kopt.harness.case import load_case  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402

CASE = ROOT / "tests" / "corpus" / "cases" / "column_standardize"

PATCHES = {
    "as generated": [],
    # the masked loop with a division per element, as before whole tiles were told apart
    "EVEN off": [('EVEN=n_inner % cfg["BLOCK_C"] == 0 and', "EVEN=False and")],
    # twice the programs: 32 splits of the rows instead of 16
    "2048 programs": [("SPLIT_PROGRAMS = 1024", "SPLIT_PROGRAMS = 2048")],
    "2048 programs, EVEN off": [("SPLIT_PROGRAMS = 1024", "SPLIT_PROGRAMS = 2048"),
                                ('EVEN=n_inner % cfg["BLOCK_C"] == 0 and', "EVEN=False and")],
    "4096 programs": [("SPLIT_PROGRAMS = 1024", "SPLIT_PROGRAMS = 4096")],
    "as generated, again": [],
}


def launches(fn) -> list[float]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if e.device_type.name == "CUDA" and "kernel" in e.name]
    return [t / 1000 for t in times[-2:]]


def main() -> int:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    source = generate_candidate(load_case(str(CASE))).source
    x = torch.randn(65536, 4096, device="cuda")
    ref = (x - x.mean(0)) / (x.std(0) + 1e-5)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (what, patches) in enumerate(PATCHES.items()):
            text = source
            for old, new in patches:
                if old not in text:
                    print(f"--- {what}: patch target not found: {old}")
                    break
                text = text.replace(old, new)
            else:
                mod = import_source(text, f"candidate{i}", Path(tmp))
                mod.KOPT_GRAPH = False
                model = mod.ModelNew().cuda()
                out = model(x)
                ok = torch.allclose(out, ref, atol=1e-3, rtol=1e-3)
                ms = triton.testing.do_bench(lambda model=model: model(x), rep=200)
                phases = launches(lambda model=model: model(x))
                print(f"--- {what}: {ms:.4f} ms, matches {ok}, launches {phases}")
                rows.append((what, ms, ok, phases))
    compiled = torch.compile(lambda t: (t - t.mean(0)) / (t.std(0) + 1e-5))
    compiled(x)
    ms = triton.testing.do_bench(lambda: compiled(x), rep=200)
    print(f"--- torch.compile: {ms:.4f} ms")
    rows.append(("torch.compile", ms, True, []))
    print("\n| variant | ms | matches | PHASE 1 ms | PHASE 2 ms |\n|---|---:|---|---:|---:|")
    for what, ms, ok, phases in rows:
        p = phases + [float("nan")] * (2 - len(phases))
        print(f"| {what} | {ms:.4f} | {ok} | {p[0]:.4f} | {p[1]:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
