"""`candidate`: run a candidate's forward on staged inputs, under observation, in the worker.

Request: `{"job": "candidate", "case_dir", "candidate", "device", "precision", "sets":
[{"name", "draws": [group, ...], "inplace": group}]}` with `inputs/weights-<set>.safetensors`
and `inputs/<group>.safetensors` staged by the parent (harness.verify).

Per input set: draw 0 runs twice with different poison patterns (every element written?),
every draw runs on fresh tensors, then the last draw's input tensors get the `inplace` group's
values written into the same storage and run again (depends on inputs?). Writes raw tensors:
`out/cand-<group>.safetensors`, `out/cand-<set>-poison-b.safetensors`,
`out/post-<group>.safetensors` (inputs after forward), `out/weights-post-<set>.safetensors`;
and facts (launches, aten ops, aliasing, tampering, leftovers) to the response. It judges
nothing: the parent does.

A set may also carry (harness.verification.draws): `spec` (an input set the manifest does not
declare), `views` (inputs as strided views of their staged storage), `weights` (which staged
state_dict to load), `instance` (sets with the same one share a model instance), `partial` (a
few elements changed in place after `inplace`), `reload` (a second state_dict loaded into the
same instance, then its group run) and `conditions` per group (grad mode, no dispatch mode,
as under torch.compile: harness.verification.conditions.call_model).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

CANDIDATE_MODULE = "kopt_candidate"


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import triton  # noqa: F401  (imported before the snapshot: triton is not the candidate)
    import triton.language  # noqa: F401
    from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: F401

    from kopt.harness.case import load_case_dir
    from kopt.harness.data import instantiate
    from kopt.harness.verification import conditions, draws, guards, tensors  # noqa: F401

    device = request["device"]
    guards.set_precision(request.get("precision", "strict"))
    case = load_case_dir(job_dir / request["case_dir"])
    counter = guards.LaunchCounter()
    counter.install()
    audit = guards.AuditWatch([job_dir])
    if device == "cuda":
        torch.cuda.init()
    guards.warm_up_triton(device)
    base = guards.take_baseline()
    response: dict[str, Any] = {"ok": False, "stage": "import", "pid": os.getpid(), "sets": {}}
    out_dir = job_dir / "out"
    _progress(out_dir, "import")

    audit.armed = True
    t0 = time.monotonic()
    try:
        cls = _load_candidate(job_dir / request["candidate"])
    except BaseException as err:  # candidate code: any failure is data
        return _failed(response, "import", err, audit, base, counter)
    response["import_s"] = round(time.monotonic() - t0, 3)

    instances: dict[Any, torch.nn.Module] = {}  # sets with the same constructor share one
    for item in request["sets"]:
        set_name = item["name"]
        resolved = draws.resolve(case, item)
        facts: dict[str, Any] = {"forwards": [], "compiled": []}
        response["sets"][set_name] = facts
        weights = tensors.load_bases(
            job_dir / "inputs" / f"{item.get('weights', f'weights-{set_name}')}.safetensors", "cpu")
        cond = item.get("conditions") or {}
        try:
            response["stage"] = "build"
            model = instances.get(item.get("instance", object()))
            if model is None:
                model = instantiate(cls, resolved, case.model_file)
                instances[item.get("instance")] = model
            response["stage"] = "load_state_dict"
            model.load_state_dict(weights, strict=True)
            model = model.to(device).eval()
        except BaseException as err:
            return _failed(response, response["stage"], err, audit, base, counter)
        params = {f"weight {k}": v for k, v in model.state_dict(keep_vars=True).items()
                  if isinstance(v, torch.Tensor)}
        response["stage"] = "forward"
        _progress(out_dir, "forward")
        try:
            bases: dict[str, torch.Tensor] = {}
            for i, group in enumerate(item["draws"]):
                bases = tensors.load_bases(job_dir / "inputs" / f"{group}.safetensors", device)
                _forward(model, resolved, bases, device, "a", counter, params, facts,
                         out_dir / f"cand-{group}.safetensors", out_dir / f"post-{group}.safetensors",
                         item, cond.get(group))
                if i == 0 and item.get("poison_b", True):
                    again = tensors.load_bases(job_dir / "inputs" / f"{group}.safetensors", device)
                    _forward(model, resolved, again, device, "b", counter, params, facts,
                             out_dir / f"cand-{set_name}-poison-b.safetensors", None, item)
            # New values written into the same storage the last draw used: all of them
            # (`inplace`), then a few (`partial`).
            for key in ("inplace", "partial"):
                if not item.get(key, key == "inplace"):
                    continue
                new = tensors.load_bases(job_dir / "inputs" / f"{item[key]}.safetensors", device)
                ptrs = {k: v.data_ptr() for k, v in bases.items()}
                with torch.no_grad():
                    for k, v in new.items():
                        bases[k].copy_(v)
                _forward(model, resolved, bases, device, "a", counter, params, facts,
                         out_dir / f"cand-{item[key]}.safetensors",
                         out_dir / f"post-{item[key]}.safetensors", item, cond.get(item[key]))
                facts[f"{key}_same_storage"] = all(bases[k].data_ptr() == p for k, p in ptrs.items())
        except BaseException as err:
            return _failed(response, "forward", err, audit, base, counter)
        tensors.save_tensors({k: v for k, v in model.state_dict().items()
                              if isinstance(v, torch.Tensor)},
                             out_dir / f"weights-post-{set_name}.safetensors")
        if item.get("reload"):  # a second state_dict into the same instance (depends_on_weights)
            try:
                response["stage"] = "load_state_dict"
                model.load_state_dict(tensors.load_bases(
                    job_dir / "inputs" / f"{item['reload']['weights']}.safetensors", "cpu"))
                response["stage"] = "forward"
                group = item["reload"]["group"]
                _forward(model, resolved, tensors.load_bases(job_dir / "inputs" / f"{group}.safetensors",
                                                             device), device, "a", counter, params,
                         facts, out_dir / f"cand-{group}.safetensors", None, item, cond.get(group))
            except BaseException as err:
                return _failed(response, response["stage"], err, audit, base, counter)
    audit.armed = False
    response.update(_observations(audit, base, counter))
    response["stage"] = "done"
    response["ok"] = True
    return response


def _progress(out_dir: Path, stage: str) -> None:
    """The stage reached, on disk, so a worker that dies hard still says how far it got."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "stage").write_text(stage)


