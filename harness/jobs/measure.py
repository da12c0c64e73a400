"""`measure`: time one variant of a case inside the worker and write its metrics.

Request: `{"job": "measure", "case_dir", "variant": "eager"|"compile"|"candidate",
"candidate"?, "device", "input_set", "label", "profile", "seed", "timing_options"}`.

The baseline is built and its reference outputs computed first, before any candidate code is
imported. Then the variant is built (the same model, `torch.compile` of it, or the
candidate's `ModelNew` loaded strictly with the baseline's weights) and handed to
`execute_variant`, which writes `out/artifacts/<label>/`. Failures come back as
`{"ok": false, "error", "error_kind"}` with `error_kind` one of `case` (the baseline cannot
load or run: the user's input is bad), `compile` (torch.compile failed), `candidate`.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

CANDIDATE_MODULE = "kopt_measured_candidate"


def _failure(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error_kind": kind, "error": message[:2000],
            "traceback": traceback.format_exc()[-4000:]}


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()


def load_candidate_class(path: Path) -> type:
    """Import the candidate file and return its `ModelNew`."""
    spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CANDIDATE_MODULE] = module
    spec.loader.exec_module(module)
    cls = getattr(module, "ModelNew", None)
    if not isinstance(cls, type):
        raise ImportError(f"{path.name} defines no class ModelNew")
    return cls


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kopt.harness.case import load_case_dir
    from kopt.harness.errors import KoptError
    from kopt.harness.runner import execute_variant, make_case_forward, reference_outputs

    device = request["device"]
    variant = request["variant"]
    input_set = request.get("input_set")
    seed = int(request.get("seed", 0))
    if device == "cpu":
        # One intra-op thread: on a small shared machine OpenMP workers that lose their core
        # stall every op for milliseconds; one thread gives stable interpreter figures.
        torch.set_num_threads(int(request.get("cpu_threads", 1)))
    try:
        case = load_case_dir(job_dir / request["case_dir"])
        baseline = make_case_forward(case, device=device, input_set=input_set, seed=seed)
    except KoptError as err:
        return _failure("case", err.one_line())
    try:
        reference = reference_outputs(baseline)
    except Exception as err:  # the user's model raised on its own inputs
        cls = case.manifest.model.class_name
        return _failure("case", f"{case.model_file}: {cls}.forward raised {_first_line(err)} "
                                f"on the {baseline.input_set!r} inputs (fix model.py or the "
                                f"manifest's inputs)")

    if variant == "eager":
        forward = baseline
    elif variant == "compile":
        forward = baseline.with_model(torch.compile(baseline.model))
        try:
            forward()
        except Exception as err:
            return _failure("compile", f"torch.compile failed on {device}: {_first_line(err)}")
    elif variant == "candidate":
        try:
            cls = load_candidate_class(job_dir / request["candidate"])
            del baseline  # the candidate gets its own model and fresh copies of the inputs
            forward = make_case_forward(case, device=device, input_set=input_set, seed=seed,
                                        model_cls=cls)
        except BaseException as err:  # candidate code: any failure is data
            return _failure("candidate", f"candidate does not load: {_first_line(err)}")
    else:
        return _failure("request", f"unknown variant {variant!r}")

    try:
        metrics = execute_variant(request["label"], forward,
                                  use_profiler=bool(request.get("profile")),
                                  artifacts_dir=job_dir / "out" / "artifacts",
                                  reference=reference,
                                  variant=request.get("name") or variant,
                                  timing_options=request.get("timing_options") or None)
    except Exception as err:
        kind = "candidate" if variant == "candidate" else variant
        return _failure(kind, f"{variant} failed while timing: {_first_line(err)}")
    return {"ok": True, "metrics": metrics}
