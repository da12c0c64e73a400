"""Strategy memory: what each hypothesis of the optimizer's walk measured, per GPU model,
candidate pattern and shape bucket, so that a later run does not test again what lost.

`.kopt/tuning/strategies/<gpu>.json` maps `<pattern>|<shape bucket>` to the evidence of the
runs that walked the strategy space (`phases.strategy`) from the same first candidate:

    {"default_ms": 0.0944, "results": {"reductions in one pass, 16 warps": 0.0949,
     "some hypothesis the verifier rejected": null}, "torch": "2.11.0", "triton": "3.6.0",
     "date": "2026-11-28", "case": "rmsnorm", "run_id": "...", "commit": "..."}

- The *pattern* is the tuning memory's signature of the whole first candidate
  (`tuning_memory.kernel_pattern(source, None)`: its source without the launch
  configuration), the round the engineer writes before any hypothesis; the *bucket* is the
  timed input set's shapes rounded up to powers of two (`tuning_memory.shape_bucket`).
- A hypothesis whose remembered median did not beat the remembered first candidate's by more
  than the timer's noise (`harness.speedup.beats`), or whose candidate was rejected, is not
  tested again on a matching run, which says so; one that won is tested again (re-timed,
  re-verified), as is every hypothesis the memory has no figure for.
- Evidence from another torch or Triton version is not used: what lost under one compiler
  may win under the next.

`kopt memory` lists these entries beside the tuning memory's; `kopt memory --clear` removes
both.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kopt.harness.speedup import beats
from kopt.phases.tuning_memory import (
    clear_folder,
    entries_in,
    gpu_file,
    key_of,
    load_file,
    memory_dir,
    write_file,
)


def strategies_dir() -> Path:
    return memory_dir() / "strategies"


def strategy_file(gpu: str) -> Path:
    return strategies_dir() / gpu_file(gpu).name


def versions() -> dict[str, str]:
    """The compilers' versions the evidence is valid for."""
    import torch
    import triton

    return {"torch": str(torch.__version__).split("+")[0], "triton": str(triton.__version__)}


def recall(gpu: str, pattern: str, bucket: str) -> dict[str, Any] | None:
    """The evidence for this GPU, first candidate and bucket, if measured with these
    compilers' versions."""
    entry = load_file(strategy_file(gpu)).get(key_of(pattern, bucket))
    if not isinstance(entry, dict) or not isinstance(entry.get("results"), dict):
        return None
    if any(entry.get(k) != v for k, v in versions().items()):
        return None
    return entry


def settled(entry: dict[str, Any]) -> dict[str, str]:
    """Hypotheses the evidence settles (not worth a round): name -> why, in words."""
    default = entry.get("default_ms")
    out = {}
    for name, ms in sorted(entry["results"].items()):
        if ms is None:
            out[name] = "its candidate was rejected"
        elif default and not beats(float(ms), float(default)):
            out[name] = f"{float(ms):.4g} ms against the first candidate's {float(default):.4g} ms"
    return out


def remember(gpu: str, pattern: str, bucket: str, default_ms: float,
             results: dict[str, float | None], evidence: dict[str, Any]) -> Path:
    """Store what this run measured (atomically), over what an earlier run measured for the
    hypotheses this one did not test."""
    file = strategy_file(gpu)
    data = load_file(file)
    key = key_of(pattern, bucket)
    earlier = data.get(key) if isinstance(data.get(key), dict) else {}
    kept = earlier.get("results") if isinstance(earlier.get("results"), dict) and all(
        earlier.get(k) == v for k, v in versions().items()) else {}
    data[key] = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "gpu": gpu,
                 **versions(), **evidence, "default_ms": default_ms,
                 "results": {**kept, **results}}
    return write_file(file, data)


def entries() -> list[dict[str, Any]]:
    """Every remembered walk, on every GPU: `{"gpu", "pattern", "bucket", ...evidence}`."""
    return entries_in(strategies_dir())


def clear() -> int:
    """Forget every remembered walk; how many there were."""
    return clear_folder(strategies_dir())
