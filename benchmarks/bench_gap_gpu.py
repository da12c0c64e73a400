"""Why did the integrator's side-by-side bench time layernorm_gelu's kernel at 0.87x eager
when the accelerator's tune job timed the same kernel at 2.15x? One process, one generated
candidate, the harness timer with in-place input rotation (as the bench and tune jobs do),
with and without what only the bench job adds (the Triton launch counter, `import
torch._dynamo`); then the real `measure_variant`, `time_trials` and `bench_case` on the file.

    python benchmarks/bench_gap_gpu.py [--case layernorm_gelu]

Prints the host time of one call (no sync) and a markdown table last.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch

    from kopt.harness.case import load_case
    from kopt.harness.data import agent_provide_inputs, agent_provide_weights, instantiate
    from kopt.harness.jobs.candidate import _load_candidate
    from kopt.harness.timing import time_callable
    from kopt.harness.verification import guards
    from kopt.phases.engineers.offline.engineer import generate_candidate

    parser = argparse.ArgumentParser()
    parser.add_argument("--case", default="layernorm_gelu")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU", file=sys.stderr)
        return 2
    case = load_case(args.case)
    tmp = Path(tempfile.mkdtemp())
    path = tmp / f"{case.name}.py"
    path.write_text(generate_candidate(case).source)
    inputs = agent_provide_inputs(case, "main", seed=0)
    weights = agent_provide_weights(case, "main")
    resolved = case.input_set("main")
    model = instantiate(_load_candidate(path), resolved, case.model_file)
    model.load_state_dict(weights, strict=True)
    model = model.to("cuda").eval()
    live = [a.cuda() if isinstance(a, torch.Tensor) else a for a in inputs.args]
    pool = [[a.clone() if isinstance(a, torch.Tensor) else a for a in live] for _ in range(4)]

    def rotate(i: int) -> None:
        for dst, src in zip(live, pool[i % 4], strict=True):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)

    def fn() -> object:
        with torch.no_grad():
            return model(*live)

    def host_us() -> float:
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        t = (time.perf_counter() - t0) / 50 * 1e6
        torch.cuda.synchronize()
        return t

    rows = []

    def row(name: str) -> None:
        t = time_callable(fn, device="cuda", rotate=rotate)
        no_rot = time_callable(fn, device="cuda")
        rows.append((name, t.median_ms, no_rot.median_ms, host_us()))
        print(f"  {name}: {t.median_ms:.4f} ms (no rotation {no_rot.median_ms:.4f}), "
              f"host {rows[-1][3]:.1f} us/call", flush=True)

    row("plain")
    counter = guards.LaunchCounter()
    counter.install()
    row("+ launch counter")
    guards.take_baseline()  # imports torch._dynamo
    row("+ torch._dynamo imported")

    from kopt.harness.bench import bench_case
    from kopt.harness.runner import measure_variant
    from kopt.harness.tune import time_trials

    m = measure_variant(case, path, device="cuda")
    tr = time_trials(case, [path], device="cuda", input_set="main")
    b = bench_case(case, [path], device="cuda", unverified=True)
    print(f"\n{torch.cuda.get_device_name(0)}; torch {torch.__version__}\n")
    print("| timer setting | median ms (in-place rotation) | median ms (no rotation) | host us/call |")
    print("| --- | ---: | ---: | ---: |")
    for name, a, c, h in rows:
        print(f"| {name} | {a:.4f} | {c:.4f} | {h:.1f} |")
    print(f"| measure_variant (worker) | {m['latency_ms']['median'] if m.get('ok') else m.get('error')} | | |")
    print(f"| time_trials (worker) | {tr[0].get('median_ms')} | | |")
    for r in b:
        print(f"| bench_case {r['variant']} (worker) | {r['median_ms']} {r.get('note') or ''} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
