"""AutoBench: re-time the best iteration of every run of a case on this machine.

`run_history(case)` reads the runs from git (`phases.history.list_runs`), takes each run's
best verified iteration, checks its kernel out of git (`git show COMMIT:kernels/<case>.py`),
and times it with eager as the reference in the same session. Runs are ordered by time; a
run whose speedup now falls more than `REGRESSION_TOLERANCE` below the best earlier run's
is flagged as a regression (a newer commit that is slower on this machine). `kopt bench
--history CASE` prints these rows.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kopt.harness.case import Case, load_case
from kopt.phases.events import LOG, Event, EventSink, null_sink
from kopt.phases.history import list_runs, show_file

REGRESSION_TOLERANCE = 0.05
"""A speedup 5% below the best earlier run's is a regression (beyond timing noise)."""


@dataclass
class HistoryRow:
    """One run's best iteration, re-timed now."""

    run_id: str
    commit: str
    iteration: int
    recorded_speedup: float | None
    """The speedup in the commit's trailer (when it was made, maybe elsewhere)."""
    median_ms: float | None
    eager_ms: float | None
    speedup: float | None
    """Measured now, on this machine."""
    timing_label: str
    regression: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(m: dict[str, Any]) -> float | None:
    if m.get("ok", True) and m.get("latency_ms"):
        return float(m["latency_ms"]["median"])
    return None


def run_history(case: Case | str, *, device: str | None = None, target: str | None = None,
                events: EventSink = null_sink, root: Path | None = None,
                measure: Callable[..., dict[str, Any]] | None = None) -> list[HistoryRow]:
    """Re-time every run's best iteration of `case`; flag regressions across commits."""
    case = case if isinstance(case, Case) else load_case(case)
    if measure is None:
        from kopt.harness.runner import measure_variant

        def measure(c: Case, variant: Any, **kw: Any) -> dict[str, Any]:
            return measure_variant(c, variant, device=device, target=target, **kw)

    runs = [r for r in list_runs(case.name, root) if r.best() is not None]
    if not runs:
        return []
    events(Event(LOG, "", f"timing eager for {case.name}"))
    eager_m = measure(case, "eager", label="history-eager")
    eager = _median(eager_m)
    label = str(eager_m.get("timing_label", ""))
    rows: list[HistoryRow] = []
    best_so_far: float | None = None
    with tempfile.TemporaryDirectory(prefix="kopt-history-") as tmp:
        for r in runs:
            it = r.best()
            assert it is not None
            events(Event(LOG, "", f"timing run {r.run_id} iteration {it.iteration} "
                                  f"({it.commit[:10]})"))
            kernel = Path(tmp) / f"{case.name}_{it.commit[:10]}.py"
            try:
                kernel.write_text(show_file(it.commit, it.candidate, root))
            except Exception as err:  # noqa: BLE001 - a lost commit is a row, not a crash
                rows.append(HistoryRow(r.run_id, it.commit, it.iteration, it.speedup, None,
                                       eager, None, label, False, f"kernel unreadable: {err}"))
                continue
            m = measure(case, kernel, label=f"history-{it.commit[:10]}")
            median = _median(m)
            speedup = eager / median if eager and median else None
            regression = (speedup is not None and best_so_far is not None
                          and speedup < best_so_far * (1 - REGRESSION_TOLERANCE))
            note = "" if median is not None else str(m.get("error", "timing failed"))[:200]
            if regression:
                note = f"slower than an earlier run's {best_so_far:.2f}x"
            rows.append(HistoryRow(r.run_id, it.commit, it.iteration, it.speedup, median,
                                   eager, speedup, label, regression, note))
            if speedup is not None:
                best_so_far = max(best_so_far or 0.0, speedup)
    return rows
