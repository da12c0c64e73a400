"""`tune`: time several configurations of one candidate in ONE worker, each output-checked.

Request: `{"job": "tune", "case_dir", "device", "precision", "input_set", "trials":
["trial-0.py", ...], "pool": [group, ...], "check": group, "timing_options": {...},
"budget_s": float}` with `inputs/weights.safetensors` and `inputs/<group>.safetensors`.

Before any trial is imported, the case's own model runs once on the `check` values and its
outputs go to `out/check-reference.safetensors`. Then each trial (the same kernel with a
different `KOPT_CONFIG`) is loaded, warmed up, timed with fresh pool values written in place
between calls, and run once more on the `check` values (`out/check-trial-<i>.safetensors`)
for the parent to compare with the reference. `out/started-<i>` is written before a trial
and `out/trial-<i>.json` after it, so a crash names its trial. A CUDA error poisons the
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

    from kopt.harness import gpu_gate, timing
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import instantiate, model_class
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
    if device == "cuda":
        torch.cuda.init()
    guards.warm_up_triton(device)

    def load(cls: type[torch.nn.Module]) -> torch.nn.Module:
        model = instantiate(cls, resolved, case.model_file)
        model.load_state_dict(weights, strict=True)
        return model.to(device).eval()

    def sample(model: torch.nn.Module, name: str) -> None:
        for k, v in check.items():
            live[k].copy_(v)
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

    deadline = time.monotonic() + float(request.get("budget_s") or 1e9)
    results: dict[str, Any] = {}
    for i, rel in enumerate(request["trials"]):
        if time.monotonic() > deadline:
            results[str(i)] = {"ok": False, "error": "not run: tuning time budget spent"}
            continue
        (out_dir / f"started-{i}").write_text("")
        try:
            model = load(_load_candidate(job_dir / rel))

            def fn(m: torch.nn.Module = model) -> Any:
                with torch.no_grad():
                    return m(*inputs.args, **inputs.kwargs)

            fn()  # Triton JIT outside timing
            if device == "cuda":
                torch.cuda.synchronize()
            with gpu_gate.timing_window():  # the GPU alone for the timed calls only
                timed = timing.time_callable(fn, device=device, rotate=rotate,
                                             **(request.get("timing_options") or {}))
            sample(model, f"trial-{i}")
            result = {"ok": True, "timing": timed.to_dict(),
                      "deferred_work": timed.deferred_work_suspected()}
        except Exception as err:  # a configuration that fails to compile or run is data
            result = {"ok": False, "error": f"{type(err).__name__}: {err}"[:1000]}
        (out_dir / f"trial-{i}.json").write_text(json.dumps(result, default=str))
        results[str(i)] = result
        if not result["ok"] and device == "cuda" and "CUDA" in result["error"]:
            return {"ok": True, "pid": os.getpid(), "trials": results, "stopped_at": i}
        model = None
        if device == "cuda":
            torch.cuda.empty_cache()
    return {"ok": True, "pid": os.getpid(), "trials": results, "stopped_at": None}
