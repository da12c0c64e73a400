"""`kopt suite DIR...`: the offline engineer on every problem file of the directories.

One row per problem (verified or the failing check, kernels, % of floor, speedup vs eager and
vs torch.compile, codegen seconds), a summary overall and per level, a progress bar while it
runs. Exit 0 when every problem verified, 1 when one did not, 2 bad input, 130 when stopped
(Ctrl-C or SIGTERM, as `timeout` sends: the problems still running get an `unfinished` row
that says the step they were in). See docs/SUITE.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from dataclasses import replace
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kopt.harness.errors import BadInputError
from kopt.harness.sizing import DEFAULT_MAX_ELEMENTS
from kopt.phases.outcome import KEEP_PYTORCH
from kopt.phases.suite import (
    FULL_TIMING,
    PROBLEM_TIMEOUT_S,
    QUICK_TIMING,
    Problem,
    SuiteRow,
    discover,
    row_from_dict,
    rows_file,
    run_suite,
    unfinished_rows,
    write_reports,
)
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("suite", help="run the offline engineer on a directory of KernelBench problems",
                       description="Import, generate, verify and (on a GPU) time every problem "
                                   "file of the directories, in a temporary workspace.")
    p.add_argument("dirs", metavar="DIR", nargs="+", help="directories of problem .py files (or of folders of them: a KernelBench "
                        "root runs its level folders)")
    p.add_argument("--rounds", type=int, default=1, help="timing rounds per problem (median)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="at most N problems per directory (the first by name)")
    p.add_argument("--filter", default=None, metavar="SUBSTR",
                   help="only problem files whose name contains SUBSTR")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="only the K-th of N interleaved parts of the problems (1/3, 2/3, 3/3 "
                        "cover the suite once between three runs)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="problems prepared at once (default: 1 on the CPU, up to 4 on a GPU)")
    p.add_argument("--full-timing", action="store_true",
                   help="the timer's default stopping rule (1%% error) instead of the quick one")
    p.add_argument("--timeout", type=float, default=PROBLEM_TIMEOUT_S,
                   help=f"seconds per worker job of one problem (default {PROBLEM_TIMEOUT_S:g}; a "
                        "verification gets 20x its reference job's time where that is more)")
    p.add_argument("--max-elements", type=int, default=DEFAULT_MAX_ELEMENTS, metavar="N",
                   help="GPU: a problem whose largest input or output tensor holds more than N "
                        "elements runs on fewer rows (its leading size halved until it fits; "
                        f"default {DEFAULT_MAX_ELEMENTS:,}, 2**27); 0 runs every file's own sizes")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when a GPU is visible, else cpu (verification only)")
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="work in DIR and keep it (cases, candidates); default a temporary folder")
    p.add_argument("--out", metavar="FILE", default=None,
                   help="write FILE.md, FILE.json and FILE.png (chart of speedups)")
    p.add_argument("--resume", action="store_true",
                   help="with --out FILE: skip the problems FILE.rows.jsonl already has a row "
                        "for (an earlier run cut short) and report them with the new ones")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _line(row: SuiteRow) -> str:
    steps = " ".join(f"{k} {v:.1f}s" for k, v in row.seconds.items())
    if row.verified:
        what = "[green]verified[/green]"
        if row.speedup_vs_eager:
            what += f" {_x(row.speedup_vs_eager)} eager, {_x(row.speedup_vs_compile)} compile"
        if row.outcome == KEEP_PYTORCH:
            what += " (no speedup: keep PyTorch)"
        torch_regions = [g for g, c in row.regions.items() if c == "torch"]
        if torch_regions:
            what += f", {', '.join(torch_regions)} kept in PyTorch (faster there)"
        if row.regions.get("BACKEND") == "cublas":
            what += ", products on cuBLAS (faster there)"
    else:
        what = f"[red]{escape(row.status)}[/red]: {escape(row.detail[:100])}"
    if row.scaled:
        what += f" [dim](scaled: {escape(row.scaled.split(' for ')[0])})[/dim]"
    return f"{escape(row.problem)}: {what} ({steps})"


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a device call's time limit, `timeout`) stops the suite as Ctrl-C does."""
    raise KeyboardInterrupt


def _earlier_rows(path: Path, names: set[str]) -> list[SuiteRow]:
    """The rows an earlier run wrote to `path` for problems among `names` (the last row of a
    problem wins); a line cut off by the kill that stopped that run is skipped, and so is an
    `unfinished` row (its problem runs again)."""
    rows: dict[str, SuiteRow] = {}
    if not path.is_file():
        return []
    for line in path.read_text().splitlines():
        try:
            row = row_from_dict(json.loads(line))
        except (ValueError, TypeError):
            continue
        if row.problem in names and row.status != "unfinished":
            rows[row.problem] = row
    return list(rows.values())


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise BadInputError(f"--shard {text!r} is not K/N with 1 <= K <= N",
                            fix="pass e.g. --shard 1/3, then 2/3 and 3/3")
    return int(k), int(n)


