"""The timers: CUDA events on a GPU, perf_counter on the CPU interpreter.

GPU (`cuda-events`): warm-up excluded; before every timed call the next input buffer set
is swapped in (`rotate(i)`) and the L2 cache is flushed by writing a buffer of at least
twice its size; a CUDA event pair brackets the call; a device-wide
`torch.cuda.synchronize()` (all streams) comes before any event is read. Samples are
taken in batches until the relative standard error of the median (order-statistics
estimate) is under `rel_err_target`, or `max_iters`, or `max_seconds`. After timing, a
few calls are also timed by wall clock around `fn(); synchronize()`: a call whose events
see much less time than the synchronized wall clock did work on a side stream or left work
behind (`deferred_work_suspected`).

CPU (`cpu-interpreter`): the same loop with `perf_counter`; never a GPU figure.

The clock functions are captured when this module is imported, before any candidate code
runs, so a candidate that later patches `time.*` or `torch.cuda.Event` cannot change what
the timer calls; `tampered_clocks()` says whether anything was patched since.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from kopt.harness.device import timing_label

# -- clocks, captured at import -------------------------------------------------------------
_perf_counter = time.perf_counter
_CudaEvent = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_synchronize = torch.cuda.synchronize

# name -> how to read what is installed under that name right now
_CLOCK_LOOKUPS: dict[str, Callable[[], object]] = {
    "time.perf_counter": lambda: time.perf_counter,
    "time.perf_counter_ns": lambda: time.perf_counter_ns,
    "time.monotonic": lambda: time.monotonic,
    "time.monotonic_ns": lambda: time.monotonic_ns,
    "time.time": lambda: time.time,
    "time.time_ns": lambda: time.time_ns,
    "time.process_time": lambda: time.process_time,
    "torch.cuda.Event": lambda: torch.cuda.Event,
    "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
    "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    "torch.cuda.current_stream": lambda: torch.cuda.current_stream,
}
_CAPTURED: dict[str, int] = {name: id(get()) for name, get in _CLOCK_LOOKUPS.items()}

# -- defaults ---------------------------------------------------------------------------------
# GPU: 20 samples give the order-statistics error estimate enough ranks to be meaningful;
# 10 s caps a slow variant without cutting a ~10 ms one short of convergence.
GPU_MIN_ITERS, GPU_MAX_ITERS, GPU_MAX_SECONDS, GPU_WARMUP = 20, 2000, 10.0, 5
# ...and at least this much timed wall time before a GPU median may count as converged:
# medians of ~20 samples of a 20 us kernel still drift by ~1% between runs; 0.25 s of
# samples brings five repeated medians within 1% (benchmarks/harness_gpu.py checks it).
GPU_MIN_SECONDS = 0.25
# Warm-up also runs until this much wall time passed (clocks ramp up, caches settle).
# H100, 2026-11-22: with 0.05 s, five medians of a 3.4 ms bf16 GEMM (gated_mlp) spread
# 7.7% as SM clocks settled under load; with 0.5 s still 3.7%; memory-bound cases spread
# <= 0.24%. Calls of 0.5 ms or more (compute-bound, power-limited) get the long warm-up,
# which brings the clock to its loaded steady state before the first sample.
GPU_WARMUP_SECONDS = 0.5
GPU_LONG_CALL_MS = 0.5
GPU_LONG_WARMUP_SECONDS = 2.0
# Long calls also get a longer timed window. H100, 2026-11-22 (benchmarks/noise_gpu.py),
# spread of five medians by min timed seconds 0.25 / 1 / 3: gated_mlp 3.69% / 0.67% / 0.06%,
# matmul_scale_residual 2.38% / 0.71% / -, linear_bias_gelu 1.94% / 1.89% / 1.74%.
# 2026-11-23 (call 15, 3 s window, after the machine's first seconds): linear_bias_gelu
# 0.38%, matmul_scale_residual 0.14% (BENCHMARKS.md 0.7).
GPU_LONG_MIN_SECONDS = 3.0
# CPU interpreter: one call can take seconds, and these figures only show it runs.
CPU_MIN_ITERS, CPU_MAX_ITERS, CPU_MAX_SECONDS, CPU_WARMUP = 3, 30, 3.0, 1
# Samples are read back in batches: fewer device-wide syncs, queue never runs dry.
BATCH = 10
# Calls timed by wall clock around fn(); synchronize() for the deferred-work check...
WALL_CHECK_CALLS = 5
# ...and the calls added before a suspicion becomes a refusal: host jitter (a busy VM, a
# garbage collection, a worker importing torch beside this one) slows some calls, work left
# on a side stream slows every one. 2026-11-24, H100: an honest torch.compile of rmsnorm,
# 0.0975 ms by events, was refused in a pipeline run at a fastest-of-5 wall time of 0.3884 ms
# (and a layernorm_gelu kernel, likely the same way, in another run).
WALL_RECHECK_CALLS = 50
# Flush buffer floor when the GPU does not report its L2 size (H100: 50 MiB L2).
FALLBACK_L2_BYTES = 128 * 2**20
# 95% two-sided normal quantile, for the order-statistics interval of the median.
_Z95 = 1.959964


@dataclass(frozen=True)
class Timing:
    """One variant's latency distribution from `time_callable`."""

    median_ms: float
    """Median of the timed calls, milliseconds."""
    p20_ms: float
    """20th percentile, milliseconds."""
    p80_ms: float
    """80th percentile, milliseconds."""
    samples: int
    """Number of timed calls (warm-up excluded)."""
    rel_err: float
    """Estimated relative standard error of the median when timing stopped."""
    label: str
    """`cuda-events` (GPU) or `cpu-interpreter` (never a GPU figure)."""
    times_ms: tuple[float, ...] = field(default=(), repr=False)
    """Every sample, in the order taken."""
    warmup: int = 0
    """Calls run before timing (Triton JIT, autotune, allocator, clocks)."""
    stop_reason: str = ""
    """`converged`, `max_iters` or `time_cap`."""
    sync_wall_ms: float | None = None
    """GPU only: median wall-clock time of `fn(); torch.cuda.synchronize()` (launch and
    sync overhead included): the upper bound the event timing is checked against."""

    def to_dict(self, *, with_samples: bool = False) -> dict[str, Any]:
        data = asdict(self)
        data["times_ms"] = list(self.times_ms) if with_samples else None
        if not with_samples:
            data.pop("times_ms")
        return data

    def deferred_work_suspected(self) -> str | None:
        """Why the events look too fast for the synchronized wall clock, or None.

        Work on a side stream or queued after the end event is invisible to the event
        pair but not to a device-wide synchronize. 50 us covers launch + sync overhead.
        """
        if self.sync_wall_ms is None:
            return None
        if _misses_work(self.sync_wall_ms, self.median_ms):
            return (f"events saw {self.median_ms:.4f} ms but fn + device-wide synchronize took "
                    f"{self.sync_wall_ms:.4f} ms: work on a side stream or left unfinished")
        return None


