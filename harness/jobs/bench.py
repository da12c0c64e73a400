"""`bench`: time variants of a case on fresh inputs, in the worker, under observation.

Request: `{"job": "bench", "case_dir", "device", "precision", "input_set", "variants":
["eager", "compile"] | ["candidate"], "pool": [group, ...], "check": group,
"timing_options": {...}}` with `inputs/weights.safetensors` and `inputs/<group>.safetensors`.

Between timed calls `rotate(i)` writes the next pool group's values into the live input
tensors in place (fresh values, same storage: no cache keyed by address or shape helps).
After timing, the `check` group's values are written in and one forward's outputs are saved
to `out/check-<variant>.safetensors` for the parent to compare with the baseline's. Clock
and torch identities are re-checked after timing; the eager job also reports the roofline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from kopt.harness import timing
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import instantiate, model_class
    from kopt.harness.verification import guards, tensors

    device = request["device"]
    if device == "cpu":
        # One intra-op thread gives stable interpreter figures on a small shared machine.
        torch.set_num_threads(1)
    guards.set_precision(request.get("precision", "strict"))
    case = load_case_dir(job_dir / request["case_dir"])
    input_set = request["input_set"]
    resolved = case.input_set(input_set)
    weights = tensors.load_bases(job_dir / "inputs" / "weights.safetensors", "cpu")
    pool = [tensors.load_bases(job_dir / "inputs" / f"{g}.safetensors", device)
            for g in request["pool"]]
    check = tensors.load_bases(job_dir / "inputs" / f"{request['check']}.safetensors", device)
    live = {k: v.clone() for k, v in pool[0].items()}
    inputs = tensors.materialize(resolved, live, device)

    counter = guards.LaunchCounter()
    counter.install()
    if device == "cuda":
        torch.cuda.init()
    guards.warm_up_triton(device)
    base = guards.take_baseline()

    variants = request["variants"]
    if variants == ["candidate"]:
        from kopt.harness.jobs.candidate import _load_candidate

        cls = _load_candidate(job_dir / request["candidate"])
    else:
        cls = model_class(case)
    model = instantiate(cls, resolved, case.model_file)
    model.load_state_dict(weights, strict=True)
    model = model.to(device).eval()

    def rotate(i: int) -> None:
        src = pool[i % len(pool)]
        for k, v in src.items():
            live[k].copy_(v)

    results: dict[str, Any] = {}
    for variant in variants:
        fn_model = model
        if variant == "compile":
            try:
                fn_model = torch.compile(model)
            except Exception as err:  # compile unavailable here: a row that says so
                results[variant] = {"ok": False, "error": f"torch.compile: {err}"[:500]}
                continue

        def fn(m: torch.nn.Module = fn_model) -> Any:
            with torch.no_grad():
                return m(*inputs.args, **inputs.kwargs)

        try:
            counter.take()
            fn()  # first call outside timing: compile / Triton JIT
            if device == "cuda":
                torch.cuda.synchronize()
            launches = len(counter.take())
            timed = timing.time_callable(fn, device=device, rotate=rotate,
                                         **(request.get("timing_options") or {}))
            launches_timed = len(counter.take())
            # The sample re-check: known values in, outputs out, after all timed calls.
            for k, v in check.items():
                live[k].copy_(v)
            out = fn()
            outs, _structure = tensors.flatten_outputs(out)
            seen = [t.detach().clone() for t in outs]
            if device == "cuda":
                torch.cuda.synchronize()
            tensors.save_tensors(seen, job_dir / "out" / f"check-{variant}.safetensors")
        except Exception as err:
            results[variant] = {"ok": False, "error": f"{type(err).__name__}: {err}"[:1000]}
            continue
        results[variant] = {
            "ok": True,
            "timing": timed.to_dict(),
            "deferred_work": timed.deferred_work_suspected(),
            "launches_first_call": launches,
            "launches_timed": launches_timed,
        }

    response: dict[str, Any] = {
        "ok": True, "pid": os.getpid(), "variants": results,
        "clocks_tampered": timing.tampered_clocks(),
        "tampering": guards.tampering(base, counter),
        "leftovers": guards.leftovers(base),
    }
    if "eager" in variants and results.get("eager", {}).get("ok"):
        from kopt.harness.roofline import roofline_summary

        try:
            response["roofline"] = roofline_summary(
                case, input_set, device, results["eager"]["timing"]["median_ms"])
        except Exception as err:  # no ceilings here: the table shows no % of floor
            response["roofline_error"] = f"{type(err).__name__}: {err}"[:500]
    return response
