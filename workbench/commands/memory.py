"""`kopt memory [--clear] [--json]`: the accelerator's tuning memory (`.kopt/tuning/<gpu>.json`).

Per GPU model, kernel pattern (a signature of the fused kernel's source) and shape bucket
(input shapes rounded up to powers of two): the launch configuration that won and its
evidence (ms, date, commit, case). A later run of a matching kernel starts its search from
it, after timing it against the kernel's default.

The strategy memory (`.kopt/tuning/strategies/<gpu>.json`, phases.strategy_memory) is listed
after it: per GPU, first candidate and shapes, what each hypothesis of the optimizer's walk
measured; a later run does not test again a hypothesis that lost. `--clear` forgets both;
`--json`'s object has `entries` (the tuning memory) and `strategies`. `--clear` also drops
the baselines kept for ten minutes (`.kopt/baselines/`: eager's and torch.compile's timings of
an unchanged case, which a second run's integrator reuses), so the next run times them again.
"""

from __future__ import annotations

import argparse
import shutil

from rich.table import Table

from kopt.harness.paths import baselines_dir
from kopt.phases import strategy_memory, tuning_memory
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="list (or --clear) the tuning memory of winning launch "
                                      "configurations")
    p.add_argument("--clear", action="store_true", help="forget every remembered winner (and the kept baselines)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.clear:
        n = tuning_memory.clear() + strategy_memory.clear()
        shutil.rmtree(baselines_dir(), ignore_errors=True)
        console.print(f"tuning memory cleared: {n} entr{'y' if n == 1 else 'ies'} forgotten")
        if args.json:
            print_json_line({"cleared": n, "entries": [], "strategies": []})
        return 0
    rows = tuning_memory.entries()
    walks = strategy_memory.entries()
    if walks:
        table = Table(title=f"strategy memory ({strategy_memory.strategies_dir()})",
                      title_justify="left")
        for col in ("gpu", "first candidate", "shapes", "first ms", "hypotheses (ms)", "date",
                    "case", "torch", "triton"):
            table.add_column(col)
        for w in walks:
            tested = "; ".join(f"{name}: {'rejected' if ms is None else f'{ms:.4g}'}"
                               for name, ms in sorted((w.get("results") or {}).items()))
            default = w.get("default_ms")
            table.add_row(str(w["gpu"]), w["pattern"], w["bucket"],
                          "-" if default is None else f"{default:.4g}", tested,
                          str(w.get("date") or "-"), str(w.get("case") or "-"),
                          str(w.get("torch") or "-"), str(w.get("triton") or "-"))
        console.print(table)
    if not rows:
        console.print(f"the tuning memory is empty ({tuning_memory.memory_dir()}): a GPU run's "
                      "accelerator fills it")
    else:
        table = Table(title=f"tuning memory ({tuning_memory.memory_dir()})", title_justify="left")
        for col in ("gpu", "kernel", "pattern", "shapes", "config", "ms", "date", "case",
                    "commit"):
            table.add_column(col, justify="right" if col == "ms" else "left")
        for r in rows:
            ms = r.get("median_ms")
            table.add_row(str(r["gpu"]), str(r.get("kernel") or "-"), r["pattern"], r["bucket"],
                          ", ".join(f"{k}={v}" for k, v in (r.get("config") or {}).items()),
                          "-" if ms is None else f"{ms:.4g}", str(r.get("date") or "-"),
                          str(r.get("case") or "-"), str(r.get("commit") or "")[:10])
        console.print(table)
    if args.json:
        print_json_line({"entries": rows, "strategies": walks})
    return 0
