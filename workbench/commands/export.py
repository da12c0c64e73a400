"""`kopt export RUN [--out DIR]`: the run's approved kernels as a package with `apply(model)`.

The package (default `.kopt/exports/<run-id>/kopt_<case>/`) needs torch and triton only;
`import kopt_<case>; kopt_<case>.apply(model)` patches an existing model instance in place,
keeping its weights, after checking that its structure is the case's (phases/export.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kopt.workbench.output import console, err_console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's approved kernels as a package with apply(model)")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="the package folder to write (its name is the import name; default "
                        ".kopt/exports/<run-id>/kopt_<case>)")
    p.add_argument("--unapproved", action="store_true",
                   help="export the run's best verified iteration although it is not approved")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kopt.phases.export import export_run, usage_snippet

    result = export_run(args.run_id, args.out, unapproved=args.unapproved)
    out = err_console if args.json else console
    if result.approval != "approved":
        out.print(f"[yellow]run {args.run_id} is not approved: exported its best verified "
                  f"iteration {str(result.commit)[:10]}[/yellow]")
    out.print(f"exported run {args.run_id} ({result.case}, commit {str(result.commit)[:10]}) "
              f"to {result.path}")
    out.print(usage_snippet(result.class_name, result.path.name), highlight=False, markup=False)
    if args.json:
        print_json_line(result.to_dict())
    return 0

