"""Where kopt's own process spends a command's wall seconds: a stack sampler.

    python benchmarks/sample_stacks.py [--interval 0.02] [--top 40] -- run rmsnorm --yes --json

runs `kopt ARGS...` in this process while a thread samples every thread's stack, then prints
the functions of kopt's code (and the library frame each sample stood in) by the share of
samples whose stack held them: inclusive wall time, waiting included. A function with many
seconds that no clock of the run's `timing_breakdown` names is where unexplained seconds go.
Threads that only wait for a worker job show up under `ClockedTarget.run`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
WAITS = {"threading.py:wait", "subprocess.py:_wait", "selectors.py:select", "queue.py:get",
         "threading.py:_wait_for_tstate_lock", "threading.py:join", "time.sleep"}
"""Innermost frames that stand for a thread blocked (on a job, a lock, a pipe)."""


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{Path(code.co_filename).name}:{code.co_name}"


def _ours(frame: FrameType) -> bool:
    name = frame.f_code.co_filename
    return str(ROOT) in name and "/benchmarks/" not in name


class Sampler:
    """Every `interval` seconds, counts each kopt function on each thread's stack once."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples = 0
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.leaf: collections.Counter[str] = collections.Counter()
        self.busy: collections.Counter[str] = collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self.stop.wait(self.interval):
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                seen: set[str] = set()
                leaf = _where(frame)
                blocked = leaf in WAITS or leaf.endswith(":pump") or leaf.endswith(":_recv")
                innermost_ours = None
                f: FrameType | None = frame
                while f is not None:
                    if _ours(f):
                        where = _where(f)
                        if innermost_ours is None:
                            innermost_ours = where
                        if where not in seen:
                            seen.add(where)
                            self.inclusive[where] += 1
                            if not blocked:
                                self.busy[where] += 1
                    f = f.f_back
                if innermost_ours is not None and not blocked:
                    self.leaf[f"{innermost_ours} -> {leaf}"] += 1

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("kopt_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    kopt_args = [a for a in args.kopt_args if a != "--"] or ["run", "rmsnorm", "--yes", "--json"]
    sys.path.insert(0, str(ROOT))
    from kopt.workbench.cli import main as kopt_main

    t0 = time.monotonic()
    with Sampler(args.interval) as s:
        try:
            rc = kopt_main(kopt_args)
        except SystemExit as e:
            rc = int(e.code or 0)
    wall = time.monotonic() - t0
    per = wall / max(1, s.samples)
    print(f"\nkopt {' '.join(kopt_args)}: rc {rc}, {wall:.1f} s, {s.samples} samples", flush=True)
    print("seconds  function (inclusive: the stack held it)")
    for where, n in s.inclusive.most_common(args.top):
        print(f"{n * per:7.1f}  {where}")
    print("seconds  function (inclusive, only samples not blocked on a job, lock or pipe)")
    for where, n in s.busy.most_common(args.top):
        print(f"{n * per:7.1f}  {where}")
    print("seconds  innermost kopt function -> the frame a busy sample stood in")
    for where, n in s.leaf.most_common(args.top):
        print(f"{n * per:7.1f}  {where}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
