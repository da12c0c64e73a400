"""`kopt new NAME`: scaffold a new case (manifest.yaml + model.py) from kopt's template."""

from __future__ import annotations

import argparse

from kopt.harness.kernelbench import scaffold_case
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("new", help="scaffold a new case from a template")
    p.add_argument("name", metavar="NAME", help="case name (letters, digits, '_' and '-')")
    p.add_argument("--out", metavar="DIR", help="case directory (default: ./cases/NAME)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    directory = scaffold_case(args.name, args.out)
    if args.json:
        print_json_line({"case": args.name, "path": str(directory),
                         "files": sorted(p.name for p in directory.iterdir())})
        return 0
    console.print(f"created case [bold]{args.name}[/bold] in {directory}")
    console.print("  edit model.py (your module) and manifest.yaml (inputs, sizes, smoke set),")
    console.print(f"  then run `kopt baseline {directory}`")
    return 0