def handle(args: argparse.Namespace) -> int:
    if args.max_elements < 0:
        raise BadInputError(f"--max-elements {args.max_elements} is negative",
                            fix="pass a number of elements, or 0 to keep every file's sizes")
    if args.rounds < 1 or (args.limit is not None and args.limit < 1) or args.timeout <= 0:
        raise BadInputError(f"--rounds {args.rounds} / --limit {args.limit} / --timeout "
                            f"{args.timeout:g} must be positive", fix="pass numbers above 0")
    problems = discover(args.dirs, filter_text=args.filter, limit=args.limit,
                        shard=_shard(args.shard))
    partial = rows_file(Path(args.out)) if args.out else None
    earlier: list[SuiteRow] = []
    if args.resume:
        if partial is None:
            raise BadInputError("--resume needs --out FILE: the earlier run's rows are read "
                                "from FILE.rows.jsonl", fix="pass the --out of the run to resume")
        every = problems
        earlier = _earlier_rows(partial, {p.name for p in problems})
        done = {r.problem for r in earlier}
        problems = [p for p in problems if p.name not in done]
        if not args.json:
            console.print(f"resuming: {len(done)} problem(s) already have a row in {partial}; "
                          f"{len(problems)} to run")
    timing = FULL_TIMING if args.full_timing else QUICK_TIMING
    progress = Progress(TextColumn("[bold]suite[/bold]"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.description}"),
                        console=console, transient=True, disable=args.json)
    task = progress.add_task("", total=len(problems))
    running: list[str] = []

    def on_start(problem: Problem) -> None:
        running.append(problem.name)
        progress.update(task, description=escape(", ".join(running[-2:])))
        if not args.json and not console.is_terminal:  # a log (no progress bar): say it began
            progress.console.print(f"started {escape(problem.name)}", highlight=False)

    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        if not args.resume:
            partial.write_text("")
        elif partial.is_file() and partial.stat().st_size and \
                not partial.read_text().endswith("\n"):
            with partial.open("a") as f:  # end the line a kill cut off: new rows start clean
                f.write("\n")

    stopped: set[str] = set()
    """Problems given an `unfinished` row when the suite was stopped: a row their thread still
    reports while the process exits (a worker refused at shutdown) is not theirs to keep."""

    def on_row(row: SuiteRow) -> None:
        if row.problem in stopped:
            return
        if row.status == "unfinished":
            stopped.add(row.problem)
        if row.problem in running:
            running.remove(row.problem)
        if partial is not None:  # each row as it ends: a suite cut short keeps what it did
            with partial.open("a") as f:
                f.write(json.dumps(row.to_dict(), default=str) + "\n")
        progress.console.print(_line(row))
        progress.update(task, advance=1, description=escape(", ".join(running[-2:])))

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        with progress:
            result = run_suite(problems, device=args.device, jobs=args.jobs, rounds=args.rounds,
                               timing=timing, timeout=args.timeout,
                               workdir=Path(args.keep) if args.keep else None,
                               max_elements=args.max_elements, on_start=on_start, on_row=on_row)
    except KeyboardInterrupt:
        for row in unfinished_rows():  # where each running problem's time went, kept
            on_row(row)
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if earlier:  # the earlier run's rows and this run's, in the order discovered
        order = {p.name: i for i, p in enumerate(every)}
        result = replace(result, rows=sorted([*earlier, *result.rows],
                                             key=lambda r: order[r.problem]))
    summary = result.summary()
    written = write_reports(result, Path(args.out)) if args.out else []
    if args.json:
        print_json_line({**summary, "rows": [r.to_dict() for r in result.rows],
                         "written": [str(p) for p in written]})
    else:
        _print_tables(result)
        for p in written:
            console.print(f"wrote {p}")
    return 0 if summary["verified"] == summary["problems"] else 1


def _print_tables(result) -> None:  # type: ignore[no-untyped-def]
    table = Table(title=f"kopt suite ({result.device})")
    for col in ("problem", "verified", "kernels", "% of floor", "vs eager", "vs compile",
                "outcome", "codegen s", "total s"):
        table.add_column(col, no_wrap=col == "problem")
    for r in result.rows:
        table.add_row(escape(r.problem), "yes" if r.verified else f"[red]{escape(r.status)}[/red]",
                      "-" if r.kernels is None else str(r.kernels),
                      "-" if r.pct_of_floor is None else f"{r.pct_of_floor:.0f}%",
                      _x(r.speedup_vs_eager), _x(r.speedup_vs_compile), r.outcome or "-",
                      "-" if r.codegen_s is None else f"{r.codegen_s:.2f}", f"{r.total_s:.1f}")
    console.print(table)
    s = result.summary()
    summary = Table(title="summary")
    for col in ("level", "problems", "verified", "timed", "geomean vs eager",
                "geomean vs compile", "slower than eager", "keep PyTorch", "result vs eager"):
        summary.add_column(col)
    for name, st in [*s["levels"].items(), ("all", s)]:
        summary.add_row(name, str(st["problems"]), str(st["verified"]), str(st["timed"]),
                        _x(st["geomean_vs_eager"]), _x(st["geomean_vs_compile"]),
                        str(st["slower_than_eager"]), str(st["keep_pytorch"]),
                        _x(st["geomean_result_vs_eager"]))
    console.print(summary)
    if result.device != "cuda":
        console.print("CPU (Triton interpreter, smoke inputs): verification only, no timings.")
