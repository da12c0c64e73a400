"""`--no-sandbox`: the option of every command that runs candidate code, and its warning.

Candidate workers run inside harness.sandbox unless this flag (or `KOPT_SANDBOX=0`) turns it
off. A run without the full sandbox says so on stderr, once per command, so that `--json`'s
last line stays the JSON object.
"""

from __future__ import annotations

import argparse
import os

from kopt.harness import sandbox
from kopt.workbench.output import err_console


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run candidate workers without the sandbox (network, files and "
                             "other processes reachable; also KOPT_SANDBOX=0); see docs/SANDBOX.md")


def apply(args: argparse.Namespace) -> None:
    """Switch the sandbox off for this process when asked, and print the warning line of a
    run that goes without it (off, or not fully enforced on this machine)."""
    if getattr(args, "no_sandbox", False):
        os.environ[sandbox.ENV_SWITCH] = "0"
    line = sandbox.warning_line()
    if line:
        err_console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)
