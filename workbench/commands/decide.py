"""`kopt approve RUN [COMMIT]`, `kopt reject RUN [COMMIT] --reason TEXT`, `kopt undo RUN`.

A decision is recorded twice: as an empty commit with a `Kopt-Decision` trailer on the run
branch (git is the history) and in the run's integrator manifest (`details.approval`).
COMMIT is an iteration number or a commit; default: the run's best verified iteration.
`approve` refuses (exit 1) a kernel measured slower than eager on a GPU unless `--force`.
"""

from __future__ import annotations

import argparse

from kopt.harness.paths import manifests_dir
from kopt.phases import history
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("approve", help="approve a run's kernel (recorded in git and the manifest)")
    a.add_argument("run_id", metavar="RUN")
    a.add_argument("commit", metavar="COMMIT", nargs="?", help="iteration number or commit")
    a.add_argument("--force", action="store_true",
                   help="approve even a kernel measured slower than eager PyTorch")
    a.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    a.set_defaults(func=approve)
    r = sub.add_parser("reject", help="reject a run's kernel with a reason (fed to the next run)")
    r.add_argument("run_id", metavar="RUN")
    r.add_argument("commit", metavar="COMMIT", nargs="?", help="iteration number or commit")
    r.add_argument("--reason", required=True, help="why (the next run's engineer reads it)")
    r.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    r.set_defaults(func=reject)
    u = sub.add_parser("undo", help="undo a run's approve/reject (back to pending)")
    u.add_argument("run_id", metavar="RUN")
    u.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    u.set_defaults(func=undo)


def _finish(args: argparse.Namespace, decision_commit: str) -> int:
    run = history.get_run(args.run_id)
    approval = run.approval
    in_manifest = (manifests_dir() / args.run_id / "integrator.json").is_file()
    target = str(approval.get("commit") or "")[:10]
    console.print(f"run {args.run_id}: {approval['state']}"
                  + (f" {target}" if target else "")
                  + f" (decision commit {decision_commit[:10]}"
                  + ("" if in_manifest else "; the run has no integrator manifest yet") + ")")
    if args.json:
        print_json_line({"run_id": args.run_id, **approval, "manifest_updated": in_manifest})
    return 0


def approve(args: argparse.Namespace) -> int:
    return _finish(args, history.approve(args.run_id, args.commit, force=args.force))


def reject(args: argparse.Namespace) -> int:
    return _finish(args, history.reject(args.run_id, args.commit, reason=args.reason))


def undo(args: argparse.Namespace) -> int:
    return _finish(args, history.undo_decision(args.run_id))
