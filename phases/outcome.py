"""What a run ends with: a faster kernel, or the honest advice to keep what the user has.

A run never hands on a regression as its result. Its final kernel (the fastest verified
iteration, tuned) is compared with eager and torch.compile, timed side by side:

- `faster`: beats eager and torch.compile by more than the timer's noise (each comparison
  allowing for the larger p20-p80 half-spread of its own two timings, at least the noise floor);
- `keep-compile`: beats eager, but not torch.compile ("keep torch.compile");
- `keep-pytorch`: does not beat eager beyond noise ("no speedup: keep PyTorch");
- `cpu-verified`: timed by the CPU interpreter, which measures no speed
  ("verified (CPU interpreter: no speed measured)");
- `not-verified`: the final verification (or its timing) failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kopt.harness.speedup import (
    CPU_VERIFIED,
    Speedup,
    beats,
    format_speedup,
    noise,
    speed_measured,
)

FASTER = "faster"
KEEP_COMPILE = "keep-compile"
KEEP_PYTORCH = "keep-pytorch"
CPU_ONLY = "cpu-verified"
NOT_VERIFIED = "not-verified"
VERDICTS = (FASTER, KEEP_COMPILE, KEEP_PYTORCH, CPU_ONLY, NOT_VERIFIED)
KEEP_PYTORCH_TEXT = "no speedup: keep PyTorch"
KEEP_COMPILE_TEXT = "keep torch.compile"


@dataclass
class Outcome:
    """The run's result in one word and one line."""

    verdict: str
    """One of `VERDICTS`."""
    summary: str
    """What the user reads: "2.57x vs eager, 1.31x vs torch.compile", "no speedup: keep
    PyTorch (0.83x vs eager)", "verified (CPU interpreter: no speed measured)"..."""
    noise: float | None = None
    """The relative timer noise the comparisons allowed for (GPU only)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def speed_measured(self) -> bool:
        return self.verdict in (FASTER, KEEP_COMPILE, KEEP_PYTORCH)


def decide(*, verified: bool, timing_label: str, eager: dict[str, Any] | None,
           compiled: dict[str, Any] | None, candidate: dict[str, Any] | None) -> Outcome:
    """The outcome from the final verification and the side-by-side latencies
    (`{"median", "p20", "p80"}` each, or None when that variant was not timed)."""
    cand_ms = (candidate or {}).get("median")
    if not verified or cand_ms is None:
        return Outcome(NOT_VERIFIED, "not verified")
    if not speed_measured(timing_label):
        return Outcome(CPU_ONLY, CPU_VERIFIED)
    eager_ms = (eager or {}).get("median")
    comp_ms = (compiled or {}).get("median")
    vs_eager = Speedup(eager_ms / cand_ms, timing_label) if eager_ms else None
    vs_comp = Speedup(comp_ms / cand_ms, timing_label) if comp_ms else None
    # each comparison allows for the noise of the two timings it compares: a disturbed eager
    # row (KernelBench level-3 43 on an H200, 2026-11-30: eager 26.4 ms where it had read 12.3)
    # widened the band against torch.compile too and turned 1.16x into "keep torch.compile"
    rel_eager = noise(eager, candidate)
    if not beats(cand_ms, eager_ms, rel_eager):
        said = f" ({format_speedup(vs_eager)} vs eager)" if vs_eager else " (eager not timed)"
        return Outcome(KEEP_PYTORCH, KEEP_PYTORCH_TEXT + said, rel_eager)
    text = f"{format_speedup(vs_eager)} vs eager"
    rel_comp = noise(compiled, candidate)
    rel = max(rel_eager, rel_comp) if comp_ms else rel_eager
    if comp_ms and not beats(cand_ms, comp_ms, rel_comp):
        return Outcome(KEEP_COMPILE, f"{text}, but {format_speedup(vs_comp)} vs torch.compile: "
                                     f"{KEEP_COMPILE_TEXT}", rel)
    if vs_comp:
        text += f", {format_speedup(vs_comp)} vs torch.compile"
    return Outcome(FASTER, text, rel)


def of_speedup(speedup: float | None, timing_label: str | None, *,
               verified: bool = True) -> Outcome:
    """The outcome from a speedup alone (history: no spreads; the noise floor only)."""
    if not verified or speedup is None:
        return Outcome(NOT_VERIFIED, "not verified")
    label = timing_label or getattr(speedup, "timing_label", None)
    if not speed_measured(label):
        return Outcome(CPU_ONLY, CPU_VERIFIED)
    rel = noise()
    if not beats(1.0, float(speedup), rel):
        return Outcome(KEEP_PYTORCH, f"{KEEP_PYTORCH_TEXT} ({format_speedup(speedup, label)} "
                                     "vs eager)", rel)
    return Outcome(FASTER, f"{format_speedup(speedup, label)} vs eager", rel)
