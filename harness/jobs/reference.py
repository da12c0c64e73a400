"""`reference`: the baseline's outputs on staged inputs, in a worker that never sees candidate code.

Request: `{"job": "reference", "case_dir", "device", "precision", "sets": [{"name", "groups":
[group, ...], "weights"?, "spec"?, "views"?}]}` with `inputs/<weights>.safetensors` (default
`weights-<set>`) and `inputs/<group>.safetensors`; `spec` and `views` describe an input set the
manifest does not declare (harness.verification.draws); a set listed twice (a second
state_dict) adds outputs.
Writes `out/ref-<group>.safetensors` and, per set, the output structure and the aten compute
ops the baseline runs (what "no PyTorch fallback" compares a candidate against).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import instantiate, model_class
    from kopt.harness.verification import draws, guards, tensors

    if any(name.startswith("kopt_candidate") for name in sys.modules) or "candidate" in request:
        raise RuntimeError("the reference worker must never see candidate code")
    device = request["device"]
    guards.set_precision(request.get("precision", "strict"))
    case = load_case_dir(job_dir / request["case_dir"])
    cls = model_class(case)
    facts: dict[str, Any] = {}
    for item in request["sets"]:
        set_name = item["name"]
        resolved = draws.resolve(case, item)
        weights = tensors.load_bases(
            job_dir / "inputs" / f"{item.get('weights', f'weights-{set_name}')}.safetensors", "cpu")
        model = instantiate(cls, resolved, case.model_file)
        model.load_state_dict(weights, strict=True)
        model = model.to(device).eval()
        set_facts: dict[str, Any] = {}
        for i, group in enumerate(item["groups"]):
            bases = tensors.load_bases(job_dir / "inputs" / f"{group}.safetensors", device)
            inputs = draws.materialize(resolved, bases, device, item.get("views"))
            recorder = guards.OpRecorder()
            with torch.no_grad(), recorder:
                result = model(*inputs.args, **inputs.kwargs)
            outs, structure = tensors.flatten_outputs(result)
            tensors.save_tensors(outs, job_dir / "out" / f"ref-{group}.safetensors")
            if i == 0:
                set_facts = {"structure": structure, "compute_ops": recorder.compute_ops(),
                             "compute_elements": dict(recorder.elements)}
        facts.setdefault(set_name, set_facts)  # a set's second entry (other weights) adds outputs
    return {"ok": True, "pid": os.getpid(), "sets": facts}
