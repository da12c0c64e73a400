"""The timer's noise on a GPU: one variant timed five times in a row, for several minimum
timed windows (`min_seconds`), with the SM clock and power sampled alongside.

    python benchmarks/noise_gpu.py [--cases a,b] [--windows 0.25,1,3] [--repeats 5]

Issue 2's bar is a spread (max - min) / median of the five medians <= 1%. Prints one row
per (case, window): the five medians, the spread, and the SM clock range nvidia-smi saw
during those five measurements. Prints a markdown table last.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_CASES = "gated_mlp,linear_bias_gelu,matmul_scale_residual,softmax"


class _ClockSampler:
    """nvidia-smi's SM clock (MHz) and power (W), every 100 ms, while running."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                 "-lms", "100"], stdout=subprocess.PIPE, text=True)
        except OSError:
            return
        assert proc.stdout is not None
        for line in proc.stdout:
            if self._stop.is_set():
                break
            try:
                clock, power = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), clock, power))
        proc.terminate()

    def window(self, t0: float, t1: float) -> str:
        inside = [(c, p) for t, c, p in self.samples if t0 <= t <= t1]
        if not inside:
            return "-"
        clocks = [c for c, _ in inside]
        powers = [p for _, p in inside]
        return f"{min(clocks):.0f}-{max(clocks):.0f} MHz, {min(powers):.0f}-{max(powers):.0f} W"

    def stop(self) -> None:
        self._stop.set()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--windows", default="0.25,1,3", help="min timed seconds per median")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    from kopt.harness.case import load_case
    from kopt.harness.runner import make_case_forward
    from kopt.harness.timing import time_callable

    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    sampler = _ClockSampler()
    rows = []
    for name in args.cases.split(","):
        case = load_case(name)
        fwd = make_case_forward(case, device="cuda")
        fwd.attach_buffer_sets()
        for window in (float(w) for w in args.windows.split(",")):
            t0 = time.monotonic()
            timings = [time_callable(fwd, device="cuda", rotate=fwd.rotate, min_seconds=window,
                                     max_seconds=max(10.0, 2 * window), max_iters=100_000)
                       for _ in range(args.repeats)]
            t1 = time.monotonic()
            medians = [t.median_ms for t in timings]
            mid = sorted(medians)[len(medians) // 2]
            spread = (max(medians) - min(medians)) / mid * 100
            row = (name, f"{window:g}", " ".join(f"{m:.4f}" for m in medians), f"{spread:.2f}%",
                   str(sum(t.samples for t in timings) // len(timings)), sampler.window(t0, t1))
            print("  " + " | ".join(row), flush=True)
            rows.append(row)
        del fwd
        torch.cuda.empty_cache()
    sampler.stop()
    print()
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    print()
    print("| case | min window s | medians ms | spread | samples/median | SM clock, power |")
    print("| --- | ---: | --- | ---: | ---: | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
