"""`time_trials`: several configurations of one candidate timed in one worker, output-checked.

The accelerator's search: instead of a full verification (~15-30 s of worker processes on a
GPU) per configuration, all trials share one `tune` worker job: one reference forward of the
case's own model on known values (run before any trial is imported), then per trial a timed
run on fresh in-place inputs and one output sample on the known values, compared here with
the reference at the case's tolerance. It is a cheap filter: the caller fully verifies the
winner (`harness.verify.verify_candidate`) before it counts.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from kopt.harness.case import Case, TensorSpec
from kopt.harness.compare import compare_outputs
from kopt.harness.data import agent_provide_weights, draw_tensor
from kopt.harness.device import worker_env
from kopt.harness.job import cleanup, stage_job
from kopt.harness.targets.base import LineSink, Target
from kopt.harness.targets.resolve import resolve_target
from kopt.harness.tolerance import tolerance_for
from kopt.harness.verification.tensors import input_keys, load_outputs

POOL = 3
"""Input value sets rotated through the timed calls (each written in place)."""
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def time_trials(case: Case, trials: Sequence[Path], *, device: str, input_set: str,
                target: Target | str | None = None, budget_s: float = 60.0,
                timing_options: dict[str, Any] | None = None, timeout: float = 600.0,
                on_line: LineSink | None = None) -> list[dict[str, Any]]:
    """One dict per trial, in order: `{"ok", "median_ms", "p20_ms", "p80_ms", "checked",
    "detail"}`; `checked` is True when its output sample matched the reference. A trial that
    crashed its worker is failed and the rest run in a fresh one."""
    runner = target if target is not None and not isinstance(target, str) else resolve_target(target)
    resolved = case.input_set(input_set)
    specs = {k: s for k, s in input_keys(resolved).items() if isinstance(s, TensorSpec)}
    groups = {f"pool{i}": {k: draw_tensor(s, secrets.randbits(62)) for k, s in specs.items()}
              for i in range(POOL)}
    groups["check"] = {k: draw_tensor(s, secrets.randbits(62)) for k, s in specs.items()}
    groups["weights"] = agent_provide_weights(case, input_set)
    tol = {dt: tolerance_for(case, dt) for dt in DTYPES}
    results: list[dict[str, Any] | None] = [None] * len(trials)
    while any(r is None for r in results):
        todo = [i for i, r in enumerate(results) if r is None]
        request = {"device": device, "precision": case.manifest.precision,
                   "input_set": input_set, "interpret": device == "cpu",
                   "pool": [f"pool{i}" for i in range(POOL)], "check": "check",
                   "timing_options": timing_options or {}, "budget_s": budget_s,
                   "trials": [f"trial-{i}.py" for i in todo]}
        job_dir = stage_job("tune", request, case=case, tensors=groups)
        try:
            for i in todo:
                shutil.copyfile(trials[i], job_dir / f"trial-{i}.py")
            outcome = runner.run(job_dir, timeout=timeout, env=worker_env(device),
                                 on_line=on_line)
            out = job_dir / "out"
            reference = load_outputs(out / "check-reference.safetensors")
            progress = False
            for k, i in enumerate(todo):
                file = out / f"trial-{k}.json"
                if file.is_file():
                    results[i] = _judge(json.loads(file.read_text()),
                                        load_outputs(out / f"check-trial-{k}.safetensors"),
                                        reference, tol)
                    progress = True
            dead = _current_trial(out)
            if dead is not None and results[todo[dead]] is None and not outcome.ok:
                # the worker died in this trial: it fails, the rest go to a fresh worker
                results[todo[dead]] = {"ok": False, "checked": False, "median_ms": None,
                                       "detail": "the worker died in this trial: "
                                                 f"{outcome.failure_reason()}"[:500]}
                progress = True
            if outcome.ok:  # a worker that ended well left nothing to run again
                for i in todo:
                    results[i] = results[i] or {"ok": False, "checked": False,
                                                "median_ms": None, "detail": "not run"}
            if not progress:  # the worker failed before any trial
                reason = ("no reference output" if reference is None else "stopped") \
                    if outcome.ok else outcome.failure_reason()
                for i in todo:
                    results[i] = {"ok": False, "checked": False, "median_ms": None,
                                  "detail": f"the tuning worker failed: {reason}"[:500]}
        finally:
            cleanup(job_dir)
    return [r or {"ok": False, "checked": False, "median_ms": None, "detail": "not run"}
            for r in results]


def _current_trial(out: Path) -> int | None:
    """The trial (index in the job's list) the worker was on: `out/current` reads `warm K`
    or `time K`."""
    try:
        return int((out / "current").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _judge(result: dict[str, Any], sample: list[torch.Tensor] | None,
           reference: list[torch.Tensor] | None, tol: dict[torch.dtype, Any]) -> dict[str, Any]:
    if not result.get("ok"):
        return {"ok": False, "checked": False, "median_ms": None,
                "detail": str(result.get("error"))[:500]}
    t = result["timing"]
    row = {"ok": True, "median_ms": float(t["median_ms"]), "p20_ms": float(t["p20_ms"]),
           "p80_ms": float(t["p80_ms"]), "checked": False, "detail": "output matches"}
    if sample is None or reference is None:
        row["detail"] = "no output sample"
    elif result.get("deferred_work"):
        row["detail"] = str(result["deferred_work"])[:300]
    else:
        cmp = compare_outputs(sample, reference, tol)
        # the bench's output sample and the verifier allow the same two misses (a few
        # elements of a reordered sum, or an output whose norm cancels to near zero, such as
        # the mean of a group norm's output); the verifier settles them against float64
        allowed = cmp.within_allowance(tol, reference)
        row["checked"] = bool(cmp.ok or allowed)
        if allowed:
            row["detail"] = "output matches within the allowance the float64 truth settles: " \
                + cmp.to_text()[:300]
        elif not cmp.ok:
            row["detail"] = "wrong output: " + cmp.to_text()[:300]
    return row
