"""Where a small problem's candidate spends its time on a GPU: host or device, and in which
Python calls.

    python benchmarks/host_overhead_gpu.py CASE_DIR[:CANDIDATE] ...

For each case (a folder with manifest.yaml; the candidate defaults to CASE_DIR/candidate.py)
eager and the candidate are built with the same weights on the GPU at the case's `main`
inputs, then timed four ways: the harness timer (`timing.time_callable`, what `kopt suite`
reports), a loop of back-to-back calls (host-bound when the host is slower than the GPU), the
device time of one call (torch.profiler's kernels), and the loop again with kopt's launch
counter installed (as the bench job runs it). The candidate's 300 calls under cProfile print
the Python functions that cost the most. A table per case comes last.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
"""A dry run without a GPU takes the CPU (the interpreter): only to check the script."""


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _loop(fn, n: int = 300) -> float:
    _sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    _sync()
    return (time.perf_counter() - t) / n * 1e3


def _device_ms(fn, n: int = 20) -> float:
    from torch.profiler import ProfilerActivity, profile

    if DEVICE != "cuda":
        return 0.0
    _sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    total = sum(e.self_device_time_total for e in prof.key_averages())
    return total / n / 1e3


def main() -> int:
    from kopt.harness import timing
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.jobs.candidate import _load_candidate
    from kopt.harness.verification import guards

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args()
    table = []
    built = []
    for item in args.cases:
        case_dir, _, cand = item.partition(":")
        case = load_case_dir(Path(case_dir))
        guards.set_precision(case.manifest.precision)
        ref = build_model(case, "main", device=DEVICE)
        new = build_model(case, "main", device=DEVICE,
                          cls=_load_candidate(Path(cand or Path(case_dir) / "candidate.py")))
        inputs = agent_provide_inputs(case, "main", device=DEVICE)

        def call(m, inputs=inputs):
            def fn():
                with torch.no_grad():
                    return m(*inputs.args, **inputs.kwargs)
            return fn

        eager, cand_fn = call(ref), call(new)
        for _ in range(5):
            eager(), cand_fn()
        _sync()
        g = type(new)._kopt_forward.__globals__  # the candidate module's globals
        row = {"case": case.name, "graphs": "; ".join(
            v if isinstance(v, str) else "graph" for v in new._kopt_graphs.values())}
        row["timer eager"] = timing.time_callable(eager, device=DEVICE).median_ms
        row["timer kopt"] = timing.time_callable(cand_fn, device=DEVICE).median_ms
        row["loop eager"] = _loop(eager)
        row["loop kopt"] = _loop(cand_fn)
        row["device eager"] = _device_ms(eager)
        row["device kopt"] = _device_ms(cand_fn)
        args0 = tuple(inputs.args)
        t = time.perf_counter()
        for _ in range(1000):
            g["_graph_key"](new, args0)
        row["graph key us"] = (time.perf_counter() - t) * 1e3  # ms per 1000 = us per call
        # the same forward op by op, then replayed from a graph whatever the estimate says
        g["KOPT_GRAPH"] = False
        row["loop kopt op by op"] = _loop(cand_fn)
        row["timer kopt op by op"] = timing.time_callable(cand_fn, device=DEVICE).median_ms
        g["KOPT_GRAPH"] = True
        pays = g["_graph_pays"]
        g["_graph_pays"] = lambda *a: True
        new._kopt_graphs.clear()
        for _ in range(3):
            cand_fn()
        row["graphs forced"] = "; ".join(
            v if isinstance(v, str) else "graph" for v in new._kopt_graphs.values())
        row["loop kopt graph"] = _loop(cand_fn)
        row["timer kopt graph"] = timing.time_callable(cand_fn, device=DEVICE).median_ms
        row["device kopt graph"] = _device_ms(cand_fn)
        config = g["KOPT_CONFIG"]
        tunables = g["KOPT_TUNABLES"]
        libs = [k for k in config if "cublas" in (tunables.get(k) or {}).get("BACKEND", [])]
        if libs:
            for k in libs:
                config[k]["BACKEND"] = "cublas"
            new._kopt_graphs.clear()
            for _ in range(3):
                cand_fn()
            row["timer kopt graph cublas"] = timing.time_callable(cand_fn, device=DEVICE).median_ms
            row["device kopt graph cublas"] = _device_ms(cand_fn)
            g["_graph_pays"] = pays
            new._kopt_graphs.clear()
            for _ in range(3):
                cand_fn()
            row["timer kopt cublas"] = timing.time_callable(cand_fn, device=DEVICE).median_ms
        else:
            row["timer kopt graph cublas"] = row["device kopt graph cublas"] = 0.0
            row["timer kopt cublas"] = 0.0
        g["_graph_pays"] = pays
        new._kopt_graphs.clear()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            cand_fn()
        _sync()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
        print(f"=== {case.name}: cProfile of 300 candidate calls\n"
              + "\n".join(s.getvalue().splitlines()[:40]))
        table.append(row)
        print(row, flush=True)
        built.append((row, eager, cand_fn))
    # the launch counter as the bench job installs it (it stays installed: a second pass)
    counter = guards.LaunchCounter()
    counter.install()
    for row, eager, cand_fn in built:
        row["loop eager, counter"] = _loop(eager)
        row["loop kopt, counter"] = _loop(cand_fn)
        row["timer kopt, counter"] = timing.time_callable(cand_fn, device=DEVICE).median_ms
    keys = [k for k in table[0] if k not in ("case", "graphs", "graphs forced")]
    print("| measure (ms; graph key: us) | " + " | ".join(r["case"] for r in table) + " |")
    print("|---|" + "---:|" * len(table))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{r.get(k, 0.0):.4f}" for r in table) + " |")
    print("| graphs as generated | " + " | ".join(r["graphs"][:60] for r in table) + " |")
    print("| graphs forced | " + " | ".join(r["graphs forced"][:200] for r in table) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
