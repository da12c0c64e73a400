"""Whether a generated candidate's forward replays from a CUDA graph, and why not where it
does not: for each KernelBench file, codegen, build on the GPU with the verifier's launch
counter installed (as the bench and candidate jobs have it), call forward, then show each
graph key's entry; where an entry is None, capture again by hand and print the exception.
Times one forward with KOPT_GRAPH on and off, at torch's default precision (cuDNN
convolutions in TF32; the harness's jobs run the case's precision, `strict` by default, with
TF32 off), and with `--bench` through `bench_case` (the worker, the case's precision). For
diagnosis, not for figures.

Usage: python benchmarks/graph_probe_gpu.py FILE.py... [--bench]
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import traceback
from pathlib import Path

import torch


def _ms(fn, reps: int = 20) -> float:  # type: ignore[no-untyped-def]
    """Milliseconds per call, host and device (launch_gpu's loop: the device synchronised at
    the end)."""
    from launch_gpu import _per_call_us  # the script's own folder is on sys.path

    return _per_call_us(fn, reps) / 1e3


def probe(file: Path, root: Path) -> None:
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.sizing import DEFAULT_MAX_ELEMENTS, fit_case_dir
    from kopt.phases.engineers.offline import generate_candidate

    directory = import_kernelbench(file, name=file.stem, out=root / file.stem, report={},
                                   warm=True)
    fit_case_dir(load_case_dir(directory), DEFAULT_MAX_ELEMENTS)
    case = load_case_dir(directory)
    cand = root / f"{file.stem}_cand.py"
    cand.write_text(generate_candidate(case).source)
    spec = importlib.util.spec_from_file_location(f"cand_{file.stem}", cand)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = agent_provide_inputs(case, "main", device="cuda").args
    model = build_model(case, "main", device="cuda", cls=mod.ModelNew).eval()
    with torch.no_grad():
        model(*args)
        entries = list(model._kopt_graphs.values())
        print(f"{file.stem}: FORWARD_STEPS {mod.FORWARD_STEPS}, graphs "
              f"{[e if isinstance(e, str) else 'graph' for e in entries]}", flush=True)
        if entries and isinstance(entries[0], str):
            static = [a.clone() for a in args]
            print("  pays (inputs only):", mod._graph_pays(
                sum(a.numel() * a.element_size() for a in static), len(static)))
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    out = model._kopt_forward(*static)
                copied = static + mod._out_tensors(out)
                print("  capture by hand worked; pays with outputs:", mod._graph_pays(
                    sum(t.numel() * t.element_size() for t in copied), len(copied)))
            except Exception:
                traceback.print_exc(limit=6)
        on = _ms(lambda: model(*args))
        from kopt.harness.timing import time_callable

        timed = time_callable(lambda: model(*args), device="cuda")
        unflushed = time_callable(lambda: model(*args), device="cuda", flush_l2=False)
        mod.KOPT_GRAPH = False
        off = _ms(lambda: model(*args))
        print(f"  forward {on:.3f} ms with KOPT_GRAPH (harness timer: median "
              f"{timed.median_ms:.3f} ms, {unflushed.median_ms:.3f} ms without the L2 flush), "
              f"{off:.3f} ms without", flush=True)
        print(f"  graphs kept: {len(model._kopt_graphs)}", flush=True)
    if "--bench" in sys.argv:  # the same candidate through `bench_case` (worker, sandbox)
        from kopt.harness.bench import bench_case

        for r in bench_case(case, [cand], device="cuda", unverified=True):
            print(f"  bench_case {r['variant']}: {r['median_ms']} ms", flush=True)


def main() -> int:
    from kopt.harness.verification import guards

    guards.LaunchCounter().install()
    root = Path(tempfile.mkdtemp(prefix="kopt-graph-"))
    for f in [a for a in sys.argv[1:] if not a.startswith("--")]:
        try:
            probe(Path(f), root)
        except Exception:
            traceback.print_exc(limit=8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
