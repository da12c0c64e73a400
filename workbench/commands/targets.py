"""`kopt targets`: where evaluations can run (local + targets.yaml), each one checked."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from kopt.harness.errors import KoptError
from kopt.harness.targets.resolve import resolve_target
from kopt.workbench.output import console, print_json_line

CEILINGS_TIMEOUT_S = 180.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("targets", help="list and check execution targets (local, ssh://, ray://)")
    p.add_argument("specs", nargs="*", metavar="TARGET",
                   help="check these targets (a spec or a targets.yaml name) instead of all")
    p.add_argument("--no-ceilings", action="store_true",
                   help="skip measuring GPU peak rates (cached per GPU after the first time)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def check_target(name: str, spec: str, *, ceilings: bool = True) -> dict[str, Any]:
    """One row: reachable, Python/torch/triton, GPU and its measured ceilings."""
    row: dict[str, Any] = {"name": name, "spec": spec}
    try:
        target = resolve_target(name)  # a spec, 'local', or a targets.yaml name
        info = target.describe()
    except KoptError as err:
        return {**row, "reachable": False, "error": err.one_line()}
    row.update(info)
    row.setdefault("reachable", True)
    if row["reachable"] and row.get("gpu") and ceilings:
        row["ceilings"] = _measure_ceilings(target)
    return row


def _measure_ceilings(target: Any) -> dict[str, Any] | None:
    from kopt.harness.job import cleanup, run_job, stage_job

    job_dir = stage_job("ceilings", {})
    try:
        outcome = run_job(target, job_dir, timeout=CEILINGS_TIMEOUT_S)
        if not outcome.ok:
            return {"error": outcome.failure_reason()}
        return (outcome.response or {}).get("ceilings")
    except KoptError as err:
        return {"error": err.one_line()}
    finally:
        cleanup(job_dir)


def handle(args: argparse.Namespace) -> int:
    from kopt.harness.targets.registry import load_targets

    if args.specs:
        wanted = [(s, s) for s in args.specs]
    else:
        wanted = [("local", "local")] + [(n, e.spec) for n, e in load_targets().items()]
    rows = [check_target(name, spec, ceilings=not args.no_ceilings) for name, spec in wanted]
    if args.json:
        print_json_line({"targets": rows})
    else:
        _print_table(rows)
    return 0 if all(r.get("reachable") for r in rows) else 1


def _print_table(rows: list[dict[str, Any]]) -> None:
    table = Table(title="kopt targets")
    for column in ("target", "host", "python", "torch", "triton", "GPU", "ceilings", "status"):
        table.add_column(column, overflow="fold")
    for r in rows:
        spec = str(r["spec"]).split("?", 1)[0]  # options such as ?python= make it unreadable
        label = r["name"] if r["name"] == r["spec"] else f"{r['name']}\n[dim]{spec}[/dim]"
        if not r.get("reachable"):
            table.add_row(label, "", "", "", "", "", "", f"[red]{r.get('error', 'unreachable')}[/red]")
            continue
        gpu = r.get("gpu") or {}
        gpu_text = f"{gpu.get('name')} x{gpu.get('count', 1)}" if gpu else "none (CPU)"
        table.add_row(label, str(r.get("host", "")), str(r.get("python", "")),
                      str(r.get("torch") or "[red]missing[/red]"),
                      str(r.get("triton") or "[red]missing[/red]"), gpu_text,
                      _ceilings_text(r.get("ceilings"), bool(gpu)), _status_text(r))
    console.print(table)


def _ceilings_text(ceil: dict[str, Any] | None, has_gpu: bool) -> str:
    if not has_gpu:
        return "-"
    if not ceil:
        return "not measured"
    if ceil.get("error"):
        return f"[red]{ceil['error']}[/red]"
    return (f"copy {ceil.get('copy_gbps')} GB/s, bf16 {ceil.get('bf16_tflops')} TFLOP/s, "
            f"fp32 {ceil.get('fp32_tflops')} TFLOP/s")


def _status_text(row: dict[str, Any]) -> str:
    notes = ["ok"]
    if row.get("kind") == "ray" and row.get("resources_note"):
        notes.append(str(row["resources_note"]))
    if row.get("disk_free_bytes") is not None:
        notes.append(f"{row['disk_free_bytes'] / 2**30:.0f} GiB free")
    return ", ".join(notes)
