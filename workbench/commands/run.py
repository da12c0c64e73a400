"""`kopt run CASE`: the four phases, with a progress line per step; `--resume RUN_ID` continues.

The pipeline runs in a worker thread; Ctrl-C sets its cancel event, the current step
finishes, the run stops cleanly (exit 130) and can be resumed with `kopt run --resume`.
A second Ctrl-C stops at once. `--json` prints the RunResult object as the last line.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

from rich.live import Live
from rich.markup import escape

from kopt.harness.errors import BadInputError, GitError, KoptError
from kopt.phases.events import (
    ITERATION,
    LOG,
    PHASE_FAILED,
    PHASE_FINISHED,
    PHASE_STARTED,
    TEXT_DELTA,
    TOOL_CALL,
    USAGE,
    Event,
)
from kopt.workbench.output import StepClock, console, err_console, print_json_line
from kopt.workbench.sandbox_option import add_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the phase pipeline on a case (or --resume a run)",
                       description="architect -> optimizer -> accelerator -> integrator. Every "
                                   "kernel iteration is a commit on branch kopt/<case>/<run-id>; "
                                   "manifests go to manifests/<run-id>/, the bundle to archive/.")
    p.add_argument("case", metavar="CASE", nargs="?", help="bundled case name or case directory")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a run from its last valid manifest")
    p.add_argument("--engineer", default=None,
                   help="offline | anthropic | replay:PATH (default: anthropic when "
                        "ANTHROPIC_API_KEY is set, else offline)")
    p.add_argument("--analyst", default=None, choices=["offline", "anthropic"],
                   help="Strategy Analyst of the architect (default: anthropic with the "
                        "anthropic engineer, else offline)")
    p.add_argument("--model", default=None,
                   help="Claude model of the anthropic engineer and analyst (default: "
                        "anthropic.model in .kopt/config.yaml, else claude-sonnet-5-5)")
    p.add_argument("--phases", default=None,
                   help="comma-separated subset in pipeline order, e.g. architect,optimizer")
    p.add_argument("--iterations", type=int, default=3, help="optimizer rounds (default 3)")
    p.add_argument("--target", default="local",
                   help="execution target (default: local); several, comma-separated, share "
                        "the evaluations (the first one times them)")
    p.add_argument("--parallel", type=int, default=None, metavar="N",
                   help="evaluate at most N candidates or configurations at once (default: "
                        "one per GPU of the targets)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="override the case's device (cpu = Triton interpreter, smoke inputs)")
    p.add_argument("--run-id", default=None, help="name the run (or continue its --phases)")
    p.add_argument("--yes", action="store_true",
                   help="do not ask: create the git repository if needed, accept API costs")
    add_option(p)
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def default_engineer() -> str:
    return "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"


class ProgressPrinter:
    """Renders pipeline events as lines (to stderr under --json, so stdout stays clean), with a
    live status line (spinner, current step, elapsed seconds) on a terminal."""

    def __init__(self, to_stderr: bool) -> None:
        self.out = err_console if to_stderr else console
        self.in_text = False
        self.clock = StepClock()
        self.live = Live(self.clock, console=self.out, refresh_per_second=4, transient=True)

    def __enter__(self) -> ProgressPrinter:
        if self.out.is_terminal:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def __call__(self, e: Event) -> None:
        if e.kind != TEXT_DELTA:
            phase = e.phase or "run"
            self.clock.restart(f"{phase}: {e.message}" if e.kind in (LOG, PHASE_STARTED)
                               else f"{phase}: working")
        if e.kind == TEXT_DELTA:
            self.out.print(escape(e.message), end="", style="dim", soft_wrap=True)
            self.in_text = True
            return
        if self.in_text:
            self.out.print()
            self.in_text = False
        tag = f"[bold]{e.phase or 'run'}[/bold]"
        if e.kind == PHASE_STARTED:
            self.out.print(f"{tag} ▶ started")
        elif e.kind == PHASE_FINISHED:
            ok = e.data.get("status") == "verified"
            self.out.print(f"{tag} {'[green]✓[/green]' if ok else '[red]✗[/red]'} "
                           f"{escape(e.message)}  [dim]{escape(str(e.data.get('manifest')))}[/dim]")
        elif e.kind == PHASE_FAILED:
            self.out.print(f"{tag} [red]✗ {escape(e.message)}[/red]")
        elif e.kind == ITERATION:
            good = e.data.get("verdict") == "accepted"
            self.out.print(f"{tag}   {'[green]' if good else '[yellow]'}{escape(e.message)}"
                           f"{'[/green]' if good else '[/yellow]'} "
                           f"[dim]{str(e.data.get('commit'))[:10]}[/dim]")
        elif e.kind == TOOL_CALL:
            self.out.print(f"{tag}   [dim]tool {escape(str(e.data.get('name')))}[/dim]")
        elif e.kind == USAGE:
            self.out.print(f"{tag}   [dim]{escape(e.message)}[/dim]")
        elif e.kind == LOG:
            self.out.print(f"{tag}   {escape(e.message)}", soft_wrap=True)


def summary_line(d: dict[str, Any]) -> str:
    """The run's last line: its outcome (`phases.outcome`), in colour."""
    from kopt.harness.speedup import format_speedup

    outcome = d.get("outcome") or {}
    verdict = outcome.get("verdict")
    if not d["verified"] or verdict == "not-verified":
        return "[red]not verified[/red]"
    if verdict == "cpu-verified":
        return f"[green]{escape(outcome['summary'])}[/green]"
    if verdict in ("keep-pytorch", "keep-compile"):
        return f"[green]verified[/green], [yellow]{escape(outcome['summary'])}[/yellow]"
    if outcome.get("summary"):
        return f"[green]verified[/green], {escape(outcome['summary'])}"
    label = d.get("timing_label")
    return ("[green]verified[/green]"
            + (f", {format_speedup(d['speedup_vs_eager'], label)} vs eager"
               if d["speedup_vs_eager"] else "")
            + (f", {format_speedup(d['speedup_vs_compile'], label)} vs torch.compile"
               if d["speedup_vs_compile"] else ""))