def _misses_work(sync_wall_ms: float, median_ms: float) -> bool:
    """The events' median is too fast for the synchronized wall clock."""
    return sync_wall_ms > 2.0 * median_ms + 0.05


def fastest_sync_wall_ms(wall_call: Callable[[], float], median_ms: float) -> float:
    """The fastest of WALL_CHECK_CALLS `fn(); synchronize()` wall times, taken over
    WALL_RECHECK_CALLS more when those look like work the events missed: the fastest call
    shows what every call costs, so a refusal needs every call of the larger sample slow."""
    walls = [wall_call() for _ in range(WALL_CHECK_CALLS)]
    if _misses_work(min(walls), median_ms):
        walls += [wall_call() for _ in range(WALL_RECHECK_CALLS)]
    return min(walls)


def clock_identities() -> dict[str, int]:
    """`id()` of each clock object installed now, by dotted name (compare before/after)."""
    return {name: id(get()) for name, get in _CLOCK_LOOKUPS.items()}


def tampered_clocks() -> list[str]:
    """Names of clocks replaced since this module was imported (empty when intact)."""
    now = clock_identities()
    return [name for name, ident in _CAPTURED.items() if now.get(name) != ident]


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already-sorted values (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median_rel_err(values: list[float]) -> float:
    """Relative standard error of the median from order statistics (distribution-free).

    The ranks n/2 +- z*sqrt(n)/2 bound a ~95% interval of the median; its half-width over
    z estimates the standard error. Fewer than 5 samples: infinite (keep sampling).
    """
    n = len(values)
    if n < 5:
        return math.inf
    xs = sorted(values)
    med = quantile(xs, 0.5)
    half = _Z95 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    se = (xs[hi] - xs[lo]) / (2 * _Z95)
    if med <= 0:
        return 0.0 if se == 0 else math.inf
    return se / med


def _summarize(times: list[float], label: str, warmup: int, reason: str,
               sync_wall_ms: float | None = None) -> Timing:
    xs = sorted(times)
    return Timing(median_ms=quantile(xs, 0.5), p20_ms=quantile(xs, 0.2),
                  p80_ms=quantile(xs, 0.8), samples=len(times), rel_err=median_rel_err(times),
                  label=label, times_ms=tuple(times), warmup=warmup, stop_reason=reason,
                  sync_wall_ms=sync_wall_ms)


def _stop(n: int, rel: float, started: float, *, min_iters: int, max_iters: int,
          rel_err_target: float, max_seconds: float, min_seconds: float = 0.0) -> str | None:
    if n >= min_iters and rel <= rel_err_target and _perf_counter() - started >= min_seconds:
        return "converged"
    if n >= max_iters:  # converged too, when only min_seconds was still pending
        return "converged" if n >= min_iters and rel <= rel_err_target else "max_iters"
    if _perf_counter() - started >= max_seconds and n >= min(min_iters, 5):
        return "time_cap"
    return None


_FLUSH_BUFFERS: dict[int, torch.Tensor] = {}


def l2_flush_buffer(device_index: int | None = None) -> torch.Tensor:
    """A device buffer of at least twice the GPU's L2 size; writing it evicts the L2."""
    index = torch.cuda.current_device() if device_index is None else device_index
    if index not in _FLUSH_BUFFERS:
        props = torch.cuda.get_device_properties(index)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0) or FALLBACK_L2_BYTES
        _FLUSH_BUFFERS[index] = torch.empty(2 * l2 // 4 + 1, dtype=torch.int32,
                                            device=f"cuda:{index}")
    return _FLUSH_BUFFERS[index]


