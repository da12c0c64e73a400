"""Where a suite problem's seconds go, step by step, in one process on one GPU (no sandbox, no
verifier): import, fit to the GPU, codegen, input draw, model build, and the candidate's first
forward (Triton compile included) and later forwards, beside eager. For diagnosing a slow or
hanging problem on the device, not for figures.

Usage: python benchmarks/probe_problem.py FILE.py... [--timeout S]
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import tempfile
import time
from pathlib import Path


def _timed(label: str, fn, *args, **kw):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    print(f"  {label:<22} {time.perf_counter() - t0:8.2f} s", flush=True)
    return out


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _gpu_ms(fn, reps: int = 5) -> float:  # type: ignore[no-untyped-def]
    _sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync()
    return (time.perf_counter() - t0) / reps * 1e3


def probe(file: Path, root: Path, device: str) -> None:
    import torch

    from kopt.harness.case import load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.sizing import DEFAULT_MAX_ELEMENTS, fit_case_dir
    from kopt.phases.engineers.offline import generate_candidate

    print(f"== {file.name}", flush=True)
    out = root / file.stem
    directory = _timed("import", import_kernelbench, file, name=file.stem, out=out, report={},
                       warm=True)
    fit = _timed("fit", fit_case_dir, load_case_dir(directory), DEFAULT_MAX_ELEMENTS)
    if fit is not None:
        print(f"  scaled: {fit.note}")
    case = load_case_dir(directory)
    result = _timed("codegen", generate_candidate, case)
    cand = root / f"{file.stem}_cand.py"
    cand.write_text(result.source)
    inputs = _timed("draw inputs", agent_provide_inputs, case, "main", device=device)
    model = _timed("build eager", build_model, case, "main", device=device)
    spec = importlib.util.spec_from_file_location(f"cand_{file.stem}", cand)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    new = _timed("build candidate", build_model, case, "main", device=device, cls=module.ModelNew)
    with torch.no_grad():
        _timed("eager first forward", lambda: (model(*inputs.args), _sync()))
        _timed("kopt first forward", lambda: (new(*inputs.args), _sync()))
        eager = _gpu_ms(lambda: model(*inputs.args))
        module.KOPT_GRAPH = False  # op by op first: a graph capture that hangs shows as the next line missing
        by_op = _timed("kopt op by op x5", _gpu_ms, lambda: new(*inputs.args))
        module.KOPT_GRAPH = True
        kopt = _timed("kopt graphed x5", _gpu_ms, lambda: new(*inputs.args))
    graphs = getattr(new, "_kopt_graphs", None)
    if isinstance(graphs, dict):
        print(f"  graphs: {[v if isinstance(v, str) else type(v).__name__ for v in graphs.values()]}")
    print(f"  eager {eager:.3f} ms/forward, kopt {kopt:.3f} ms/forward ({by_op:.3f} op by op)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--device", default="cuda")
    p.add_argument("--timeout", type=int, default=120, help="seconds per problem")
    a = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kopt-probe-"))

    def stop(*_: object) -> None:
        raise TimeoutError("probe timeout")

    signal.signal(signal.SIGALRM, stop)
    for f in a.files:
        signal.alarm(a.timeout)
        try:
            probe(f, root, a.device)
        except Exception as err:  # one problem's failure: report and go on
            print(f"  FAILED: {type(err).__name__}: {str(err)[:300]}", flush=True)
        finally:
            signal.alarm(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
