"""Where the time goes, kernel by kernel: eager, torch.compile and kopt's offline candidate of
KernelBench problems, under the case's precision (fp32: TF32 off, as the harness times it).

    python benchmarks/profile_kb_gpu.py FILE.py|CASE ... [--top N] [--families]

FILE.py: a KernelBench problem file (imported as `kopt import-kernelbench` does); CASE: a
bundled case or case directory (`gpt2_block`).

Per problem: each variant's median forward (CUDA events, 50 after 10 warm-ups), then the CUDA
kernels of 10 forwards of each by total time (torch.profiler). `--families`: also the candidate
with each family of regions (every convolution template, every pooling kernel, ...) switched to
PyTorch, and op by op instead of replayed as a CUDA graph: what the suite's region search
should find, without its trial budget.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
from conv_layout_gpu import ms  # beside this script: CUDA events, median after warm-ups

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernels(fn, top: int = 6) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:top]
    return [f"{e.device_time_total / 10 / 1000:.3f} ms  {e.key[:90]}" for e in rows
            if e.device_time_total > 0]


def main() -> None:
    from kopt.harness.case import load_case, load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.verification.guards import set_precision
    from kopt.phases.engineers.offline import generate_candidate

    work = Path(tempfile.mkdtemp())
    argv = sys.argv[1:]
    top = 6
    families = "--families" in argv
    argv = [a for a in argv if a != "--families"]
    if "--top" in argv:
        at = argv.index("--top")
        top = int(argv[at + 1])
        del argv[at:at + 2]
    for f in argv:
        p = Path(f)
        if p.suffix == ".py":
            case = load_case_dir(import_kernelbench(p, name=f"p{p.stem.split('_')[0]}",
                                                    out=work / p.stem))
        else:
            case = load_case(f)
        set_precision(case.manifest.precision)
        source = generate_candidate(case).source
        cand = work / f"{p.stem}_kopt.py"
        cand.write_text(source)
        ref = build_model(case, "main").cuda()
        new = build_model(case, "main", cls=_load(cand).ModelNew).cuda()
        inputs = agent_provide_inputs(case, "main", 1, device="cuda")
        args, kwargs = inputs.args, inputs.kwargs
        with torch.no_grad():
            comp = torch.compile(ref)
            variants = {"eager": lambda: ref(*args, **kwargs), "compile": lambda: comp(*args, **kwargs),
                        "kopt": lambda: new(*args, **kwargs)}
            print(f"=== {p.stem} ({case.manifest.precision})", flush=True)
            want, got = ref(*args, **kwargs), new(*args, **kwargs)
            want, got = (want if isinstance(want, (tuple, list)) else [want],
                         got if isinstance(got, (tuple, list)) else [got])
            err = max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want))
            print(f"max abs difference kopt vs eager: {err:.3e}", flush=True)
            for name, fn in variants.items():
                print(f"{name}: {ms(fn):.3f} ms", flush=True)
                for line in kernels(fn, top):
                    print("    " + line)
            if families:
                for i, (name, text) in enumerate(_switched(source).items()):
                    alt = work / f"{p.stem}_switched{i}.py"
                    alt.write_text(text)
                    model = build_model(case, "main", cls=_load(alt).ModelNew).cuda()
                    print(f"kopt, {name}: {ms(lambda: model(*args, **kwargs)):.3f} ms", flush=True)
        torch._dynamo.reset()


def _load(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"cand_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _switched(source: str) -> dict[str, str]:
    """The candidate's source with each family of regions in PyTorch, and op by op."""
    from kopt.harness.errors import KoptError
    from kopt.phases.engineers.offline.regions import (
        GRAPH_KEY,
        apply_choices,
        region_families,
        replays_graph,
    )

    out = {}
    for family, keys in region_families(source).items():
        try:
            out[f"{family} regions in PyTorch ({len(keys)})"] = apply_choices(
                source, {k: "torch" for k in keys})
        except KoptError as err:
            print(f"  ({family}: {err})")
    if replays_graph(source):
        out["op by op"] = apply_choices(source, {GRAPH_KEY: False})
    return out


if __name__ == "__main__":
    main()