def _load_candidate(path: Path) -> type[torch.nn.Module]:
    spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CANDIDATE_MODULE] = module
    spec.loader.exec_module(module)
    cls = getattr(module, "ModelNew", None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ImportError("the candidate defines no `class ModelNew(nn.Module)`")
    return cls


def _forward(model: torch.nn.Module, resolved: Any, bases: dict[str, torch.Tensor], device: str,
             poison: str, counter: Any, params: dict[str, torch.Tensor], facts: dict[str, Any],
             out_file: Path, post_file: Path | None, item: dict[str, Any] | None = None,
             cond: dict[str, Any] | None = None) -> None:
    from kopt.harness.verification import conditions, draws, guards, tensors

    inputs = draws.materialize(resolved, bases, device, (item or {}).get("views"))
    guards.poison_free_device_memory(device)
    recorder = guards.OpRecorder(poison)
    counter.take()
    harness_stream = torch.cuda.current_stream() if device == "cuda" else None
    # grad mode, dispatch mode and torch.compile as the parent chose, through the timer's path
    result, mode_intact, compile_note = conditions.call_model(model, inputs, recorder, cond, device,
                                                              resolved.name)
    outs, structure = tensors.flatten_outputs(result)
    # What a consumer ordered after forward on the harness's stream sees: copies enqueued on
    # that stream before any synchronize (work left on a side stream is not yet there).
    seen = [t.detach().clone() for t in outs]
    if device == "cuda":
        torch.cuda.synchronize()
    launches = counter.take()
    named_inputs = {f"input {k}": v for k, v in bases.items()}
    fact = {
        "poison": poison,
        "structure": structure,
        "launches": len(launches),
        "kernels": sorted({x.kernel for x in launches}),
        "compute_ops": recorder.compute_ops(),
        "aliasing": tensors.aliasing(outs, {**named_inputs, **params}),
        "mode_intact": mode_intact,
        "condition": cond or {},
    }
    if compile_note:
        fact["compile_note"] = compile_note
    if harness_stream is not None:
        fact["side_streams"] = sorted({x.kernel for x in launches
                                       if x.stream not in (None, harness_stream.cuda_stream)})
        fact["stream_restored"] = torch.cuda.current_stream() == harness_stream
    facts["compiled" if (cond or {}).get("compile") else "forwards"].append(fact)
    tensors.save_tensors(seen, out_file)
    if post_file is not None:
        tensors.save_tensors(bases, post_file)


def _observations(audit: Any, base: Any, counter: Any) -> dict[str, Any]:
    from kopt.harness.verification import guards

    return {
        "tampering": guards.tampering(base, counter),
        "leftovers": guards.leftovers(base),
        "spawns": audit.spawns[:20],
        "writes": audit.writes[:20],
    }


def _failed(response: dict[str, Any], stage: str, err: BaseException, audit: Any, base: Any,
            counter: Any) -> dict[str, Any]:
    audit.armed = False
    response.update(_observations(audit, base, counter))
    response.update({"ok": False, "stage": stage,
                     "error": f"{type(err).__name__}: {err}".strip()[:2000],
                     "traceback": "".join(traceback.format_exception(err))[-3000:]})
    return response
