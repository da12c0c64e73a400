"""AutoBench re-times every run's best iteration from git and flags a slower newer run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kopt.phases import history
from kopt.phases.autobench import run_history


def _run(run_id: str, ms: float) -> None:
    _, wt = history.create_run_branch("layernorm_gelu", run_id)
    (wt / "kernels").mkdir()
    (wt / "kernels" / "layernorm_gelu.py").write_text(f"# fake_ms: {ms}\n")
    history.commit_iteration(wt, run_id=run_id, phase="optimizer", iteration=1,
                             case="layernorm_gelu", subject=f"iter 1 {run_id}", speedup=2.0 / ms,
                             verified=True, candidate="kernels/layernorm_gelu.py")


def test_run_history_flags_a_regression(workspace: Path) -> None:
    history.init_workspace(workspace)
    for run_id, ms in (("r1", 0.5), ("r2", 0.4), ("r3", 1.0)):
        _run(run_id, ms)
    timed: list[str] = []

    def measure(case: Any, variant: Any, **kw: Any) -> dict[str, Any]:
        if variant == "eager":
            return {"ok": True, "latency_ms": {"median": 2.0}, "timing_label": "cpu-interpreter"}
        text = Path(variant).read_text()
        timed.append(text)
        ms = float(re.search(r"fake_ms: ([0-9.]+)", text).group(1))
        return {"ok": True, "latency_ms": {"median": ms}}

    rows = run_history("layernorm_gelu", measure=measure)
    assert [r.run_id for r in rows] == ["r1", "r2", "r3"]
    assert [r.speedup for r in rows] == [4.0, 5.0, 2.0]
    assert [r.regression for r in rows] == [False, False, True]
    assert "5.00x" in rows[2].note
    assert timed == ["# fake_ms: 0.5\n", "# fake_ms: 0.4\n", "# fake_ms: 1.0\n"]
