"""`kopt bench CASE [CANDIDATE ...]`: eager, torch.compile and accepted candidates, timed.

Only candidates that pass verification are timed (`--unverified` times them anyway, marked).
Exit 0 when every candidate given was timed, 1 when one was rejected or refused, 2 bad input.
`--history` re-times every recorded run's best iteration instead (phases.autobench).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table

from kopt.harness.bench import bench_case
from kopt.harness.case import load_case
from kopt.harness.device import default_input_set, resolve_device
from kopt.harness.errors import KoptError
from kopt.harness.speedup import format_speedup
from kopt.harness.verify import DEFAULT_TIMEOUT_S
from kopt.workbench.output import console, print_json_line, working
from kopt.workbench.sandbox_option import add_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="time eager, torch.compile and accepted candidates",
                       description="Time eager, torch.compile and each candidate that passes "
                                   "verification, on fresh inputs, with the harness timer.")
    p.add_argument("case", metavar="CASE", help="bundled case name or case directory")
    p.add_argument("candidates", metavar="CANDIDATE", nargs="*", help="candidate .py files")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where to run (default: the case's device; cpu = Triton interpreter)")
    p.add_argument("--target", default=None, help="execution target (default: local)")
    p.add_argument("--unverified", action="store_true",
                   help="time candidates without verifying them (rows marked unverified)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile row")
    p.add_argument("--history", action="store_true",
                   help="re-time every recorded run's best iteration of CASE")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per worker job (default {DEFAULT_TIMEOUT_S:g})")
    add_option(p)
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def handle(args: argparse.Namespace) -> int:
    case = load_case(args.case)
    if args.history:
        return _history(args, case)
    device = resolve_device(case, args.device)
    with working(f"verifying and timing {len(args.candidates)} candidate(s) of {case.name} "
                 f"on {device}"):
        rows = bench_case(case, args.candidates, device=device, unverified=args.unverified,
                          target=args.target, timeout=args.timeout,
                          baselines=("eager",) if args.no_compile else ("eager", "compile"))
    input_set = default_input_set(case, device)
    table = Table(title=f"kopt bench {case.name} ({input_set} inputs, {device}, "
                        f"{rows[0]['timing_label'] if rows else ''})")
    for col in ("variant", "median ms", "p20-p80 ms", "GB/s", "TFLOP/s", "% of floor",
                "vs eager", "vs compile", "verified"):
        table.add_column(col, justify="left" if col in ("variant", "verified") else "right")
    for r in rows:
        verified = "yes" if r["verified"] else ("unverified" if args.unverified else "no")
        table.add_row(r["variant"], _fmt(r["median_ms"], ".4f"),
                      f"{_fmt(r['p20_ms'], '.4f')}-{_fmt(r['p80_ms'], '.4f')}",
                      _fmt(r["gbps"], ".1f"), _fmt(r["tflops"], ".2f"),
                      _fmt(r["pct_of_floor"], ".0f"),
                      format_speedup(r["speedup_vs_eager"], r.get("timing_label")),
                      format_speedup(r["speedup_vs_compile"], r.get("timing_label")), verified)
    console.print(table)
    for r in rows:
        if r.get("note"):
            console.print(f"{r['variant']}: {escape(r['note'])}", soft_wrap=True)
    if args.json:
        print_json_line({"case": case.name, "device": device, "input_set": input_set,
                         "unverified": args.unverified, "rows": rows})
    candidates = [r for r in rows if r["variant"] not in ("eager", "compile")]
    return 1 if any(r["median_ms"] is None for r in candidates) else 0


def _history(args: argparse.Namespace, case: Any) -> int:
    try:
        from kopt.phases.autobench import run_history
    except ImportError as err:
        raise KoptError(f"`kopt bench --history` needs phases.autobench ({err})",
                        fix="update kopt; the history bench is part of the pipeline") from err
    rows = [r.to_dict() if hasattr(r, "to_dict") else dict(r)
            for r in run_history(case, device=args.device, target=args.target)]
    table = Table(title=f"kopt bench --history {case.name}")
    for col in ("run", "commit", "iteration", "recorded", "median ms", "speedup", "regression",
                "note"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r.get("run_id")), str(r.get("commit", ""))[:10], str(r.get("iteration")),
                      format_speedup(r.get("recorded_speedup")),
                      _fmt(r.get("median_ms"), ".4f"),
                      format_speedup(r.get("speedup"), r.get("timing_label")),
                      "yes" if r.get("regression") else "",
                      escape(str(r.get("note") or "")))
    console.print(table if rows else f"no recorded runs of {case.name} to re-time")
    if args.json:
        print_json_line({"case": case.name, "history": rows})
    return 1 if any(r.get("regression") for r in rows) else 0
