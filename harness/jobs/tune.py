"""`tune`: time several configurations of one candidate in ONE worker, each output-checked.

Request: `{"job": "tune", "case_dir", "device", "precision", "input_set", "trials":
["trial-0.py", ...], "pool": [group, ...], "check": group, "timing_options": {...},
"budget_s": float}` with `inputs/weights.safetensors` and `inputs/<group>.safetensors`.

Before any trial is imported, the case's own model runs once on the `check` values and its
outputs go to `out/check-reference.safetensors`. Then each trial (the same kernel with a
different `KOPT_CONFIG`) is loaded, warmed up, timed with fresh pool values written in place
between calls, and run once more on the `check` values (`out/check-trial-<i>.safetensors`)
for the parent to compare with the reference. Every trial is first imported and run once
(Triton compiles), then the warm ones are timed inside one GPU-gate window
(`harness.gpu_gate`). `out/current` holds `warm <i>` or `time <i>` while trial i runs and
`out/trial-<i>.json` is written after it, so a crash names its trial. A CUDA error poisons the
context: the job stops there and the parent starts a fresh worker for the rest. This is a
cheap filter; the parent fully verifies the winner with `harness.verify`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from kopt.harness import gpu_gate, model_state, timing
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import model_class, with_weights
    from kopt.harness.jobs.candidate import _load_candidate
    from kopt.harness.verification import guards, tensors

    device = request["device"]
    if device == "cpu":
        torch.set_num_threads(1)
    guards.set_precision(request.get("precision", "strict"))
    case = load_case_dir(job_dir / request["case_dir"])
    resolved = case.input_set(request["input_set"])
    weights = tensors.load_bases(job_dir / "inputs" / "weights.safetensors", "cpu")
    pool = [tensors.load_bases(job_dir / "inputs" / f"{g}.safetensors", device)
            for g in request["pool"]]
    check = tensors.load_bases(job_dir / "inputs" / f"{request['check']}.safetensors", device)
    live = {k: v.clone() for k, v in pool[0].items()}
    inputs = tensors.materialize(resolved, live, device)
    out_dir = job_dir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    guards.start_device(device)

    def load(cls: type[torch.nn.Module]) -> torch.nn.Module:
        return with_weights(cls, resolved, case.model_file, weights, device)

    attributes = model_state.split(weights)[1]  # state outside the state_dict

    def sample(model: torch.nn.Module, name: str) -> None:
        for k, v in check.items():
            live[k].copy_(v)
        # a model that carries state from call to call starts from its loaded state: the
        # trials made different numbers of timed calls before their sample
        model_state.restart(model, attributes)
        with torch.no_grad():
            outs, _ = tensors.flatten_outputs(model(*inputs.args, **inputs.kwargs))
        seen = [t.detach().clone() for t in outs]
        if device == "cuda":
            torch.cuda.synchronize()
        tensors.save_tensors(seen, out_dir / f"check-{name}.safetensors")

    sample(load(model_class(case)), "reference")  # before any trial code is imported

    def rotate(i: int) -> None:
        for k, v in pool[i % len(pool)].items():
            live[k].copy_(v)

    # Two passes: every trial is imported and run once (Triton's JIT) before the GPU gate is
    # asked for (harness.gpu_gate), then the warm ones are timed in ONE window, so a suite's
    # other jobs wait for one timing, not one per trial. `out/current` names the trial and
    # the pass under way, so the parent can fail the trial that killed the worker.
    deadline = time.monotonic() + float(request.get("budget_s") or 1e9)
    results: dict[str, Any] = {}
    warm: dict[int, type[torch.nn.Module]] = {}

    def record(i: int, result: dict[str, Any]) -> None:
        (out_dir / f"trial-{i}.json").write_text(json.dumps(result, default=str))
        results[str(i)] = result

    def poisoned(result: dict[str, Any]) -> bool:  # a CUDA error poisons the context
        return not result["ok"] and device == "cuda" and "CUDA" in result["error"]

    def failure(err: Exception) -> dict[str, Any]:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:1000]}

    def run_once(model: torch.nn.Module) -> Any:
        with torch.no_grad():
            out = model(*inputs.args, **inputs.kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    for i, rel in enumerate(request["trials"]):
        if time.monotonic() > deadline:
            record(i, {"ok": False, "error": "not run: tuning time budget spent"})
            continue
        (out_dir / "current").write_text(f"warm {i}")
        try:
            cls = _load_candidate(job_dir / rel)
            run_once(load(cls))  # Triton JIT outside the gate and outside timing
            warm[i] = cls
        except Exception as err:  # a configuration that fails to compile or run is data
            record(i, failure(err))
            if poisoned(results[str(i)]):
                return {"ok": True, "pid": os.getpid(), "trials": results, "stopped_at": i}
        if device == "cuda":
            torch.cuda.empty_cache()

    waited = time.monotonic()
    (out_dir / "current").write_text("gate")  # waiting for the GPU: no trial to blame
    with gpu_gate.timing_window():
        deadline += time.monotonic() - waited  # the wait for the GPU is not tuning time
        for i, cls in warm.items():
            if time.monotonic() > deadline:
                record(i, {"ok": False, "error": "not run: tuning time budget spent"})
                continue
            (out_dir / "current").write_text(f"time {i}")
            try:
                model = load(cls)

                def fn(m: torch.nn.Module = model) -> Any:
                    with torch.no_grad():
                        return m(*inputs.args, **inputs.kwargs)

                run_once(model)  # the same kernels the first pass compiled: no JIT here
                timed = timing.time_callable(fn, device=device, rotate=rotate,
                                             **(request.get("timing_options") or {}))
                sample(model, f"trial-{i}")
                record(i, {"ok": True, "timing": timed.to_dict(),
                           "deferred_work": timed.deferred_work_suspected()})
            except Exception as err:
                record(i, failure(err))
                if poisoned(results[str(i)]):
                    return {"ok": True, "pid": os.getpid(), "trials": results, "stopped_at": i}
            model = None
            if device == "cuda":
                torch.cuda.empty_cache()
    return {"ok": True, "pid": os.getpid(), "trials": results, "stopped_at": None}
