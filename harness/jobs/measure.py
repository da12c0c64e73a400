"""`measure`: time one variant of a case inside the worker and write its metrics.

Request: `{"job": "measure", "case_dir", "variant": "eager"|"compile"|"candidate",
"candidate"?, "device", "input_set", "label", "profile", "seed", "timing_options"}`.

Eager and compile: the baseline is built, its reference outputs computed, then the variant
(the same model or `torch.compile` of it) is handed to `execute_variant`, which writes
`out/artifacts/<label>/`.

A candidate runs under a supervisor (harness.jobs.supervised): no reference output ever exists
in the candidate's process. The forked child imports the candidate, times it with
`execute_variant(reference=None)` and sends the first call's outputs and the metrics through
the link, then the timed calls' output fingerprints (harness.verification.fingerprints); after
the child is gone, the supervisor computes the baseline's reference on the same deterministic
inputs, judges parity, and writes `metrics.json` and `timed_outputs.json` itself (the parent
compares the fingerprints with a reference job's outputs). Failures come back as
`{"ok": false, "error", "error_kind"}` with `error_kind` one of `case` (the baseline cannot
load or run: the user's input is bad), `compile` (torch.compile failed), `candidate`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
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
    if request.get("variant") == "candidate":
        return _run_supervised(job_dir, request)
    from kopt.harness.jobs import supervised

    supervised.drop_early()  # the baseline runs here: no other process on the GPU
    return _run_baseline(job_dir, request)


def _child(link: Any, job_dir: Path, request: dict[str, Any], warmed: str | None = None) -> None:
    """The candidate's process: import, build, time; outputs and metrics leave through `link`.
    `warmed`: the device a standby's early child has already started."""
    import json

    import torch
    from safetensors.torch import save as st_save

    from kopt.harness.case import load_case_dir
    from kopt.harness.runner import execute_variant, make_case_forward
    from kopt.harness.steps import Steps

    send = link.send
    steps = Steps()
    device = request["device"]
    if device == "cpu":
        torch.set_num_threads(int(request.get("cpu_threads", 1)))
    with steps("cuda start"):
        if device == "cuda" and warmed != "cuda":
            torch.zeros(1, device="cuda")
    case = load_case_dir(job_dir / request["case_dir"])
    try:
        with steps("candidate import"):
            cls = load_candidate_class(job_dir / request["candidate"])
        with steps("model and inputs"):
            forward = make_case_forward(case, device=device, input_set=request.get("input_set"),
                                        seed=int(request.get("seed", 0)), model_cls=cls)
    except BaseException as err:  # candidate code: any failure is data
        send({"ev": "result", "response": _failure("candidate",
                                                    f"candidate does not load: {_first_line(err)}")})
        return

    def on_output(out: list[Any]) -> None:
        send({"ev": "sample", "data": st_save({f"o{i}": t.detach().to("cpu", copy=True).contiguous()
                                               for i, t in enumerate(out)})})

    def on_timed_outputs(prints: list[dict[str, Any]]) -> None:
        send({"ev": "timed_outputs", "prints": prints})

    try:
        metrics = execute_variant(request["label"], forward,
                                  use_profiler=bool(request.get("profile")),
                                  artifacts_dir=job_dir / "out" / "artifacts", reference=None,
                                  variant=request.get("name") or "candidate",
                                  timing_options=request.get("timing_options") or None,
                                  on_output=on_output, on_timed_outputs=on_timed_outputs)
    except Exception as err:
        send({"ev": "result", "response": _failure("candidate",
                                                    f"candidate failed while timing: {_first_line(err)}")})
        return
    steps.merge(metrics.get("steps"))
    metrics["steps"] = steps.to_dict()
    send({"ev": "result", "response": {"ok": True,
                                       "metrics": json.loads(json.dumps(metrics, default=str))}})


