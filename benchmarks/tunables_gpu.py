"""The accelerator's search space, timed exhaustively on a GPU: for each case, the offline
engineer's candidate is generated once and every configuration of its `KOPT_TUNABLES`
(per kernel, the product of its lists, up to --cap per case) is set in the loaded module's
`KOPT_CONFIG`, checked against eager on one input set and timed with do_bench (rotated
inputs, median). Says whether the declared values launch different kernels and whether the
engineer's default is the fastest.

    python benchmarks/tunables_gpu.py [--cap N] CASE [CASE ...]

Prints a markdown table last: one row per configuration, the default marked.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from offline_gpu import _measured_floor_ms  # noqa: E402

from kopt.harness.case import load_case  # noqa: E402
from kopt.harness.compare import compare_outputs  # noqa: E402
from kopt.harness.data import agent_provide_inputs, build_model  # noqa: E402
from kopt.harness.runner import apply_precision  # noqa: E402
from kopt.harness.tolerance import tolerance_for  # noqa: E402
from kopt.phases.engineers.offline import generate_candidate  # noqa: E402


def configs(tunables: dict, default: dict, cap: int) -> list[dict]:
    """Every per-kernel configuration (kernel -> params), the default first."""
    keys = [(k, p) for k, params in tunables.items() for p in params]
    out = [default]
    for values in itertools.product(*[tunables[k][p] for k, p in keys]):
        cfg = {k: dict(default[k]) for k in default}
        for (k, p), v in zip(keys, values, strict=True):
            cfg[k][p] = v
        if cfg not in out:
            out.append(cfg)
    return out[:cap]


def sweep(name: str, cap: int) -> list[dict]:
    case = load_case(name)
    source = generate_candidate(case).source
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"cand_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    apply_precision(case.manifest.precision)
    ref = build_model(case, "main", device="cuda")
    new = build_model(case, "main", device="cuda", cls=mod.ModelNew)
    sets = [agent_provide_inputs(case, "main", s, device="cuda") for s in range(3)]
    with torch.no_grad():
        want = ref(*sets[0].args, **sets[0].kwargs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    tol = {w.dtype: tolerance_for(case, w.dtype) for w in want}
    floor = _measured_floor_ms(case)
    default = {k: dict(v) for k, v in mod.KOPT_CONFIG.items()}
    i = [0]

    def run():
        x = sets[i[0] % len(sets)]
        i[0] += 1
        with torch.no_grad():
            new(*x.args, **x.kwargs)

    rows = []
    for cfg in configs(mod.KOPT_TUNABLES, default, cap):
        mod.KOPT_CONFIG.clear()
        mod.KOPT_CONFIG.update({k: dict(v) for k, v in cfg.items()})
        label = "; ".join(f"{k.split('_kernel')[0]}: " + ", ".join(f"{p}={v}" for p, v in c.items())
                          for k, c in cfg.items())
        try:
            with torch.no_grad():
                got = new(*sets[0].args, **sets[0].kwargs)
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            ok = compare_outputs(got, want, tol).ok
            ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
        except Exception as err:  # noqa: BLE001 - a configuration that does not compile
            ok, ms = False, float("nan")
            label += f" ({type(err).__name__})"
        row = {"case": name, "config": label, "default": cfg == default, "correct": ok, "ms": ms,
               "pct_floor": 100 * floor / ms if floor and ms == ms else None}
        print(row, flush=True)
        rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    cap = 16
    if argv[:1] == ["--cap"]:
        cap, argv = int(argv[1]), argv[2:]
    rows = []
    for name in argv:
        try:
            rows += sweep(name, cap)
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"{name}: {type(err).__name__}: {err}", flush=True)
    print()
    print("| case | configuration | default | correct | ms | % of floor |")
    print("| --- | --- | --- | --- | ---: | ---: |")
    for r in rows:
        pct = "" if r["pct_floor"] is None else f"{r['pct_floor']:.1f}"
        print(f"| {r['case']} | {r['config']} | {'yes' if r['default'] else ''} | {r['correct']} | "
              f"{r['ms']:.4f} | {pct} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