def time_callable(
    fn: Callable[[], Any],
    *,
    device: str,
    rotate: Callable[[int], None] | None = None,
    flush_l2: bool = True,
    min_iters: int | None = None,
    max_iters: int | None = None,
    rel_err_target: float = 0.01,
    max_seconds: float | None = None,
    warmup: int | None = None,
    min_seconds: float | None = None,
    warmup_seconds: float | None = None,
) -> Timing:
    """Time `fn()` on `device` (`cuda` or `cpu`); `rotate(i)` swaps in input buffer set i.

    Defaults per device: see the GPU_* and CPU_* constants above. `min_seconds` (GPU) is the
    least timed wall time before the median may count as converged; `warmup_seconds` (GPU)
    the least warm-up wall time (default: GPU_WARMUP_SECONDS, or GPU_LONG_WARMUP_SECONDS for
    long calls).
    """
    gpu = device == "cuda" or str(device).startswith("cuda")
    if gpu:
        return _time_cuda(
            fn, rotate=rotate, flush_l2=flush_l2,
            min_iters=GPU_MIN_ITERS if min_iters is None else min_iters,
            max_iters=GPU_MAX_ITERS if max_iters is None else max_iters,
            rel_err_target=rel_err_target,
            max_seconds=GPU_MAX_SECONDS if max_seconds is None else max_seconds,
            warmup=GPU_WARMUP if warmup is None else warmup, min_seconds=min_seconds,
            warmup_seconds=warmup_seconds)
    return _time_cpu(
        fn, rotate=rotate,
        min_iters=CPU_MIN_ITERS if min_iters is None else min_iters,
        max_iters=CPU_MAX_ITERS if max_iters is None else max_iters,
        rel_err_target=rel_err_target,
        max_seconds=CPU_MAX_SECONDS if max_seconds is None else max_seconds,
        warmup=CPU_WARMUP if warmup is None else warmup)


