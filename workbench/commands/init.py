"""`kopt init`: make the workbench directory a git repository kopt can record runs in."""

from __future__ import annotations

import argparse

from kopt.phases.history import init_workspace
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="create the workspace's git repository (if needed)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    root, created = init_workspace()
    if created:
        console.print(f"created a git repository in {root} (.gitignore: .kopt/ manifests/ archive/)")
    else:
        console.print(f"{root} is already a git repository; kopt's folders are excluded "
                      f"via .git/info/exclude")
    if args.json:
        print_json_line({"root": str(root), "created": created})
    return 0
