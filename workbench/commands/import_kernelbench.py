"""`kopt import-kernelbench FILE`: turn a KernelBench-style problem file into a case."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from kopt.harness.case import Case, ScalarSpec, load_case_dir
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


def show_case(case: Case, directory: Path, smoke: dict[str, Any], as_json: bool) -> None:
    """The imported case: its inputs beside the smoke set, and how the smoke set was chosen
    (a warning line when there is none or it is over budget). Shared with `kopt new --from`."""
    if as_json:
        print_json_line({"case": case.name, "path": str(directory), "smoke": smoke,
                         "manifest": yaml.safe_load(case.manifest_file.read_text())})
        return
    main = case.input_set("main")
    has_smoke = case.manifest.smoke is not None
    table = Table(title=f"case {case.name} ({directory})")
    table.add_column("arg")
    table.add_column("main")
    table.add_column("smoke")
    smoke_args = case.input_set("smoke").args if has_smoke else [None] * len(main.args)
    for i, (m, s) in enumerate(zip(main.args, smoke_args, strict=True)):
        table.add_row(str(i), _describe(m), _describe(s) if s is not None else "(none)")
    console.print(table)
    init = main.init_kwargs or main.init_args
    if init:
        small = case.input_set("smoke") if has_smoke else None
        console.print(f"constructor: {init!r}; smoke: "
                      f"{(small.init_kwargs or small.init_args) if small else None!r}")
    if smoke.get("chosen"):
        console.print(f"smoke set: {smoke['chosen']}")
    if smoke.get("warning"):
        console.print(f"[yellow]warning:[/yellow] {smoke['warning']}")
    console.print(f"guesses are listed in {case.manifest_file}'s description; "
                  f"next: `kopt baseline {directory}`")


def handle(args: argparse.Namespace) -> int:
    smoke: dict[str, Any] = {}
    directory = import_kernelbench(args.file, name=args.name, out=args.out, report=smoke)
    show_case(load_case_dir(directory), directory, smoke, args.json)
    return 0
