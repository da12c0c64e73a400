"""`kopt import-kernelbench FILE`: turn a KernelBench-style problem file into a case."""

from __future__ import annotations

import argparse

import yaml
from rich.table import Table

from kopt.harness.case import ScalarSpec, load_case_dir
from kopt.harness.kernelbench import import_kernelbench
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-kernelbench",
                       help="make a case from a KernelBench file (Model, get_inputs, get_init_inputs)")
    p.add_argument("file", metavar="FILE", help="the KernelBench problem (.py)")
    p.add_argument("--name", help="case name (default: the file's name)")
    p.add_argument("--out", metavar="DIR", help="case directory (default: ./cases/NAME)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def _describe(spec: object) -> str:
    if isinstance(spec, ScalarSpec):
        return f"value {spec.value!r}"
    return f"{list(spec.shape)} {spec.dtype} {spec.init}"  # type: ignore[attr-defined]


def handle(args: argparse.Namespace) -> int:
    directory = import_kernelbench(args.file, name=args.name, out=args.out)
    case = load_case_dir(directory)
    main, smoke = case.input_set("main"), case.input_set("smoke")
    if args.json:
        print_json_line({"case": case.name, "path": str(directory),
                         "manifest": yaml.safe_load(case.manifest_file.read_text())})
        return 0
    table = Table(title=f"case {case.name} ({directory})")
    table.add_column("arg")
    table.add_column("main")
    table.add_column("smoke")
    for i, (m, s) in enumerate(zip(main.args, smoke.args, strict=True)):
        table.add_row(str(i), _describe(m), _describe(s))
    console.print(table)
    init = main.init_kwargs or main.init_args
    if init:
        console.print(f"constructor: {init!r}; smoke: {smoke.init_kwargs or smoke.init_args!r}")
    console.print(f"guesses are listed in {case.manifest_file}'s description; "
                  f"next: `kopt baseline {directory}`")
    return 0
