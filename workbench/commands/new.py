"""`kopt new NAME`: a new case (manifest.yaml + model.py), from kopt's template or, with
`--from FILE:CLASS`, from a module the user already has (example inputs from the file's
`get_inputs()` or from `--inputs` shapes; constructor arguments from `get_init_inputs()` when
the file has one). A case from a file gets a smoke set that was built and run, chosen by the
same rules as `kopt import-kernelbench`."""

from __future__ import annotations

import argparse
from typing import Any

from kopt.harness.case import load_case_dir
from kopt.harness.errors import BadInputError
from kopt.harness.kernelbench import import_kernelbench, scaffold_case
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("new", help="scaffold a new case from a template, or from your own module")
    p.add_argument("name", metavar="NAME", help="case name (letters, digits, '_' and '-')")
    p.add_argument("--out", metavar="DIR", help="case directory (default: ./cases/NAME)")
    p.add_argument("--from", dest="source", metavar="FILE:CLASS",
                   help="make the case from the nn.Module CLASS in FILE (default class: Model)")
    p.add_argument("--inputs", metavar="SHAPES",
                   help="example inputs when FILE has no get_inputs(): e.g. 8x128:float32,8x128")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.source:
        return _from_file(args)
    if args.inputs:
        raise BadInputError("--inputs needs --from FILE:CLASS",
                            fix="pass --from FILE:CLASS, or edit the template's manifest.yaml")
    directory = scaffold_case(args.name, args.out)
    if args.json:
        print_json_line({"case": args.name, "path": str(directory),
                         "files": sorted(p.name for p in directory.iterdir())})
        return 0
    console.print(f"created case [bold]{args.name}[/bold] in {directory}")
    console.print("  edit model.py (your module) and manifest.yaml (inputs, sizes, smoke set),")
    console.print(f"  then run `kopt baseline {directory}`")
    return 0


def _from_file(args: argparse.Namespace) -> int:
    from kopt.workbench.commands.import_kernelbench import show_case

    file, sep, cls = args.source.rpartition(":")
    if not sep or not file or not cls.isidentifier():
        file, cls = args.source, "Model"
    command = f"kopt new {args.name} --from {args.source}" + (
        f" --inputs {args.inputs}" if args.inputs else "")
    smoke: dict[str, Any] = {}
    directory = import_kernelbench(file, name=args.name, out=args.out, class_name=cls,
                                   inputs=args.inputs, command=command, report=smoke)
    show_case(load_case_dir(directory), directory, smoke, args.json)
    return 0
