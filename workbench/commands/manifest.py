"""`kopt manifest validate PATH`: check a phase manifest against its schema (exit 0/1).

`kopt manifest show RUN_ID [PHASE]` prints a run's manifests.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape

from kopt.harness.errors import ManifestError
from kopt.harness.paths import manifests_dir
from kopt.phases.manifest import PHASES, changed_files, load_json, validation_errors
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("manifest", help="validate or show phase manifests")
    msub = p.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    v = msub.add_parser("validate", help="validate a manifest (exit 0 valid, 1 invalid)")
    v.add_argument("path", metavar="PATH", help="manifests/<run-id>/<phase>.json")
    v.add_argument("--files", action="store_true",
                   help="also check the sha256 of every file the manifest lists")
    v.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    v.set_defaults(func=validate)
    s = msub.add_parser("show", help="print a run's manifests")
    s.add_argument("run_id", metavar="RUN_ID")
    s.add_argument("phase", metavar="PHASE", nargs="?", choices=PHASES)
    s.set_defaults(func=show)


def validate(args: argparse.Namespace) -> int:
    path = Path(args.path)
    try:
        data = load_json(path)
    except ManifestError as err:
        errors = [err.message]
    else:
        errors = validation_errors(data)
        if not errors and args.files:
            from kopt.phases.manifest import Manifest

            errors = changed_files(Manifest.from_dict(data))
    for e in errors:
        console.print(f"[red]{escape(str(path))}: {escape(e)}[/red]", soft_wrap=True)
    if not errors:
        console.print(f"{escape(str(path))}: valid {data.get('phase')} manifest "
                      f"({data.get('schema')})")
    if args.json:
        print_json_line({"path": str(path), "valid": not errors, "errors": errors})
    return 0 if not errors else 1


def show(args: argparse.Namespace) -> int:
    run_dir = manifests_dir() / args.run_id
    phases = [args.phase] if args.phase else list(PHASES)
    found = False
    for phase in phases:
        file = run_dir / f"{phase}.json"
        if file.is_file():
            found = True
            console.print(f"[bold]{escape(str(file))}[/bold]")
            console.print_json(json.dumps(load_json(file)))
    if not found:
        raise ManifestError(f"no manifests in {run_dir}", fix="list runs with `kopt history`")
    return 0
