"""torch.profiler trace of a variant -> the top kernels by device time.

The chrome trace is written to `<artifacts>/<label>/profiler/trace.json` (open it in
chrome://tracing or Perfetto) and the summary beside it as `top_kernels.json`. On a GPU the
table ranks CUDA kernels by their own device time; on the CPU (Triton interpreter) it ranks
aten ops by their own CPU time, and says so (`by: "cpu"`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

# Profiled calls: enough to average launch jitter, few enough to keep traces small.
PROFILE_ITERATIONS = 5
TOP_KERNELS = 10


@dataclass(frozen=True)
class KernelStat:
    """One kernel (GPU) or op (CPU) aggregated over the profiled calls."""

    name: str
    calls: int
    """Launches over all profiled calls."""
    total_ms: float
    """Own time over all profiled calls, milliseconds."""
    pct: float
    """Share of the total own time of everything profiled, percent."""


@dataclass(frozen=True)
class Profile:
    """The summary of one profiled variant."""

    by: str
    """`device` (CUDA kernels, GPU time) or `cpu` (aten ops, CPU time)."""
    iterations: int
    """Calls of the variant inside the trace."""
    total_ms: float
    """Own time of everything ranked, over all calls."""
    kernels: list[KernelStat] = field(default_factory=list)
    trace_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        unit = "device" if self.by == "device" else "cpu"
        lines = [f"top {len(self.kernels)} by {unit} time over {self.iterations} calls "
                 f"({self.total_ms:.3f} ms total)"]
        for k in self.kernels:
            lines.append(f"  {k.pct:5.1f}%  {k.total_ms:9.3f} ms  {k.calls:5d}x  {k.name[:90]}")
        return "\n".join(lines)


def profile_callable(fn: Callable[[], Any], *, device: str, out_dir: Path,
                     iterations: int = PROFILE_ITERATIONS, top: int = TOP_KERNELS,
                     rotate: Callable[[int], None] | None = None) -> Profile:
    """Profile `iterations` calls of an already warmed-up `fn`; write the trace under `out_dir`."""
    from torch.profiler import ProfilerActivity, profile

    gpu = str(device).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    out_dir.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities) as prof:
        for i in range(iterations):
            if rotate is not None:
                rotate(i)
            fn()
        if gpu:
            torch.cuda.synchronize()
    trace = out_dir / "trace.json"
    prof.export_chrome_trace(str(trace))
    result = summarize(prof.key_averages(), by="device" if gpu else "cpu",
                       iterations=iterations, top=top, trace_file=str(trace))
    (out_dir / "top_kernels.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result


def summarize(averages: Any, *, by: str, iterations: int, top: int = TOP_KERNELS,
              trace_file: str | None = None) -> Profile:
    """Rank `prof.key_averages()` by own device time (`by="device"`) or own CPU time."""
    rows: list[tuple[str, int, float]] = []
    for evt in averages:
        if by == "device":
            if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
            us = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
        else:
            if evt.key.startswith("ProfilerStep") or evt.key.startswith("[memory]"):
                continue
            us = float(evt.self_cpu_time_total or 0.0)
        if us > 0:
            rows.append((evt.key, int(evt.count), us / 1e3))
    total = sum(ms for _, _, ms in rows)
    rows.sort(key=lambda r: -r[2])
    kernels = [KernelStat(name, calls, round(ms, 6), round(100.0 * ms / total, 2) if total else 0.0)
               for name, calls, ms in rows[:top]]
    return Profile(by=by, iterations=iterations, total_ms=round(total, 6), kernels=kernels,
                   trace_file=trace_file)
