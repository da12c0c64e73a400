"""`kopt diff RUN [A] [B]`: the kernel diff between two iterations of a run.

A and B are iteration numbers or commits. Default: the best iteration against the one
before it (the first iteration against nothing); with A alone, iteration A against the one
before it. On a terminal the diff goes through a pager with whole lines, as git's does.
"""

from __future__ import annotations

import argparse
import sys

from kopt.phases.history import diff
from kopt.workbench.output import colour_diff, page, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="kernel diff between two iterations of a run")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("a", metavar="A", nargs="?", help="iteration number or commit (older)")
    p.add_argument("b", metavar="B", nargs="?", help="iteration number or commit (newer)")
    p.add_argument("--no-pager", action="store_true",
                   help="print to the terminal instead of paging (lines are never cut)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    text = diff(args.run_id, args.a, args.b)
    if not text.strip():
        text = (f"# iterations {args.a or 'previous'} and {args.b or 'best'} of run "
                f"{args.run_id} hold the same kernel\n")
    if args.json:
        print(text, end="")
        print_json_line({"run_id": args.run_id, "a": args.a, "b": args.b, "diff": text})
    elif sys.stdout.isatty() and not args.no_pager:
        page(colour_diff(text))
    else:
        page(text if text.endswith("\n") else text + "\n", no_pager=True)
    return 0