def _run_supervised(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import json

    from safetensors.torch import load as st_load

    from kopt.harness.case import load_case_dir
    from kopt.harness.errors import KoptError
    from kopt.harness.jobs import supervised
    from kopt.harness.runner import _parity, make_case_forward, reference_outputs
    from kopt.harness.steps import Steps

    steps = Steps()
    t_child = time.monotonic()
    pid, link, _early = supervised.start_child("measure", job_dir, request)
    sample: bytes | None = None
    prints: list[Any] | None = None
    result: dict[str, Any] | None = None
    try:
        while result is None:
            msg = link.recv()
            if msg.get("ev") == "sample" and sample is None:
                sample = bytes(msg.get("data") or b"")
            elif msg.get("ev") == "timed_outputs" and prints is None:
                prints = list(msg.get("prints") or [])
            elif msg.get("ev") == "result":
                result = dict(msg.get("response") or {})
    except supervised.ChannelClosed:
        pass
    status = supervised.end_child(pid, link)
    if result is None:
        from kopt.harness.jobs.candidate import _death

        return {**_failure("candidate", _death(status, "no result")), "traceback": ""}
    if not result.get("ok"):
        return result
    metrics = dict(result.get("metrics") or {})
    child_steps = metrics.get("steps") or {}
    steps.merge(child_steps)
    steps.add("candidate process, other", max(0.0, time.monotonic() - t_child - sum(
        v for v in child_steps.values() if isinstance(v, int | float))))
    # The reference, here and only now: the candidate's process is gone.
    t_ref = time.monotonic()
    try:
        case = load_case_dir(job_dir / request["case_dir"])
        baseline = make_case_forward(case, device=request["device"],
                                     input_set=request.get("input_set"),
                                     seed=int(request.get("seed", 0)))
        reference = reference_outputs(baseline)
    except KoptError as err:
        return _failure("case", err.one_line())
    except Exception as err:  # the user's model raised on its own inputs
        return _failure("case", f"the baseline raised {_first_line(err)} (fix model.py or the "
                                f"manifest's inputs)")
    steps.add("supervisor reference", time.monotonic() - t_ref)
    try:
        data = st_load(sample) if sample else {}
        out = [data[f"o{i}"] for i in range(len(data))]
    except Exception:  # malformed bytes from the candidate's process
        out = []
    metrics["correctness"] = _parity(case, out, reference)
    metrics["correctness"]["judged_by"] = "supervisor"
    label_dir = job_dir / "out" / "artifacts" / str(request["label"])
    label_dir.mkdir(parents=True, exist_ok=True)
    # The timed calls' fingerprints as they came over the link (the parent compares them with
    # a reference job's outputs, harness.verification.fingerprints): written here, over
    # anything the candidate's process left; whether they are expected is decided here too.
    fingerprinted = os.environ.get("KOPT_TIMED_FINGERPRINTS", "1") != "0"
    (label_dir / "timed_outputs.json").unlink(missing_ok=True)
    if fingerprinted:
        (label_dir / "timed_outputs.json").write_text(json.dumps(prints or []))
    timed = metrics.get("timed_outputs") if isinstance(metrics.get("timed_outputs"), dict) else {}
    metrics["timed_outputs"] = {"calls": timed.get("calls"),
                                "file": "timed_outputs.json" if fingerprinted else None}
    metrics["steps"] = steps.to_dict()
    tmp = label_dir / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=1, default=str))
    tmp.replace(label_dir / "metrics.json")
    return {"ok": True, "metrics": metrics, "steps": metrics["steps"]}


def _run_baseline(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kopt.harness.case import load_case_dir
    from kopt.harness.errors import KoptError
    from kopt.harness.runner import execute_variant, make_case_forward, reference_outputs
    from kopt.harness.steps import Steps

    steps = Steps()
    device = request["device"]
    variant = request["variant"]
    input_set = request.get("input_set")
    seed = int(request.get("seed", 0))
    if device == "cpu":
        # One intra-op thread: on a small shared machine OpenMP workers that lose their core
        # stall every op for milliseconds; one thread gives stable interpreter figures.
        torch.set_num_threads(int(request.get("cpu_threads", 1)))
    with steps("cuda start"):
        if device == "cuda":
            torch.zeros(1, device="cuda")
    try:
        with steps("model and inputs"):
            case = load_case_dir(job_dir / request["case_dir"])
            baseline = make_case_forward(case, device=device, input_set=input_set, seed=seed)
    except KoptError as err:
        return _failure("case", err.one_line())
    try:
        with steps("reference"):
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
            with steps("torch.compile"):
                forward()
        except Exception as err:
            return _failure("compile", f"torch.compile failed on {device}: {_first_line(err)}")
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
    steps.merge(metrics.get("steps"))
    metrics["steps"] = steps.to_dict()
    return {"ok": True, "metrics": metrics, "steps": metrics["steps"]}
