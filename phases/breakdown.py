"""Where a run's seconds go: per phase, and per worker job kind.

`TimingBreakdown` is kept in `manifests/<run-id>/timing_breakdown.json` (a resumed run adds
to it) and copied into the integrator manifest (`details.timing_breakdown`) and into
`kopt run --json`. Worker jobs are clocked by `ClockedTarget`, a `Target` that runs each job
through the run's real target and records the job's kind (`candidate`, `reference`,
`measure`, `tune`, `bench`...), its wall seconds as the parent saw them, how the worker
started (`cold` or `standby`) and, when the worker says, the seconds spent importing the
candidate (`import_s`: Triton's compile of its kernels happens there or at first launch) and
the seconds of each step inside the job (`steps`, harness.steps: CUDA's start, the inputs, the
first call, the timed loop, the profiler, the supervisor's reference...).
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE = "timing_breakdown.json"


@dataclass
class TimingBreakdown:
    """Seconds per phase and per worker job kind of one run."""

    phases: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each phase (summed over resumes)."""
    jobs: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per job kind: `count`, `seconds` (parent wall), `cold`, `standby`, `import_s`, and
    `steps` (seconds per step inside the jobs, summed, where the worker reports them)."""
    engineer_s: float = 0.0
    """Seconds the engineers spent writing candidates (in the parent, no worker)."""
    parent: dict[str, float] = field(default_factory=dict)
    """Seconds of named work in this process, outside any worker job: the verifier's draws
    (fresh inputs drawn and staged) and judge (outputs compared), the architect's per-region
    profile, summed over the run."""
    unclocked: dict[str, float] = field(default_factory=dict)
    """Per phase, the wall seconds during which no job, engineer or named parent work was
    running (git, manifests, reports, imports in this process...)."""
    spans: list[tuple[float, float]] = field(default_factory=list, repr=False, compare=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        jobs = {k: {n: _rounded(v) for n, v in d.items()} for k, d in sorted(self.jobs.items())}
        return {"phases": {k: round(v, 3) for k, v in self.phases.items()},
                "jobs": jobs, "engineer_s": round(self.engineer_s, 3),
                "parent": {k: round(v, 3) for k, v in self.parent.items()},
                "unclocked": {k: round(v, 3) for k, v in self.unclocked.items()},
                "total_s": round(sum(self.phases.values()), 3),
                "jobs_s": round(sum(d.get("seconds", 0.0) for d in self.jobs.values()), 3)}

    @classmethod
    def load(cls, run_dir: Path) -> TimingBreakdown:
        try:
            data = json.loads((run_dir / FILE).read_text())
        except (OSError, ValueError):
            return cls()
        return cls(phases={k: float(v) for k, v in (data.get("phases") or {}).items()},
                   jobs={k: dict(v) for k, v in (data.get("jobs") or {}).items()},
                   engineer_s=float(data.get("engineer_s") or 0.0),
                   parent={k: float(v) for k, v in (data.get("parent") or {}).items()},
                   unclocked={k: float(v) for k, v in (data.get("unclocked") or {}).items()})

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / f".{FILE}.tmp"
        with self.lock:
            tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(tmp, run_dir / FILE)

    def add_job(self, kind: str, seconds: float, response: dict[str, Any] | None) -> None:
        with self.lock:
            d = self.jobs.setdefault(kind, {"count": 0, "seconds": 0.0, "cold": 0,
                                            "standby": 0, "import_s": 0.0})
            d["count"] = d.get("count", 0) + 1
            d["seconds"] = d.get("seconds", 0.0) + seconds
            started = (response or {}).get("worker_started")
            if started in ("cold", "standby"):
                d[started] = d.get(started, 0) + 1
            imported = (response or {}).get("import_s")
            if isinstance(imported, int | float):
                d["import_s"] = d.get("import_s", 0.0) + float(imported)
            steps = (response or {}).get("steps")
            if isinstance(steps, dict):  # seconds per step inside the job (harness.steps)
                into = d.setdefault("steps", {})
                for name, seconds in steps.items():
                    if isinstance(seconds, int | float):
                        into[str(name)] = into.get(str(name), 0.0) + float(seconds)

    def add_parent(self, name: str, seconds: float) -> None:
        with self.lock:
            self.parent[name] = self.parent.get(name, 0.0) + float(seconds)

    def add_verification(self, report: Any, judge_only: bool = False) -> None:
        """A verification's own work in this process (its jobs are clocked as jobs): its
        draws, truth and judgement by part; `judge_only` for a report that shared another's
        draws and jobs (verify_candidates)."""
        steps = getattr(report, "steps", None) or {}
        for step, seconds in steps.items():
            if step in ("reference", "candidate") or not isinstance(seconds, int | float):
                continue
            if step.partition(": ")[0] in steps and ": " in step:  # a part of a step counted whole
                continue
            if not judge_only or step.startswith("judge"):
                self.add_parent(f"verify {step}", seconds)

    def covered(self) -> Any:
        """A stretch whose seconds other records account for (a verification: its jobs and
        steps): counted as clocked, added nowhere."""
        return self._clock(lambda _s: None)

    def add_span(self, t0: float, t1: float) -> None:
        """A clocked stretch of the current phase (a job, the engineer, named parent work)."""
        with self.lock:
            self.spans.append((t0, t1))

    @contextmanager
    def _clock(self, add: Any) -> Any:
        """The block's wall seconds, handed to `add` however the block ends."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            t1 = time.monotonic()
            add(t1 - t0)
            self.add_span(t0, t1)

    def clocked(self, name: str) -> Any:
        """Named work in this process (`parent`)."""
        return self._clock(lambda s: self.add_parent(name, s))

    @contextmanager
    def phase(self, name: str) -> Any:
        """A phase's wall seconds, and the part of them no other clock covered (`unclocked`)."""
        with self.lock:
            self.spans = []
        t0 = time.monotonic()
        try:
            yield
        finally:
            t1 = time.monotonic()
            with self.lock:
                covered = _union_length(self.spans, t0, t1)
                self.phases[name] = self.phases.get(name, 0.0) + (t1 - t0)
                self.unclocked[name] = self.unclocked.get(name, 0.0) + max(
                    0.0, (t1 - t0) - covered)
                self.spans = []

    def engineer(self) -> Any:
        def add(seconds: float) -> None:
            with self.lock:
                self.engineer_s += seconds
        return self._clock(add)


