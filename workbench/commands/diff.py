"""`kopt diff RUN [A] [B]`: the kernel diff between two iterations of a run.

A and B are iteration numbers or commits. Default: the best iteration against the one
before it (the first iteration against nothing).
"""

from __future__ import annotations

import argparse

from rich.syntax import Syntax

from kopt.phases.history import diff
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="kernel diff between two iterations of a run")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("a", metavar="A", nargs="?", help="iteration number or commit (older)")
    p.add_argument("b", metavar="B", nargs="?", help="iteration number or commit (newer)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    text = diff(args.run_id, args.a, args.b)
    if args.json:
        print(text)
        print_json_line({"run_id": args.run_id, "a": args.a, "b": args.b, "diff": text})
    elif console.is_terminal:
        console.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
    else:
        print(text)
    return 0
