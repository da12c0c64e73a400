"""`reference`: the baseline's outputs on staged inputs, in a worker that never sees candidate code.

A model with plain tensor attributes (state outside the state_dict: `harness.model_state`)
starts every call from the staged weights' values of them, and its output is `(output, [the
attributes after the call])`, sorted by path: what the candidate job records too.

Request: `{"job": "reference", "case_dir", "device", "precision", "sets": [{"name", "groups":
[group, ...], "weights"?, "spec"?, "views"?}]}` with `inputs/<weights>.safetensors` (default
`weights-<set>`) and `inputs/<group>.safetensors`; `spec` and `views` describe an input set the
manifest does not declare (harness.verification.draws); a set listed twice (a second
state_dict) adds outputs.
Writes `out/ref-<group>.safetensors` and, per set, the output structure and the aten compute
ops the baseline runs (what "no PyTorch fallback" compares a candidate against). A set with
`"truth": true` (the hard-value draws) also runs a float64 copy of the model on its inputs
cast to float64, every dtype forward asks for widened to float64 as well, and writes
`out/truth-<group>.safetensors`: the yardstick against which the baseline's own rounding
error is measured (`hard_values`, and misses that rounding could explain). With `"rounding":
true` as well, the baseline under random rounding (`harness.verification.rounding`), per
output the run farthest from that truth, as `out/rounded-<group>.safetensors`: how far honest
rounding may land from it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.utils._python_dispatch

from kopt.harness import model_state


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import model_class, with_weights
    from kopt.harness.steps import Steps
    from kopt.harness.verification import draws, guards, tensors

    if any(name.startswith("kopt_candidate") for name in sys.modules) or "candidate" in request:
        raise RuntimeError("the reference worker must never see candidate code")
    device = request["device"]
    steps = Steps()
    guards.set_precision(request.get("precision", "strict"))
    with steps("cuda start"):
        if device == "cuda":
            torch.zeros(1, device="cuda")
    case = load_case_dir(job_dir / request["case_dir"])
    cls = model_class(case)
    facts: dict[str, Any] = {}
    for item in request["sets"]:
        set_name = item["name"]
        resolved = draws.resolve(case, item)
        with steps("model"):
            weights = tensors.load_bases(
                job_dir / "inputs" / f"{item.get('weights', f'weights-{set_name}')}.safetensors",
                "cpu")
            model = with_weights(cls, resolved, case.model_file, weights, device)
            attributes = model_state.split(weights)[1]  # state beyond the state_dict
        set_facts: dict[str, Any] = {}
        if item.get("may_refuse"):  # an extra set the model itself may not take on this device
            model_state.restart(model, attributes)
            refused = _refuses(model, resolved, job_dir / "inputs" / f"{item['groups'][0]}.safetensors",
                               device, item.get("views"))
            if refused:
                facts[set_name] = {"refused": refused}
                continue
        for i, group in enumerate(item["groups"]):
            with steps("inputs"):
                bases = tensors.load_bases(job_dir / "inputs" / f"{group}.safetensors", device)
                inputs = draws.materialize(resolved, bases, device, item.get("views"))
            with steps("forward calls"):
                recorder = guards.OpRecorder()
                model_state.restart(model, attributes)  # every call starts from the loaded state
                with torch.no_grad(), recorder:
                    result = model(*inputs.args, **inputs.kwargs)
                if attributes:  # and the state it leaves is compared like an output
                    result = (result, model_state.after_call(model, sorted(attributes)))
            with steps("write outputs"):
                outs, structure = tensors.flatten_outputs(result)
                tensors.save_tensors(outs, job_dir / "out" / f"ref-{group}.safetensors")
            if i == 0:
                set_facts = {"structure": structure, "compute_ops": recorder.compute_ops(),
                             "compute_elements": dict(recorder.elements)}
            if item.get("truth"):
                with steps("float64 truth"):
                    truth, problem = _write_truth(model, inputs,
                                                  job_dir / "out" / f"truth-{group}.safetensors",
                                                  attributes)
                if problem:
                    set_facts["truth_error"] = problem
                if truth is not None and item.get("rounding"):
                    with steps("random rounding"):
                        problem = _write_rounded(model, inputs, attributes, truth,
                                                 job_dir / "out" / f"rounded-{group}.safetensors")
                    if problem:
                        set_facts["rounding_error"] = problem
        facts.setdefault(set_name, set_facts)  # a set's second entry (other weights) adds outputs
    return {"ok": True, "pid": os.getpid(), "sets": facts, "steps": steps.to_dict()}


def _refuses(model: torch.nn.Module, resolved: Any, file: Path, device: str,
             views: dict[str, Any] | None) -> str | None:
    """Why the baseline refuses an extra set's first draw on this device (its error in one
    line), or None when it runs (each later call restarts the model from its loaded state)."""
    from kopt.harness.verification import draws, tensors

    inputs = draws.materialize(resolved, tensors.load_bases(file, device), device, views)
    try:
        with torch.no_grad():
            model(*inputs.args, **inputs.kwargs)
    except Exception as err:  # noqa: BLE001 (any refusal: the set is left out, saying why)
        return f"{type(err).__name__}: {err}".splitlines()[0][:200]
    return None


def _as_float64(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.float64)
    if isinstance(value, list | tuple):
        return type(value)(_as_float64(v) for v in value)
    return value


_NARROW_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class _Float64Everywhere(torch.utils._python_dispatch.TorchDispatchMode):
    """Every floating dtype an op is asked for (`x.float()`, `h.type_as(x)` to bfloat16,
    `arange(..., dtype=torch.float32)`) made float64: the truth of a model that casts inside
    forward is its arithmetic without those roundings, not the roundings again."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        if kwargs.get("dtype") in _NARROW_FLOATS:
            kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


