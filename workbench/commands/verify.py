"""`kopt verify CASE CANDIDATE`: the verification tool from the command line.

Exit 0 accepted, 1 rejected, 2 bad input. One line per check; `--json` prints the report's
object (`accepted`, `case`, `candidate`, `device`, `checks`) as the last line. `--timing` says
where the verification's seconds went, on stderr and as the JSON object's `timing`
(`elapsed_s`; `steps`, the verifier's own; `jobs`, each worker job's seconds by step, as in
`kopt run --json`'s `timing_breakdown`).
"""

from __future__ import annotations

import argparse
import threading
import time

from rich.markup import escape

from kopt.harness.case import load_case
from kopt.harness.targets.resolve import resolve_target
from kopt.harness.verify import MAX_TIMEOUT_S, TIMEOUT_FACTOR, TIMEOUT_FLOOR_S, verify_candidate
from kopt.phases.breakdown import ClockedTarget, TimingBreakdown
from kopt.workbench.arguments import positive
from kopt.workbench.output import console, err_console, print_json_line
from kopt.workbench.sandbox_option import add_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="verify a candidate kernel file against a case",
                       description="Run every verification check on CANDIDATE (a .py file "
                                   "defining ModelNew) against CASE. Exit 0 accepted, 1 "
                                   "rejected, 2 bad input.")
    p.add_argument("case", metavar="CASE", help="bundled case name or case directory")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where to run (default: the case's device; cpu = Triton interpreter)")
    p.add_argument("--target", default=None, help="execution target (default: local)")
    p.add_argument("--timeout", type=positive("seconds"), default=None,
                   help=f"seconds the candidate's job may take (default: {TIMEOUT_FACTOR:g}x "
                        f"the baseline's reference job, at least {TIMEOUT_FLOOR_S:g} s on a GPU "
                        f"and {2 * TIMEOUT_FLOOR_S:g} s on the CPU, at most {MAX_TIMEOUT_S:g} s)")
    p.add_argument("--verbose", action="store_true", help="stream the workers' output")
    add_option(p)
    p.add_argument("--timing", action="store_true",
                   help="say where the seconds went: the verifier's steps and each worker job's "
                        "(stderr; `timing` in --json's object)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    case = load_case(args.case)
    on_line = (lambda line: err_console.print(f"[dim]worker: {escape(line)}[/dim]")) \
        if args.verbose else None
    breakdown = TimingBreakdown()
    target = ClockedTarget(resolve_target(args.target), breakdown)
    with _progress(f"verifying {args.candidate} against {case.name}", quiet=args.verbose):
        report = verify_candidate(case, args.candidate, device=args.device, target=target,
                                  timeout=args.timeout, on_line=on_line)
    extra = {}
    if args.timing:
        extra["timing"] = {"elapsed_s": round(report.elapsed_s, 3),
                           "steps": {k: round(v, 3) for k, v in report.steps.items()},
                           "jobs": breakdown.to_dict()["jobs"]}
        _print_timing(extra["timing"])
    if report.not_a_candidate:
        err_console.print(f"kopt: error: {escape(report.not_a_candidate)}", soft_wrap=True)
        if args.json:
            print_json_line({**report.to_dict(), **extra})
        return 2
    for check in report.checks:
        mark = ("[green]pass[/green]" if check.passed else
                "[red]FAIL[/red]" if check.ran else "[dim]not run[/dim]")
        console.print(f"{check.name:<22} {mark}  {escape(check.detail)}", soft_wrap=True)
    verdict = ("[green]accepted[/green]" if report.accepted
               else f"[red]rejected[/red] ({', '.join(report.failed())})")
    console.print(f"{report.case}: {escape(report.candidate)} {verdict} on {report.device} "
                  f"in {report.elapsed_s:.1f} s")
    if args.json:
        print_json_line({**report.to_dict(), **extra})
    return 0 if report.accepted else 1


def _print_timing(timing: dict) -> None:
    err_console.print(f"seconds: {timing['elapsed_s']:.2f} in all; " + ", ".join(
        f"{k} {v:.2f}" for k, v in timing["steps"].items() if v >= 0.01), soft_wrap=True)
    for kind, d in timing["jobs"].items():
        err_console.print(f"  {kind} job {d['seconds']:.2f} s "
                          f"({'standby' if d.get('standby') else 'cold'}): " + ", ".join(
                              f"{k} {v:.2f}" for k, v in (d.get("steps") or {}).items()
                              if v >= 0.01), soft_wrap=True)


class _progress:
    """A live line on stderr with the elapsed seconds while verification runs (a terminal
    only; nothing when stderr is not one, or when the workers' output is streamed)."""

    def __init__(self, what: str, *, quiet: bool = False) -> None:
        self.what, self.quiet = what, quiet
        self._stop = threading.Event()

    def __enter__(self) -> _progress:
        if self.quiet or not err_console.is_terminal:
            return self
        self._status = err_console.status(escape(self.what))
        self._status.start()
        start = time.monotonic()

        def tick() -> None:
            while not self._stop.wait(1.0):
                self._status.update(f"{escape(self.what)}  {time.monotonic() - start:.0f} s")

        threading.Thread(target=tick, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if hasattr(self, "_status"):
            self._status.stop()
