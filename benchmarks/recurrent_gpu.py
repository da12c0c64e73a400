"""Recurrent layers as Triton kernels (`kernels/recurrent.py`) against cuDNN, model by model.

For each KernelBench-format file: import it, generate the offline candidate, then on the GPU
time eager (cuDNN's layer), torch.compile, the candidate op by op (KOPT_GRAPH False) and as
generated (one CUDA graph), with the candidate's largest error against eager; and how long
the candidate's first call under torch.compile takes (the verifier runs one; `_recurrent` is
a graph break there).

    python benchmarks/recurrent_gpu.py [--sweep | --sweep-layer] FILE.py [FILE.py ...]

`--sweep` also times the recurrent kernels' launch parameters (a grid over STEP_TUNABLES,
graphed, each against the same eager figure, with its largest error) and prints the fastest
few per problem; `--sweep-layer` the one-launch-a-layer kernels' part of that grid (W_hh read
every step or held in registers) and the default one a step. The line "SWEEP OK" ends a sweep whose every launch matched eager (errors under 1e-2).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton.testing


def _module(path: Path, name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (torch.compile imports the module of what it traces)
    spec.loader.exec_module(mod)
    return mod


def _ms(fn) -> float:  # noqa: ANN001
    return triton.testing.do_bench(fn, warmup=3, rep=400, return_mode="median")


def _sweep(cand, new, inputs, eager: float, want, layer_only: bool) -> list[tuple[float, dict]]:  # noqa: ANN001
    """The graphed forward under each step configuration, fastest first; each one's error
    against eager's output `want` printed (a launch off by more than 1e-2 is left out)."""
    import itertools

    from kopt.phases.engineers.offline.kernels.recurrent import (
        STEP_DEFAULT,
        STEP_KERNEL,
        STEP_TUNABLES,
    )
    keys = list(STEP_TUNABLES)
    grid = [dict(zip(keys, v, strict=True)) for v in itertools.product(*(STEP_TUNABLES[k] for k in keys))]
    # one configuration a launch: BH 8 is 16 but for W_hh in registers, which reads no BK chunks
    # and pipelines no inner loop (BK 64, 3 stages stand for all)
    grid = [c for c in grid if (c["BH"] >= 16 if c["LAYER"] != 2 else c["BK"] == 64 and c["num_stages"] == 3)]
    if layer_only:
        grid = [dict(STEP_DEFAULT, LAYER=0)] + [c for c in grid if c["LAYER"] and c["num_warps"] > 2
                                                and c["BK"] < 128]
    timed = []
    for cfg in grid:
        cand.KOPT_CONFIG[STEP_KERNEL] = cfg
        new._kopt_graphs.clear()
        try:
            new(*inputs)  # compiles this configuration's kernels
            got = new(*inputs)  # captures the graph
            torch.cuda.synchronize()
            err = (got.float() - want.float()).abs().max().item()
            ms = _ms(functools.partial(new, *inputs))
        except Exception as e:  # noqa: BLE001 (a launch that does not fit is one row)
            print(f"  {cfg}: {type(e).__name__}: {str(e)[:100]}", flush=True)
            continue
        print(f"  {cfg}: {ms:.3f} ms ({eager / ms:.2f}x eager), err {err:.1e}", flush=True)
        if err < 1e-2:
            timed.append((ms, cfg))
        else:
            _sweep.failed = True
    return sorted(timed, key=lambda r: r[0])


def main(files: list[str]) -> int:
    sweep = "--sweep" in files or "--sweep-layer" in files
    layer_only = "--sweep-layer" in files
    files = [f for f in files if not f.startswith("--")]
    _sweep.failed = False
    from kopt.harness.case import load_case_dir
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.phases.engineers.offline.engineer import generate_candidate

    print(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    rows = []
    for f in map(Path, files):
        tmp = Path(tempfile.mkdtemp())
        case = load_case_dir(import_kernelbench(f, name=f.stem, out=tmp / "case", report={}, warm=True))
        t0 = time.perf_counter()
        result = generate_candidate(case)
        codegen = time.perf_counter() - t0
        (tmp / "candidate.py").write_text(result.source)
        kb = _module(f, f"kb_{f.stem}")
        cand = _module(tmp / "candidate.py", f"cand_{f.stem}")
        torch.manual_seed(0)
        model = kb.Model(*kb.get_init_inputs()).cuda().eval()
        new = cand.ModelNew(*kb.get_init_inputs()).cuda().eval()
        new.load_state_dict(model.state_dict(), strict=False)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in kb.get_inputs()]
        with torch.no_grad():
            want = model(*inputs)
            got = new(*inputs)
            err = (got.float() - want.float()).abs().max().item()
            eager = _ms(functools.partial(model, *inputs))
            compiled = torch.compile(model)
            compiled(*inputs)
            comp = _ms(functools.partial(compiled, *inputs))
            cand.KOPT_GRAPH = False
            op_by_op = _ms(functools.partial(new, *inputs))
            cand.KOPT_GRAPH = True
            graphed = _ms(functools.partial(new, *inputs))
            t0 = time.perf_counter()
            torch.compile(new)(*inputs)
            cand_compile = time.perf_counter() - t0
        rows.append((f.stem, err, eager, comp, op_by_op, graphed, codegen, cand_compile))
        print(rows[-1], flush=True)
        if sweep:
            with torch.no_grad():
                best = _sweep(cand, new, inputs, eager, want, layer_only)
            print(f"{f.stem}: fastest step configurations (eager {eager:.3f} ms):")
            for ms_, cfg in best[:5]:
                print(f"  {ms_:.3f} ms {eager / ms_:.2f}x {cfg}")
    if sweep and not _sweep.failed:
        print("SWEEP OK")
    print("\n| problem | max err vs eager | eager ms | compile ms | kopt op by op ms | kopt graphed ms "
          "| vs eager | vs compile | codegen s | candidate under torch.compile, first call s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, err, eager, comp, obo, gr, cg, cc in rows:
        print(f"| {name} | {err:.1e} | {eager:.3f} | {comp:.3f} | {obo:.3f} | {gr:.3f} | "
              f"{eager / gr:.2f}x | {comp / gr:.2f}x | {cg:.1f} | {cc:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
