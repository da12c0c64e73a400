"""`kopt cases`: the table of bundled and workspace cases."""

from __future__ import annotations

import argparse

from rich import box
from rich.markup import escape
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
    console.print(cases_table(rows, width=console.width))
    return 0


def cases_table(rows: list[dict], *, width: int) -> Table:
    """One line per case: the name whole, the description cut with an ellipsis to what the
    terminal has left (80 columns give one screen of eleven cases, not 260 lines)."""
    def cells(r: dict) -> list[str]:
        if not r["ok"]:
            return [r["name"], "", "", r["error"]]
        return [r["name"], ",".join(r["dtypes"]), " ".join(map(str, r["shapes"])),
                r["description"]]

    table_rows = [cells(r) for r in rows]
    headers = ["case", "dtype", "main inputs", "description"]
    widths = [max([len(h)] + [len(c[i]) for c in table_rows]) for i, h in enumerate(headers)]
    keep = [0, 1, 2, 3]
    if sum(widths[:3]) + 3 * 4 + 20 > width:  # the shapes go first when room is short
        keep = [0, 1, 3]
    used = sum(widths[i] for i in keep[:-1]) + 3 * len(keep) + 1
    room = max(12, width - used)
    table = Table(title="kopt cases", box=box.SIMPLE_HEAD, pad_edge=False)
    for i in keep:
        table.add_column(headers[i], no_wrap=True,
                         max_width=room if i == 3 else None, overflow="ellipsis")
    for r, c in zip(rows, table_rows, strict=True):
        values = [_cut(c[i], room) if i == 3 else c[i] for i in keep]
        if not r["ok"]:
            values[-1] = f"[red]{escape(values[-1])}[/red]"
        table.add_row(*values)
    return table


def _cut(text: str, room: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= room else text[: room - 1] + "…"
