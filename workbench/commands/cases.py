"""`kopt cases`: the table of bundled and workspace cases."""

from __future__ import annotations

import argparse

from rich.table import Table

from kopt.harness.case import Case, list_cases
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cases", help="list bundled and workspace cases")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    rows = []
    for item in list_cases():
        if isinstance(item, Case):
            m = item.manifest
            main = item.input_set("main")
            dtypes = sorted({s.dtype for s in main.tensor_specs()})
            rows.append({"name": item.name, "path": str(item.directory), "ok": True,
                         "dtypes": dtypes, "description": m.description,
                         "shapes": [s.shape for s in main.tensor_specs()]})
        else:
            rows.append({"name": item.file, "path": item.file, "ok": False,
                         "error": item.one_line()})
    if args.json:
        print_json_line({"cases": rows})
        return 0
    table = Table(title="kopt cases")
    table.add_column("case")
    table.add_column("dtype")
    table.add_column("main inputs")
    table.add_column("description", overflow="fold")
    for r in rows:
        if r["ok"]:
            table.add_row(r["name"], ",".join(r["dtypes"]), " ".join(map(str, r["shapes"])),
                          r["description"])
        else:
            table.add_row(r["name"], "", "", f"[red]{r['error']}[/red]")
    console.print(table)
    return 0