def _write_truth(model: torch.nn.Module, inputs: Any, file: Path,
                 attributes: dict[str, torch.Tensor]
                 ) -> tuple[list[torch.Tensor] | None, str | None]:
    """The baseline again in float64, from the loaded state (`attributes` in float64 too):
    the casts forward makes are widened too (`_Float64Everywhere`), so a bf16 round trip
    inside the model or a `.float()` of a float64 input does not round the truth. A model
    that cannot run so runs with its casts kept; one that cannot run in float64 at all gets
    no truth and says why: (the truth's outputs, None) or (None, the reason)."""
    from kopt.harness.verification import tensors

    problem = None
    for widen in (True, False):
        try:
            wide = copy.deepcopy(model).to(torch.float64)
            model_state.restart(wide, {k: _as_float64(v) for k, v in attributes.items()})
            default = torch.get_default_dtype()
            try:
                torch.set_default_dtype(torch.float64 if widen else default)
                with torch.no_grad(), (_Float64Everywhere() if widen else contextlib.nullcontext()):
                    result = wide(*_as_float64(list(inputs.args)),
                                  **{k: _as_float64(v) for k, v in inputs.kwargs.items()})
            finally:
                torch.set_default_dtype(default)
            if attributes:
                result = (result, model_state.after_call(wide, sorted(attributes)))
            outs, _structure = tensors.flatten_outputs(result)
            outs = [o.to(torch.float64) if o.is_floating_point() else o for o in outs]
            tensors.save_tensors(outs, file)
            return outs, None
        except Exception as exc:  # noqa: BLE001 (a model that has no float64 path)
            problem = f"{type(exc).__name__}: {exc}"[:300]
    return None, problem


def _write_rounded(model: torch.nn.Module, inputs: Any, attributes: dict[str, torch.Tensor],
                   truth: list[torch.Tensor], file: Path) -> str | None:
    """The baseline under random rounding (`rounding.farthest_runs`), each run from the loaded
    state; None, or why it could not run (the truth then stands alone)."""
    from kopt.harness.verification import rounding, tensors

    def forward() -> list[torch.Tensor]:
        model_state.restart(model, attributes)
        result = model(*inputs.args, **inputs.kwargs)
        if attributes:
            result = (result, model_state.after_call(model, sorted(attributes)))
        return tensors.flatten_outputs(result)[0]

    try:
        tensors.save_tensors(rounding.farthest_runs(forward, truth), file)
    except Exception as exc:  # noqa: BLE001 (an op the random rounding cannot run)
        return f"{type(exc).__name__}: {exc}"[:300]
    return None
