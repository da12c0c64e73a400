"""The offline engineer's codegen seconds per problem, one problem after another in one process.

    python benchmarks/codegen_times.py DIR_OR_FILE... [--out FILE.json]

Issue 18's bar: codegen under 3 s per problem. `kopt suite` records each problem's codegen
wall time while other problems verify and time beside it (worker processes, Triton and
Inductor compiles on the same cores), so its figure mixes in the host's load; this script
measures codegen alone: each problem imported (`import-kernelbench`, not timed), then
`generate_candidate` timed, with torch.export's one-time set-up done first
(`capture.warm_up`). Runs on the CPU (codegen needs no GPU). Prints one line per problem,
then the median, the slowest and how many took 3 s or more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

BAR_S = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from kopt.harness.case import load_case_dir
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.phases.engineers.offline import generate_candidate
    from kopt.phases.engineers.offline.capture import warm_up

    files = sorted((f for p in args.paths for f in (sorted(p.glob("*.py")) if p.is_dir() else [p])),
                   key=lambda f: (f.parent.name, int(f.name.split("_")[0]) if f.name[0].isdigit() else 0))
    print(f"warm-up {warm_up():.2f} s; {len(files)} problems", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            name = f"{f.parent.name}_{f.stem}"
            row: dict[str, object] = {"problem": name}
            try:
                case = load_case_dir(import_kernelbench(f, out=Path(tmp) / name, warm=True))
                t0 = time.perf_counter()
                result = generate_candidate(case)
                row.update(codegen_s=round(time.perf_counter() - t0, 3), kernels=len(result.kernels))
            except Exception as err:  # noqa: BLE001 - one problem's failure is its row
                row.update(error=f"{type(err).__name__}: {str(err)[:160]}")
            rows.append(row)
            print(f"{name:<70} {row.get('codegen_s', '-')!s:>7} {row.get('error', '')}", flush=True)
    took = [r["codegen_s"] for r in rows if "codegen_s" in r]
    if took:
        slow = max(rows, key=lambda r: r.get("codegen_s", -1))
        print(f"{len(took)} generated, {len(rows) - len(took)} not; median {statistics.median(took):.2f} s, "
              f"slowest {slow['codegen_s']:.2f} s ({slow['problem']}), "
              f"{sum(t >= BAR_S for t in took)} at {BAR_S:g} s or more")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
