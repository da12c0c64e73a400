"""The one interface behind every candidate evaluation.

A `Target` runs a prepared job directory (see ARCHITECTURE.md, "Worker protocol") in a
worker process somewhere, streams its output lines, enforces a timeout and brings
`JOB_DIR/out/` back. Scaling out adds a target, not a rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

LineSink = Callable[[str], None]


@dataclass
class WorkerOutcome:
    """What came back from one worker job."""

    returncode: int | None
    """Exit status of the worker; None when it was killed on timeout."""
    timed_out: bool
    response: dict[str, Any] | None
    """`out/response.json`, or None when the worker died before writing it."""
    output_tail: str = ""
    """Last lines of the worker's stdout+stderr (for failure reports)."""
    host: str = "local"
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.response and self.response.get("ok")) and not self.timed_out

    def failure_reason(self) -> str:
        """One line saying why the job failed (timeout, crash signal, raised error)."""
        if self.timed_out:
            return f"timed out after {self.elapsed_s:.0f} s (hang or infinite loop?)"
        if self.response and self.response.get("error"):
            return str(self.response["error"])
        if self.returncode is not None and self.returncode < 0:
            import signal

            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = str(-self.returncode)
            return f"worker killed by signal {name} (crash, segfault or out of memory)"
        tail = self.output_tail.strip().splitlines()[-1:] or ["no output"]
        return f"worker exited with status {self.returncode}: {tail[0]}"


class Target(Protocol):
    """Runs worker jobs. `name` is what metrics record as the host."""

    name: str

    def run(
        self,
        job_dir: Path,
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        on_line: LineSink | None = None,
    ) -> WorkerOutcome: ...

    def describe(self) -> dict[str, Any]:
        """Reachability, Python/torch/triton versions, GPU name and ceilings."""
        ...


def read_response(job_dir: Path) -> dict[str, Any] | None:
    file = job_dir / "out" / "response.json"
    try:
        data = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


_REGISTRY: dict[str, Callable[[str], Target]] = {}


def register_scheme(scheme: str, factory: Callable[[str], Target]) -> None:
    """Make `resolve_target` build `factory(spec)` for specs starting with `scheme://`."""
    _REGISTRY[scheme] = factory
