"""`kopt jobs`: worker jobs on remote targets — list, submit detached, attach, cancel.

Every job kopt runs on an `ssh://` target is recorded, so one whose connection dropped (or
whose `kopt` was closed) can be found and re-attached: `kopt jobs attach ID` streams the rest
of its output and brings its `out/` back into the local job directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from kopt.harness.errors import BadInputError, KoptError, TargetError
from kopt.harness.targets import jobs as job_records
from kopt.harness.targets.resolve import resolve_target
from kopt.workbench.output import console, print_json_line
from kopt.workbench.sandbox_option import add_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="remote jobs: list, submit, attach, cancel")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.add_argument("--no-check", action="store_true",
                   help="list the recorded states without asking the remotes")
    p.set_defaults(func=handle_list)
    actions = p.add_subparsers(dest="action", metavar="ACTION")

    attach = actions.add_parser("attach", help="stream a job's output until it ends, fetch out/")
    attach.add_argument("id", help="job id (a unique prefix is enough)")
    attach.add_argument("--json", action="store_true")
    attach.set_defaults(func=handle_attach)

    cancel = actions.add_parser("cancel", help="stop a running job on its target")
    cancel.add_argument("id")
    cancel.add_argument("--json", action="store_true")
    cancel.set_defaults(func=handle_cancel)

    submit = actions.add_parser("submit", help="start a staged job directory (or an echo job) "
                                               "on a remote target, detached")
    submit.add_argument("job_dir", nargs="?", type=Path,
                        help="a staged job directory (request.json ...); omit with --echo")
    submit.add_argument("--target", required=True, help="ssh://... or a targets.yaml name")
    submit.add_argument("--echo", metavar="MESSAGE", help="submit an echo job instead")
    submit.add_argument("--repeat", type=int, default=1, help="echo: print MESSAGE this often")
    submit.add_argument("--interval", type=float, default=0.0, help="echo: seconds between")
    submit.add_argument("--timeout", type=float, default=600.0, help="worker time limit, s")
    submit.add_argument("--attach", action="store_true", help="stream it now (Ctrl-C detaches)")
    submit.add_argument("--json", action="store_true")
    add_option(submit)
    submit.set_defaults(func=handle_submit)


def _remote(record: job_records.JobRecord) -> Any:
    target = resolve_target(record.target)
    if not hasattr(target, "attach"):
        raise TargetError(f"target {record.target!r} of job {record.id} has no detached jobs",
                          fix="only ssh:// targets keep jobs running without kopt")
    return target


def handle_list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for record in job_records.list_records():
        row = job_records.summary_row(record)
        if record.state == "running" and not args.no_check:
            try:
                remote = _remote(record).status(record)
                row["remote_state"] = remote.get("state")
                if remote.get("state") not in (None, "running"):
                    job_records.update(record, state=remote["state"] if remote["state"] in
                                       ("done", "timed_out", "cancelled", "lost") else "lost",
                                       returncode=remote.get("returncode"))
                    row["state"] = remote["state"]
            except KoptError as err:
                row["remote_state"] = "unreachable"
                row["error"] = err.one_line()
        rows.append(row)
    if args.json:
        print_json_line({"jobs": rows})
        return 0
    if not rows:
        console.print("no remote jobs (they appear here when something runs on an ssh:// target)")
        return 0
    table = Table(title="kopt jobs")
    for column in ("id", "target", "job", "state", "started", "note"):
        table.add_column(column, overflow="fold")
    for r in rows:
        state = r["state"] + (f" ({r['remote_state']})" if r.get("remote_state") == "unreachable"
                              else "")
        table.add_row(r["id"], r["target"], r["job"], state,
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"])),
                      r.get("note", ""))
    console.print(table)
    return 0


def _print_line(line: str) -> None:
    print(line, flush=True)


def _attach(record: job_records.JobRecord, *, quiet: bool) -> dict[str, Any]:
    outcome = _remote(record).attach(record, on_line=None if quiet else _print_line)
    return {"id": record.id, "ok": outcome.ok, "returncode": outcome.returncode,
            "timed_out": outcome.timed_out, "response": outcome.response,
            "job_dir": record.local_dir,
            "error": None if outcome.ok else outcome.failure_reason()}


def handle_attach(args: argparse.Namespace) -> int:
    record = job_records.load(args.id)
    if record.state == "fetched":
        console.print(f"job {record.id} already ended and its out/ is in {record.local_dir}; "
                      "streaming its log again", style="dim")
    if not Path(record.local_dir).is_dir():
        Path(record.local_dir).mkdir(parents=True)
    try:
        result = _attach(record, quiet=args.json)
    except KeyboardInterrupt:
        print(f"kopt: detached; the job goes on: `kopt jobs attach {record.id}`", file=sys.stderr)
        return 130
    return _finish(result, as_json=args.json)


def _finish(result: dict[str, Any], *, as_json: bool) -> int:
    if as_json:
        print_json_line(result)
    elif result["ok"]:
        console.print(f"job {result['id']} finished; out/ is in {result['job_dir']}/out")
    else:
        console.print(f"job {result['id']} failed: {result['error']}", style="red")
    return 0 if result["ok"] else 1


def handle_cancel(args: argparse.Namespace) -> int:
    record = job_records.load(args.id)
    result = _remote(record).cancel(record)
    if result.get("error"):
        raise TargetError(f"could not cancel job {record.id}: {result['error']}")
    if args.json:
        print_json_line({"id": record.id, **result})
    elif result.get("cancelled"):
        console.print(f"job {record.id} cancelled")
    else:
        console.print(f"job {record.id} was not running ({result.get('state')})")
    return 0


def handle_submit(args: argparse.Namespace) -> int:
    from kopt.harness.job import stage_job

    if (args.job_dir is None) == (args.echo is None):
        raise BadInputError("give either a JOB_DIR or --echo MESSAGE",
                            fix="e.g. kopt jobs submit --target ssh://host --echo hi")
    if args.echo is not None:
        job_dir = stage_job("echo", {"message": args.echo, "repeat": args.repeat,
                                     "interval_s": args.interval})
    else:
        job_dir = args.job_dir.resolve()
        if not (job_dir / "request.json").is_file():
            raise BadInputError(f"{str(args.job_dir)!r} has no request.json",
                                fix="give a job directory staged by kopt (harness.job.stage_job)")
    target = resolve_target(args.target)
    if not hasattr(target, "start"):
        raise BadInputError(f"target {args.target!r} cannot run detached jobs",
                            fix="use an ssh:// target (local jobs end with kopt)")
    record = target.start(job_dir, timeout=args.timeout, note="kopt jobs submit")
    if not args.attach:
        if args.json:
            print_json_line({"id": record.id, "target": record.target, "job_dir": str(job_dir)})
        else:
            console.print(f"started job {record.id} on {record.target}: "
                          f"`kopt jobs attach {record.id}` to follow it")
        return 0
    try:
        result = _attach(record, quiet=args.json)
    except KeyboardInterrupt:
        print(f"kopt: detached; the job goes on: `kopt jobs attach {record.id}`", file=sys.stderr)
        return 130
    return _finish(result, as_json=args.json)
