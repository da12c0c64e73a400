"""`bench`: time variants of a case on fresh inputs, in the worker, under observation.

Request: `{"job": "bench", "case_dir", "device", "precision", "input_set", "variants":
["eager", "compile"] | ["candidate"], "pool": [group, ...], "check": group,
"timing_options": {...}}` with `inputs/weights.safetensors` and `inputs/<group>.safetensors`.

A candidate is timed under a supervisor (harness.jobs.supervised): the staged inputs are
taken off the disk before its process is forked (into sealed memory files, out of the
supervisor's memory: harness.jobs.sealed) and sent after it is imported; the output
sample and the results leave through the link and are written once its process is gone.

Between timed calls `rotate(i)` writes the next pool group's values into the live input
tensors in place (fresh values, same storage: no cache keyed by address or shape helps).
After timing, the `check` group's values are written in and one forward's outputs are saved
to `out/check-<variant>.safetensors` for the parent to compare with the baseline's. Clock
and torch identities are re-checked after timing; the eager job also reports the roofline.
Only the timed calls hold the GPU gate (harness.gpu_gate) when one is set; a candidate's
supervisor takes it when the child asks ("gate" ... "gate_done").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    if request["variants"] == ["candidate"]:
        return _run_supervised(job_dir, request)
    from kopt.harness import gpu_gate
    from kopt.harness.jobs import supervised

    supervised.drop_early()  # eager and torch.compile run here: no other process on the GPU
    return _bench(job_dir, request, _files(job_dir), _save_file(job_dir), None,
                  gpu_gate.timing_window)


def _files(job_dir: Path) -> Any:
    from kopt.harness.verification import tensors

    return lambda name, device: tensors.load_bases(job_dir / "inputs" / f"{name}.safetensors",
                                                   device)


def _save_file(job_dir: Path) -> Any:
    from kopt.harness.verification import tensors

    return lambda variant, seen: tensors.save_tensors(
        seen, job_dir / "out" / f"check-{variant}.safetensors")


def _bench_child(link: Any, job_dir: Path, request: dict[str, Any],
                 warmed: str | None = None) -> None:
    """The candidate's process (`harness.jobs.supervised.CHILDREN`): import, then inputs over
    the link, then the timings; the sample and the result leave through `link`."""
    from safetensors.torch import load as st_load
    from safetensors.torch import save as st_save

    from kopt.harness.jobs.sealed import mapped

    send = link.send
    given: dict[str, Any] = {}  # a set's staged file: a sealed memory file, else bytes

    def load_candidate() -> Any:
        from kopt.harness.jobs.candidate import _load_candidate

        cls = _load_candidate(job_dir / request["candidate"])
        send({"ev": "imported"})
        msg = link.recv()
        given.update(msg.get("inputs") or {})
        return cls

    def load(name: str, device: str) -> Any:
        return {k: v.to(device) for k, v in st_load(bytes(mapped(given[name]))).items()}

    def save(variant: str, seen: list[Any]) -> None:
        send({"ev": "sample", "data": st_save({f"o{i}": t.detach().to("cpu").contiguous()
                                               for i, t in enumerate(seen)})})

    @contextmanager
    def window() -> Iterator[None]:
        # the supervisor holds the GPU gate (harness.gpu_gate) while the child times
        send({"ev": "gate"})
        link.recv()
        try:
            yield
        finally:
            send({"ev": "gate_done"})

    try:
        response = _bench(job_dir, request, load, save, load_candidate, window, warmed=warmed)
    except BaseException as err:  # candidate code: any failure is data
        response = {"ok": False, "error": f"{type(err).__name__}: {err}"[:1000]}
    send({"ev": "result", "response": _plain_json(response)})


def _run_supervised(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    """A candidate is timed in a forked child (harness.jobs.supervised): the staged inputs
    are taken off the disk first and sent after import; the output sample and the results
    come back through the link and are written here once the child is gone."""
    from kopt.harness.jobs import supervised
    from kopt.harness.jobs.sealed import SealedBuffer

    t_job = time.monotonic()
    staged = supervised.take_staged_inputs(job_dir, sealed=True)
    staged_s = time.monotonic() - t_job
    try:
        return _supervise(job_dir, request, staged, t_job, staged_s)
    finally:
        for value in staged.values():  # a standby serves more jobs: its memory files go now
            if isinstance(value, SealedBuffer):
                value.close()


def _supervise(job_dir: Path, request: dict[str, Any], staged: dict[str, Any], t_job: float,
               staged_s: float) -> dict[str, Any]:
    from kopt.harness import gpu_gate
    from kopt.harness.jobs import supervised
    from kopt.harness.jobs.candidate import _death, _handed

    gate = gpu_gate.from_env()
    held, holding = ExitStack(), False
    gate_wait = 0.0  # other problems' timing windows hold the GPU (kopt suite --jobs N)
    pid, link, _early = supervised.start_child("bench", job_dir, request)
    sample: bytes | None = None
    result: dict[str, Any] | None = None
    try:
        while result is None:
            msg = link.recv()
            if msg.get("ev") == "imported":
                link.send({"inputs": {k: _handed(v) for k, v in staged.items()}})
            elif msg.get("ev") == "gate":
                if gate is not None and not holding:  # a second ask would wait for itself
                    t_gate = time.monotonic()
                    held.enter_context(gate.exclusive())
                    gate_wait += time.monotonic() - t_gate
                    holding = True
                link.send({"go": True})
            elif msg.get("ev") == "gate_done":
                held.close()
                holding = False
            elif msg.get("ev") == "sample" and sample is None:
                sample = bytes(msg.get("data") or b"")
            elif msg.get("ev") == "result":
                result = dict(msg.get("response") or {})
    except supervised.ChannelClosed:
        pass
    finally:
        held.close()
    status = supervised.end_child(pid, link)
    out = supervised.clear_out(job_dir)
    if result is None:
        return {"ok": False, "error": _death(status, "no result")}
    if sample:
        (out / "check-candidate.safetensors").write_bytes(sample)
    result["supervisor_pid"] = os.getpid()
    # the supervisor's own part: inputs off the disk, and what the child's clock missed (its
    # start, the link's copies, its end, the sample written here)
    child = {k: v for k, v in (result.get("steps") or {}).items() if isinstance(v, int | float)}
    result["steps"] = {**child, "staged inputs": round(staged_s, 4),
                       "waiting for the GPU gate": round(gate_wait, 4),
                       "candidate process, other": round(max(
                           0.0, time.monotonic() - t_job - staged_s - gate_wait
                           - sum(child.values())), 4)}
    return result


def _plain_json(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))


def _bench(job_dir: Path, request: dict[str, Any], load: Any, save_check: Any,
           load_candidate: Any, window: Callable[[], AbstractContextManager[None]],
           warmed: str | None = None) -> dict[str, Any]:
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from kopt.harness import model_state, timing
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import model_class, with_weights
    from kopt.harness.steps import Steps
    from kopt.harness.verification import guards, tensors

    device = request["device"]
    steps = Steps()
    if device == "cpu":
        # One intra-op thread gives stable interpreter figures on a small shared machine.
        torch.set_num_threads(1)
    guards.set_precision(request.get("precision", "strict"))
    case = load_case_dir(job_dir / request["case_dir"])
    input_set = request["input_set"]
    resolved = case.input_set(input_set)
    counter = guards.LaunchCounter()
    counter.install()
    with steps("cuda start"):
        guards.start_device(device, warmed)
    with steps("baseline snapshot"):
        base = guards.take_baseline()

    variants = request["variants"]
    # A candidate is imported before any input exists in its process (sent after import).
    with steps("candidate import"):
        cls = load_candidate() if load_candidate is not None else model_class(case)
    with steps("model and inputs"):
        weights = load("weights", "cpu")
        pool = [load(g, device) for g in request["pool"]]
        check = load(request["check"], device)
        live = {k: v.clone() for k, v in pool[0].items()}
        inputs = tensors.materialize(resolved, live, device)
        model = with_weights(cls, resolved, case.model_file, weights, device)
        attributes = model_state.split(weights)[1]  # state outside the state_dict

    def rotate(i: int) -> None:
        src = pool[i % len(pool)]
        for k, v in src.items():
            live[k].copy_(v)

    results: dict[str, Any] = {}
    ready: dict[str, tuple[Callable[[], Any], int]] = {}
    for variant in variants:  # every first call (compiles, Triton JIT) before the GPU gate
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
            with steps(f"first call, {variant}"):
                fn()  # first call outside timing (torch.compile compiles here)
                if device == "cuda":
                    torch.cuda.synchronize()
            ready[variant] = (fn, len(counter.take()))
        except Exception as err:
            results[variant] = {"ok": False, "error": f"{type(err).__name__}: {err}"[:1000]}

    # the GPU alone for the timed calls only, one window for every variant (harness.gpu_gate)
    with window() if ready else nullcontext():
        for variant, (fn, launches) in ready.items():
            try:
                counter.take()
                with steps(f"timing, {variant}"):
                    timed = timing.time_callable(fn, device=device, rotate=rotate,
                                                 **(request.get("timing_options") or {}))
                launches_timed = len(counter.take())
                # The sample re-check: known values in, outputs out, after all timed calls.
                with steps(f"output sample, {variant}"):
                    for k, v in check.items():
                        live[k].copy_(v)
                    # a model that carries state from call to call (a recurrent cell's
                    # hidden tensor) starts from its loaded state, as every call the
                    # verifier compares does: the variants made different numbers of calls
                    model_state.restart(model, attributes)
                    out = fn()
                    outs, _structure = tensors.flatten_outputs(out)
                    seen = [t.detach().clone() for t in outs]
                    if device == "cuda":
                        torch.cuda.synchronize()
                    save_check(variant, seen)
            except Exception as err:
                results[variant] = {"ok": False,
                                    "error": f"{type(err).__name__}: {err}"[:1000]}
                continue
            results[variant] = {
                "ok": True,
                "graphs": graph_report(model) if variant == "candidate" else None,
                "timing": timed.to_dict(),
                "deferred_work": timed.deferred_work_suspected(),
                "launches_first_call": launches,
                "launches_timed": launches_timed,
            }

    with steps("checks after"):
        response: dict[str, Any] = {
            "ok": True, "pid": os.getpid(), "variants": results,
            "clocks_tampered": timing.tampered_clocks(),
            "tampering": guards.tampering(base, counter),
            "leftovers": guards.leftovers(base),
        }
    if "eager" in variants and results.get("eager", {}).get("ok"):
        from kopt.harness.roofline import roofline_summary

        try:
            with steps("roofline"):
                response["roofline"] = roofline_summary(
                    case, input_set, device, results["eager"]["timing"]["median_ms"])
        except Exception as err:  # no ceilings here: the table shows no % of floor
            response["roofline_error"] = f"{type(err).__name__}: {err}"[:500]
    response["steps"] = steps.to_dict()
    return response


def graph_report(model: object) -> dict[str, object] | None:
    """How an offline-engineer candidate's forward ran: CUDA graphs replayed, and why any input
    key ran op by op (`phases/engineers/offline/graph_replay.py` keeps a graph or the reason
    in `_kopt_graphs`); None for a model without one."""
    graphs = getattr(model, "_kopt_graphs", None)
    if not isinstance(graphs, dict):
        return None
    reasons = sorted({v[:300] for v in graphs.values() if isinstance(v, str)})[:5]
    return {"replayed": sum(_replays(v) for v in graphs.values()), "op_by_op": reasons}


def _replays(entry: object) -> bool:
    """Whether a `_kopt_graphs` entry holds a graph: a copying one (first item), or one over
    some input memory (a dict by address in the fourth; a tuple in files of before 2026-12-03)."""
    if not isinstance(entry, tuple):
        return False
    direct = entry[3] if len(entry) > 3 else None
    return entry[0] is not None or (any(direct.values()) if isinstance(direct, dict) else direct is not None)
