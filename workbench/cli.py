"""The `kopt` command line: one argparse tree built from `workbench/commands/*.py`.

Each command module exposes `register(subparsers)`, which adds its parser and sets
`func=handler(args) -> int`. Conventions (ARCHITECTURE.md): `--json` prints one JSON object
as the last line; exit 0 ok, 1 negative verdict, 2 bad input, 130 interrupted; a
`KoptError` prints as one line, a traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kopt.harness.errors import KoptError

# Order is the order of `kopt --help`.
COMMAND_MODULES = [
    "kopt.workbench.commands.cases",
    "kopt.workbench.commands.new",
    "kopt.workbench.commands.import_kernelbench",
    "kopt.workbench.commands.baseline",
    "kopt.workbench.commands.doctor",
    "kopt.workbench.commands.verify",
    "kopt.workbench.commands.bench",
    "kopt.workbench.commands.suite",
    "kopt.workbench.commands.run",
    "kopt.workbench.commands.manifest",
    "kopt.workbench.commands.history",
    "kopt.workbench.commands.memory",
    "kopt.workbench.commands.decide",
    "kopt.workbench.commands.diff",
    "kopt.workbench.commands.export",
    "kopt.workbench.commands.init",
    "kopt.workbench.commands.targets",
    "kopt.workbench.commands.jobs",
    "kopt.workbench.commands.serve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kopt",
        description="kopt: make PyTorch models faster with fused, verified Triton kernels.",
        epilog="Run `kopt-tui` for the interactive workbench. Docs: README.md, docs/CASES.md.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # a command not built yet
                continue
            raise
        module.register(sub)
    return parser


def _check_names(args: argparse.Namespace) -> None:
    """Run ids become folders and branch names: refuse `../x`, `/abs` or `my run` before any
    command writes anything."""
    from kopt.harness.names import check_name

    for attr, what in (("run_id", "run id"), ("resume", "run id")):
        value = getattr(args, attr, None)
        if isinstance(value, str):
            check_name(value, what)


def main(argv: list[str] | None = None) -> int:
    """The `kopt` command. Run as the process's own command (`argv` None: the console script,
    `python -m kopt`), the process ends as soon as the command has (`_leave`)."""
    if argv is None:  # the console script: a warm server may run it (workbench/serve.py)
        from kopt.workbench.serve import relay

        served = relay(sys.argv[1:])
        if served is not None:
            _leave(served)
            return served
    code = _command(argv)
    if argv is None:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """End this process now, without the interpreter's teardown: after `import torch`, dynamo
    and triton, freeing every module's objects one by one takes 0.5-0.75 s of a command's wall
    time (2-core CPU, 2026-11-28) and does nothing a finished command needs. What a normal exit
    does first is still done, in its order: threads' exit hooks (an executor's workers told to
    stop) and every non-daemon thread joined, then the atexit hooks (standby workers ended,
    temporary folders removed), then the output flushed."""
    import atexit
    import os
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None or threading.current_thread() is not threading.main_thread():
        return  # another Python, or not the main thread: the ordinary exit
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - another Python's internals: the ordinary exit
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    os._exit(code)


def _command(argv: list[str] | None) -> int:
    from kopt.workbench import early_workers

    early_workers.start(sys.argv[1:] if argv is None else list(argv))  # before torch's import
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _check_names(args)
        if hasattr(args, "no_sandbox"):  # a command that runs candidates (sandbox_option.py)
            from kopt.workbench.sandbox_option import apply

            apply(args)
        return int(args.func(args) or 0)
    except KoptError as err:
        if args.debug:
            raise
        print(f"kopt: error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("kopt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