def _union_length(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by at least one span (overlapping jobs count once)."""
    total, reach = 0.0, lo
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, hi)
        if b > a:
            total += b - a
            reach = b
    return total


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def read_breakdown(run_dir: Path) -> dict[str, Any]:
    """The run's breakdown as `kopt run --json` prints it ({} when none was recorded)."""
    if not (run_dir / FILE).is_file():
        return {}
    return TimingBreakdown.load(run_dir).to_dict()


def _job_kind(job_dir: Path) -> str:
    try:
        return str(json.loads((Path(job_dir) / "request.json").read_text()).get("job") or "job")
    except (OSError, ValueError):
        return "job"


class ClockedTarget:
    """A `Target` that runs every job through `inner` and records it in `breakdown`."""

    def __init__(self, inner: Any, breakdown: TimingBreakdown) -> None:
        self.inner = inner
        self.breakdown = breakdown

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: Any = None) -> Any:
        kind = _job_kind(job_dir)
        t0 = time.monotonic()
        outcome = self.inner.run(job_dir, timeout=timeout, env=env, on_line=on_line)
        t1 = time.monotonic()
        self.breakdown.add_job(kind, t1 - t0, getattr(outcome, "response", None))
        self.breakdown.add_span(t0, t1)
        return outcome

    def __getattr__(self, name: str) -> Any:  # name, gpu, describe(), use_standby...
        return getattr(self.inner, name)
