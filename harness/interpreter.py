"""Triton's CPU interpreter as a stand-in driver, for code written for a GPU.

Used by every worker that runs a job with `interpret` set (harness.worker) and by a standby's
early child (harness.jobs.supervised), which is forked before it knows its job.
"""

from __future__ import annotations

from typing import Any


class _InterpreterDriver:
    """What `@triton.autotune` asks of Triton's active driver, on the CPU interpreter (which
    has none: "0 active drivers"): a benchmarker. The interpreter's times say nothing about a
    GPU, so each config is timed once by the wall clock; the choice only has to be valid."""

    def get_benchmarker(self) -> Any:
        import time

        def bench(kernel_call: Any, quantiles: Any = None, **_: Any) -> Any:
            t0 = time.perf_counter()
            kernel_call()
            ms = (time.perf_counter() - t0) * 1e3
            return [ms] * len(quantiles) if quantiles else ms

        return bench

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("interpreter", 0, 0)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Any = None) -> int:
        return 0


def interpreter_support() -> None:
    """Let honest code that runs on a GPU run on the interpreter too: an autotuned kernel
    (a benchmarker, `_InterpreterDriver`), and a launcher inside `torch.compile` (the launch
    counter keeps dynamo out of the interpreter, harness.verification.guards)."""
    try:
        from triton.runtime.driver import driver
    except ImportError:
        return
    try:
        driver.active  # noqa: B018 (a real driver, e.g. a GPU build with TRITON_INTERPRET)
    except RuntimeError:
        driver.set_active(_InterpreterDriver())  # type: ignore[arg-type]
