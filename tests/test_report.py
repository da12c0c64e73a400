"""report.md's text (phases.report.render)."""

from __future__ import annotations

import pytest

from kopt.phases.manifest import Manifest
from kopt.phases.report import render


def _text(timing: dict[str, object]) -> str:
    arch = Manifest(phase="architect", run_id="r1", case="rmsnorm", status="verified",
                    branch="kopt/run/r1", commit=None, timing_label="cuda-events",
                    details={"plan": {"targets": []}})
    return render({"architect": arch}, iterations=[], verification={}, timing=timing,
                  chart=None)


@pytest.mark.parametrize("kernel_ms", [0.07, None])
def test_kept_baselines_are_said_and_the_kernel_check_only_when_it_was_timed(
        kernel_ms: float | None) -> None:
    """Eager's and torch.compile's rows kept from this workspace's bench are dated; the
    kernel's output sample was checked against them only when the kernel was timed (a final
    verification that failed times no kernel)."""
    text = _text({"timing_label": "cuda-events", "eager_ms": 0.85, "compile_ms": 0.078,
                  "candidate_ms": kernel_ms, "baselines_timed_s_ago": 42.0})
    assert "Eager and torch.compile were timed 42 s before this run's" in text
    checked = "the kernel's output sample was checked against theirs" in text
    assert checked == (kernel_ms is not None)
    assert ("no kernel was timed" in text) == (kernel_ms is None)
