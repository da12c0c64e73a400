"""One way to write a speedup, and when a speedup is real.

Every face of kopt (the run summary, `kopt history`, `kopt bench`, the report, the archive
name, the TUI) writes a speedup with `format_speedup`: three significant digits (`2.57x`,
`0.83x`, `12.4x`, `0.0012x`), and no figure at all for a timing of the CPU interpreter, which
measures Triton's interpreter, not a kernel (`—`, "no speed measured").

`beats(fast_ms, slow_ms, ...)` says whether one median beats another by more than the
timer's noise: the larger half-spread (p20 to p80) of the two timings, and never less than
`NOISE_FLOOR`.
"""

from __future__ import annotations

from typing import Any

from kopt.harness.device import CPU_TIMING_LABEL

NO_FIGURE = "—"
NO_SPEED = "no speed measured"
CPU_VERIFIED = "verified (CPU interpreter: no speed measured)"
NOISE_FLOOR = 0.02
"""Relative difference below which two medians are not told apart: the GPU timer's run-to-run
spread (under 1% for GEMMs, up to 2% for short memory-bound kernels on the H100, BENCHMARKS.md
2026-11-24)."""


class Speedup(float):
    """A speedup that knows the label of the timings it was computed from (so that an
    interpreter figure is never written as a speedup, wherever it travels)."""

    timing_label: str | None

    def __new__(cls, value: float, timing_label: str | None = None) -> Speedup:
        obj = super().__new__(cls, value)
        obj.timing_label = timing_label
        return obj


def speed_measured(timing_label: str | None) -> bool:
    """Do timings with this label measure speed? (`cpu-interpreter` does not.)"""
    return timing_label != CPU_TIMING_LABEL


def format_speedup(value: float | None, timing_label: str | None = None, *,
                   missing: str = NO_FIGURE) -> str:
    """`2.57x`, `0.83x`, `12.4x`, `0.0012x` (three significant digits); `missing` (`—`) when
    there is no figure or when the timings are the CPU interpreter's."""
    label = timing_label or getattr(value, "timing_label", None)
    if value is None or not speed_measured(label):
        return missing
    v = float(value)
    if v != v or v <= 0:  # NaN, or nonsense
        return missing
    if v >= 100:
        return f"{v:.0f}x"
    if v >= 10:
        return f"{v:.1f}x"
    if v >= 0.1:
        return f"{v:.2f}x"
    return f"{v:.2g}x"


def speedup_slug(value: float | None, timing_label: str | None = None) -> str:
    """The speedup in a folder name: `2.57x`, or `cpu-verified` for interpreter timings and
    `nax` when there is no figure."""
    label = timing_label or getattr(value, "timing_label", None)
    if not speed_measured(label):
        return "cpu-verified"
    text = format_speedup(value, label, missing="nax")
    return text


def noise(*timings: dict[str, Any] | None) -> float:
    """The relative noise of comparing these timings (`{"median", "p20", "p80"}` each): the
    largest half-spread p20..p80 over the median, at least `NOISE_FLOOR`."""
    worst = NOISE_FLOOR
    for t in timings:
        if not t:
            continue
        median, p20, p80 = t.get("median"), t.get("p20"), t.get("p80")
        if median and p20 is not None and p80 is not None and median > 0:
            worst = max(worst, (float(p80) - float(p20)) / 2 / float(median))
    return worst


def beats(fast_ms: float | None, slow_ms: float | None, rel_noise: float = NOISE_FLOOR) -> bool:
    """Is `fast_ms` faster than `slow_ms` by more than `rel_noise`?"""
    if not fast_ms or not slow_ms:
        return False
    return float(slow_ms) / float(fast_ms) > 1.0 + rel_noise
