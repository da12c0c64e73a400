"""A generator rule on and off, kernel by kernel: each case's candidate generated as is and
with one rule switched off, then each generated kernel's device time per forward (and the
library calls' total) side by side.

    python benchmarks/kernel_ab_gpu.py --without RULE CASE|FILE.py ...

RULE: `walk` (a kernel laid out like a permuted view walks that view's memory order),
`static` (sizes fixed in the program passed as constexprs), `siblings` (products of one
activation as one product over their weights side by side), `tileflat` (a tiled reduction reads
and writes two or more contiguous dims after its reduced one at the tile's column index, not at
coordinates divided out of it), `dynamic` (sizes a symbolic export
leaves to run time: every kernel's domain sizes and element count made constexprs by a source
edit, a measurement of what run-time sizes cost, not a generator rule), `narrowrows` (a row
reduction narrower than 16 elements takes only the next power of two of lanes, not 16: a
source edit of MIN_ROW_BLOCK), `uninit` (an `empty*` allocation lowered to a constant 0: nothing
allocated or read for it), `narrowtake` (a take whose index is recomputed from coordinates
stays in the kernel's index type, not cast to int64), `sharedq` (a strided slice assignment with
a constant start takes its source at o // step - start // step, not (o - start) // step: two
interleaved assignments share their loads), `nonneg` (a take at an index that is >= 0 by
construction skips the wrap of negative indices), `pairs` (a pointwise kernel whose takes have
the same index for both elements of a last-dim pair walks that dim in pairs), `interleave` (a view
merging the last two dims of a stack or a repeat along a new last dim lowered as strided
assignments). CASE: a bundled case or case
directory; FILE.py: a KernelBench problem (imported as `kopt import-kernelbench` does). Each
forward launched op by op (no CUDA graph), 20 forwards profiled (torch.profiler); the whole
forward's device time is the sum over its kernels; the two variants alternate for `--rounds`
rounds and each kernel's median is reported. Markdown table last.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _from_rel(b, idx, rel, lo, step, name, origin):
    """A strided assignment's source index from o - start (before `sharedq`)."""
    return b.op(f"{name}_q", "truediv_trunc", [rel, step], idx, origin=origin)


def _switches() -> dict[str, tuple[object, str, object]]:
    """Each generator rule: (where it lives, its name there, what stands in for it off)."""
    from kopt.phases.engineers.offline import capture, scatter, sibling_products
    from kopt.phases.engineers.offline.kernels import pointwise, reduction, writer

    return {
        "walk": (pointwise, "memory_walk", lambda group: None),
        "static": (writer, "static_sizes", lambda group: set()),
        "siblings": (sibling_products, "fuse_sibling_products", lambda g: []),
        "tileflat": (reduction._ReductionWriter, "flat_inner", lambda self: False),
        "uninit": (capture, "UNINITIALIZED", frozenset()),
        "narrowtake": (writer._Writer, "take_in_index_type", lambda self, t, op: False),
        "sharedq": (scatter, "slice_index", _from_rel),
        "nonneg": (writer, "nonnegative", lambda v: False),
        "pairs": (pointwise, "_pair_body", lambda w, group: None),
        "interleave": (capture, "lower_interleave_view", lambda *args: None),
    }


@contextlib.contextmanager
def without(rule: str) -> Iterator[None]:
    if rule in ("dynamic", "narrowrows"):  # a source edit after generation (edit_source)
        yield
        return
    switches = _switches()
    if rule not in switches:
        raise SystemExit(f"unknown rule {rule!r}: {', '.join(switches)}, dynamic or narrowrows")
    owner, name, off = switches[rule]
    with mock.patch.object(owner, name, off):
        yield


def edit_source(rule: str, source: str) -> str:
    """The generated source as `without(rule)` measures it: for `dynamic`, every run-time
    size parameter of a kernel (`D0,`, `n_elements,` alone on their line) a constexpr."""
    if rule == "narrowrows":  # rows narrower than 16 take 16 lanes, as before MIN_ROW_BLOCK
        return source.replace("MIN_ROW_BLOCK = 2\n", "MIN_ROW_BLOCK = 16\n")
    if rule != "dynamic":
        return source
    import re

    return re.sub(r"^(\s+)(D\d+|n_elements|n_rows|n_cols),$", r"\1\2: tl.constexpr,", source,
                  flags=re.M)


def kernel_times(fn) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        if e.device_time_total <= 0:
            continue
        key = e.key if e.key.startswith("_g") else "library and copies (sum)"
        out[key] = out.get(key, 0.0) + e.device_time_total / 20 / 1000
    return out


def main() -> int:
    from candidate_module import import_source  # beside this script

    from kopt.harness.case import load_case, load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.verification.guards import set_precision
    from kopt.phases.engineers.offline import generate_candidate

    ap = argparse.ArgumentParser()
    ap.add_argument("--without", required=True, choices=[*_switches(), "dynamic", "narrowrows"])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per variant (median)")
    ap.add_argument("cases", nargs="+")
    opts = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    work = Path(tempfile.mkdtemp())
    rows = []
    for arg in opts.cases:
        p = Path(arg)
        if p.suffix == ".py":
            case = load_case_dir(import_kernelbench(p, name=f"p{p.stem.split('_')[0]}", out=work / p.stem))
        else:
            case = load_case(arg)
        set_precision(case.manifest.precision)
        ref = build_model(case, "main", device="cuda")
        args = agent_provide_inputs(case, "main", 0, device="cuda").args
        models = {}
        for label in ("as generated", f"without {opts.without}"):
            with contextlib.nullcontext() if label == "as generated" else without(opts.without):
                source = generate_candidate(case).source
            if label != "as generated":
                source = edit_source(opts.without, source)
            mod = import_source(source, f"cand_{case.name}_{len(models)}", work)
            mod.KOPT_GRAPH = False
            model = build_model(case, "main", cls=mod.ModelNew, device="cuda")
            model.load_state_dict(ref.state_dict())
            with torch.no_grad():
                model(*args)
            models[label] = model
        # the two variants alternate, ABAB..., and each kernel's median over the rounds is
        # kept, so neither variant alone meets the GPU's state after the other's codegen
        samples: dict[str, list[dict[str, float]]] = {label: [] for label in models}
        with torch.no_grad():
            for _ in range(opts.rounds):
                for label, model in models.items():
                    samples[label].append(kernel_times(lambda model=model, args=args: model(*args)))
        figures = {label: {k: statistics.median(r.get(k, 0.0) for r in runs)
                           for k in set().union(*runs)} for label, runs in samples.items()}
        a, b = figures.values()
        for name in sorted(set(a) | set(b)):
            rows.append((case.name, name, a.get(name, float("nan")), b.get(name, float("nan"))))
        rows.append((case.name, "**device total**", sum(a.values()), sum(b.values())))
        print(f"--- {case.name}: device {sum(a.values()):.4f} ms as generated, {sum(b.values()):.4f} ms "
              f"without {opts.without}")
    print(f"\n| case | kernel | as generated ms | without {opts.without} ms |\n|---|---|---:|---:|")
    for case, name, x, y in rows:
        print(f"| {case} | {name[:60]} | {x:.4f} | {y:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
