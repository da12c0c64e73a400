"""Printing for the CLI: Rich tables for people, one JSON last line for machines."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def print_json_line(obj: dict[str, Any]) -> None:
    """The `--json` contract: one JSON object, alone on the last line of stdout."""
    sys.stdout.flush()
    console.file.flush()
    print(json.dumps(obj, default=str, separators=(",", ":")), flush=True)