def _time_cpu(fn: Callable[[], Any], *, rotate: Callable[[int], None] | None, min_iters: int,
              max_iters: int, rel_err_target: float, max_seconds: float,
              warmup: int) -> Timing:
    for i in range(warmup):
        if rotate is not None:
            rotate(i)
        fn()
    times: list[float] = []
    started = _perf_counter()
    i = 0
    while True:
        if rotate is not None:
            rotate(i)
        t0 = _perf_counter()
        fn()
        times.append((_perf_counter() - t0) * 1e3)
        i += 1
        reason = _stop(len(times), median_rel_err(times), started, min_iters=min_iters,
                       max_iters=max_iters, rel_err_target=rel_err_target,
                       max_seconds=max_seconds)
        if reason:
            return _summarize(times, timing_label("cpu"), warmup, reason)


def _time_cuda(fn: Callable[[], Any], *, rotate: Callable[[int], None] | None, flush_l2: bool,
               min_iters: int, max_iters: int, rel_err_target: float, max_seconds: float,
               warmup: int, min_seconds: float | None,
               warmup_seconds: float | None = None) -> Timing:
    flush = l2_flush_buffer() if flush_l2 else None

    def prepare(i: int) -> None:
        if rotate is not None:
            rotate(i)
        if flush is not None:  # after rotate: fresh input values must not sit in L2
            flush.fill_(i)

    # warm-up: at least `warmup` calls and GPU_WARMUP_SECONDS of wall time (capped)
    _cuda_synchronize()
    warm_start = _perf_counter()
    calls = 0
    budget_s = GPU_WARMUP_SECONDS if warmup_seconds is None else warmup_seconds
    while calls < warmup or (_perf_counter() - warm_start < budget_s
                             and calls < 200 * max(warmup, 1)):
        prepare(calls)
        fn()
        calls += 1
        if calls >= warmup:
            _cuda_synchronize()
            per_call_ms = (_perf_counter() - warm_start) * 1e3 / calls
            if warmup_seconds is None:
                budget_s = (GPU_LONG_WARMUP_SECONDS if per_call_ms >= GPU_LONG_CALL_MS
                            else GPU_WARMUP_SECONDS)
    _cuda_synchronize()
    if min_seconds is None:  # long (compute-bound, power-limited) calls: a longer window
        per_call_ms = (_perf_counter() - warm_start) * 1e3 / max(calls, 1)
        min_seconds = GPU_LONG_MIN_SECONDS if per_call_ms >= GPU_LONG_CALL_MS else GPU_MIN_SECONDS
        # enough samples to fill that window (a 1 ms call needs 3000)
        max_iters = max(max_iters, int(min_seconds * 1e3 / max(per_call_ms, 1e-3)) + BATCH)

    times: list[float] = []
    started = _perf_counter()
    i = 0
    reason: str | None = None
    while reason is None:
        n = max(1, min(BATCH, max_iters - len(times)))
        pairs = [(_CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True))
                 for _ in range(n)]
        for start, end in pairs:
            prepare(i)
            _event_record(start)
            fn()
            _event_record(end)
            i += 1
        _cuda_synchronize()  # device-wide: every stream finished before reading
        times += [_event_elapsed(start, end) for start, end in pairs]
        reason = _stop(len(times), median_rel_err(times), started, min_iters=min_iters,
                       max_iters=max_iters, rel_err_target=rel_err_target,
                       max_seconds=max_seconds, min_seconds=min_seconds)

    def wall_call() -> float:
        nonlocal i
        prepare(i)
        i += 1
        _cuda_synchronize()
        t0 = _perf_counter()
        fn()
        _cuda_synchronize()
        return (_perf_counter() - t0) * 1e3

    return _summarize(times, timing_label("cuda"), calls, reason,
                      sync_wall_ms=fastest_sync_wall_ms(wall_call, quantile(sorted(times), 0.5)))
