"""`kopt history [CASE]`: runs and their iterations, read from git alone."""

from __future__ import annotations

import argparse
import datetime as dt

from rich.markup import escape
from rich.table import Table

from kopt.harness.case import load_case
from kopt.harness.errors import UnknownCaseError
from kopt.harness.speedup import format_speedup
from kopt.phases.history import list_runs
from kopt.phases.outcome import KEEP_PYTORCH, of_speedup
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="list runs and their iterations (from git)")
    p.add_argument("case", metavar="CASE", nargs="?", help="only runs of this case")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def _case_name(ref: str) -> str:
    try:
        return load_case(ref).name
    except UnknownCaseError:
        return ref  # a case whose directory is gone still has its history


def _x(v: float | None) -> str:
    return format_speedup(v)  # a history Speedup carries its timing label


def handle(args: argparse.Namespace) -> int:
    runs = list_runs(_case_name(args.case) if args.case else None)
    if args.json:
        print_json_line({"runs": [r.to_dict() for r in runs]})
        return 0
    if not runs:
        console.print("no runs yet: start one with `kopt run CASE`")
        return 0
    for r in runs:
        when = dt.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M") if r.created else ""
        state = r.approval.get("state", "pending")
        color = {"approved": "green", "rejected": "red"}.get(state, "yellow")
        best_text = f"best {_x(r.best_speedup)}"
        if r.best_speedup is not None:
            outcome = of_speedup(r.best_speedup, None)
            if outcome.verdict == KEEP_PYTORCH:
                best_text = escape(outcome.summary)
            elif outcome.verdict == "cpu-verified":
                best_text = escape(outcome.summary)
        table = Table(title=f"{r.case} · run {r.run_id} · {when} · {best_text} · "
                            f"[{color}]{state}[/{color}]", title_justify="left")
        table.add_column("iter", justify="right")
        table.add_column("phase")
        table.add_column("author")
        table.add_column("speedup", justify="right")
        table.add_column("% floor", justify="right")
        table.add_column("verdict")
        table.add_column("commit")
        best = r.best()
        for it in r.iterations:
            mark = " ★" if best and it.commit == best.commit else ""
            table.add_row(str(it.iteration), it.phase, it.author, _x(it.speedup),
                          "-" if it.pct_of_floor is None else f"{it.pct_of_floor:.1f}%",
                          "[green]verified[/green]" if it.verified else "[red]rejected[/red]",
                          it.commit[:10] + mark)
        console.print(table)
        if state == "rejected" and r.approval.get("reason"):
            console.print(f"  rejected: {escape(str(r.approval['reason']))}")
    return 0