def breakdown_line(b: dict[str, Any]) -> str:
    """`architect 9.1 · optimizer 40.2 ... | jobs: candidate 4x 20.1 s (import 3.0), ...`"""
    phases = " · ".join(f"{k} {v:.1f}" for k, v in b.get("phases", {}).items())
    jobs = ", ".join(f"{k} {int(v.get('count', 0))}x {float(v.get('seconds', 0)):.1f}"
                     + (f" (import {float(v['import_s']):.1f})" if v.get("import_s") else "")
                     for k, v in (b.get("jobs") or {}).items())
    here = ", ".join(f"{k} {float(v):.1f}" for k, v in (b.get("parent") or {}).items()
                     if float(v) >= 0.05)
    unclocked = sum(float(v) for v in (b.get("unclocked") or {}).values())
    return (f"{phases} (total {b.get('total_s', 0):.1f})"
            + (f"; engineer {b['engineer_s']:.1f}" if b.get("engineer_s") else "")
            + (f"; worker jobs: {jobs}" if jobs else "")
            + (f"; in this process: {here}" if here else "")
            + (f"; no clock running {unclocked:.1f}" if unclocked >= 0.05 else ""))


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _prepare_repo(args: argparse.Namespace) -> None:
    from kopt.phases.history import init_workspace, open_repo

    try:
        with open_repo():
            return
    except GitError:
        if args.yes or _confirm("kopt records every iteration in git; create a repository here?"):
            init_workspace()
            return
        raise


def handle(args: argparse.Namespace) -> int:
    from kopt.phases.pipeline import resume_pipeline, run_pipeline

    if not args.case and not args.resume:
        raise BadInputError("kopt run needs a CASE or --resume RUN_ID",
                            fix="e.g. `kopt run layernorm_gelu`")
    engineer = args.engineer or default_engineer()
    if args.case and engineer == "anthropic" and not args.yes and sys.stdin.isatty():
        if not _confirm("the anthropic engineer calls the Anthropic API (billed); continue?"):
            return 2
    _prepare_repo(args)
    printer = ProgressPrinter(args.json)
    cancel = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            if args.resume:
                outcome["result"] = resume_pipeline(args.resume, events=printer, cancel=cancel)
            else:
                outcome["result"] = run_pipeline(
                    args.case, engineer=engineer,
                    analyst=args.analyst or ("anthropic" if engineer == "anthropic" else None),
                    phases=args.phases, iterations=args.iterations, run_id=args.run_id,
                    target=args.target, events=printer, cancel=cancel, device=args.device,
                    parallel=args.parallel,
                    engineer_options={"model": args.model} if args.model else None)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = err
        finally:
            done.set()

    # An Event, not Thread.join: a join interrupted by Ctrl-C can mark a live thread stopped.
    done = threading.Event()
    thread = threading.Thread(target=work, name="kopt-pipeline", daemon=True)
    with printer:
        thread.start()
        try:
            while not done.wait(0.2):
                pass
        except KeyboardInterrupt:
            cancel.set()
            err_console.print("kopt: stopping after the current step (Ctrl-C again to quit now)")
            try:
                while not done.wait(0.2):
                    pass
            except KeyboardInterrupt:
                return 130
    err = outcome.get("error")
    if err is not None:
        if isinstance(err, KoptError):
            if err.exit_code == 130:
                err_console.print(f"kopt: {err.one_line()}")
                return 130
            raise err
        raise err
    result = outcome["result"]
    if cancel.is_set():
        return 130
    d = result.to_dict()
    out = err_console if args.json else console
    out.print(f"run {d['run_id']} on branch {d['branch']}: {summary_line(d)}")
    breakdown = d.get("timing_breakdown") or {}
    if breakdown.get("phases"):
        out.print("[dim]seconds: " + escape(breakdown_line(breakdown)) + "[/dim]")
    if d["archive"]:
        out.print(f"archive: {d['archive']}   review: kopt history {d['case']} · "
                  f"kopt diff {d['run_id']} · kopt approve {d['run_id']}")
    if args.json:
        print_json_line(d)
    return 0 if d["verified"] else 1
