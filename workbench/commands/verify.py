"""`kopt verify CASE CANDIDATE`: the verification tool from the command line.

Exit 0 accepted, 1 rejected, 2 bad input. One line per check; `--json` prints the report's
object (`accepted`, `case`, `candidate`, `device`, `checks`) as the last line.
"""

from __future__ import annotations

import argparse

from rich.markup import escape

from kopt.harness.case import load_case
from kopt.harness.verify import DEFAULT_TIMEOUT_S, verify_candidate
from kopt.workbench.output import console, err_console, print_json_line
from kopt.workbench.sandbox_option import add_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="verify a candidate kernel file against a case",
                       description="Run every verification check on CANDIDATE (a .py file "
                                   "defining ModelNew) against CASE. Exit 0 accepted, 1 "
                                   "rejected, 2 bad input.")
    p.add_argument("case", metavar="CASE", help="bundled case name or case directory")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where to run (default: the case's device; cpu = Triton interpreter)")
    p.add_argument("--target", default=None, help="execution target (default: local)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per worker job (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--verbose", action="store_true", help="stream the workers' output")
    add_option(p)
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    case = load_case(args.case)
    on_line = (lambda line: err_console.print(f"[dim]worker: {escape(line)}[/dim]")) \
        if args.verbose else None
    report = verify_candidate(case, args.candidate, device=args.device, target=args.target,
                              timeout=args.timeout, on_line=on_line)
    for check in report.checks:
        mark = "[green]pass[/green]" if check.passed else "[red]FAIL[/red]"
        console.print(f"{check.name:<22} {mark}  {escape(check.detail)}", soft_wrap=True)
    verdict = ("[green]accepted[/green]" if report.accepted
               else f"[red]rejected[/red] ({', '.join(report.failed())})")
    console.print(f"{report.case}: {escape(report.candidate)} {verdict} on {report.device} "
                  f"in {report.elapsed_s:.1f} s")
    if args.json:
        print_json_line(report.to_dict())
    return 0 if report.accepted else 1
