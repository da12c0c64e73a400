"""`candidate`: run a candidate's forward on staged inputs, under observation.

Request: `{"job": "candidate", "case_dir", "candidate", "device", "precision", "sets":
[{"name", "draws": [group, ...], "inplace": group}]}` with `inputs/weights-<set>.safetensors`
and `inputs/<group>.safetensors` staged by the parent (harness.verify).

The worker process is a supervisor (harness.jobs.supervised): it takes the staged inputs off
the disk (each file into a sealed memory file, copied by the kernel: never in the supervisor's
own memory, and the child closes every descriptor it inherits), forks a child that imports the
candidate, and only after the child says "imported" sends it inputs, one forward at a time
(each as a new descriptor of its sealed file). Per input set: draw 0 runs twice with different poison
patterns (every element written?), every draw runs on fresh tensors, then the last draw's input
tensors get the `inplace` group's values written into the same storage and run again (depends
on inputs?). After each call the previous call's result is sent again as it is now (a result
must not change on the next call). Launches and aten compute ops are streamed as they happen.
When the child is gone the supervisor writes `out/cand-<group>.safetensors`,
`out/cand-<set>-poison-b.safetensors`, `out/previous-cand-<group>.safetensors`,
`out/post-<group>.safetensors` (inputs after forward), `out/weights-post-<set>.safetensors` and
the facts in the response. It judges nothing: the parent does.

Inputs after forward and the previous call's result are compared where they live (on the GPU,
bit for bit, with a copy the harness took before the call) and sent only when they differ: the
response lists the unchanged ones (`post_unchanged`, and no `previous-cand-*` file), so a
full-size verification moves a third of the bytes it did; a change still reaches the parent
whole, which judges it as before. The weights after each set's forwards likewise: compared in
the child with the staged state_dict, sent (`weights-post-<set>`) only when a bit differs, else
the set is listed in `weights_unchanged`.

A set may also carry (harness.verification.draws): `spec` (an input set the manifest does not
declare), `views` (inputs as strided views of their staged storage), `weights` (which staged
state_dict to load), `instance` (sets with the same one share a model instance), `partial` (one
element of each input changed in place after `inplace`), `reload` (a second state_dict loaded into the
same instance, then its group run) and `conditions` per group (grad mode, no dispatch mode,
as under torch.compile: harness.verification.conditions.call_model). The plan stays with the
supervisor: the child gets each set's spec, views, instance and weights, each call's inputs and
conditions, the partial update and the reload over the link, after import, as it gets inputs.
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

from kopt.harness import model_state
from kopt.harness.jobs.sealed import Sealed, SealedBuffer, seal_bytes, tensor_views
from kopt.harness.steps import Steps

CANDIDATE_MODULE = "kopt_candidate"
NO_OP_LEAVES = frozenset({"to", "type_as", "resolve_conj", "resolve_neg"})
"""Aten ops that, as a leaf of the profiler's record (nothing beneath them), changed nothing:
a conversion to the dtype and device a tensor already has, conj/neg views of a real tensor."""


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    """The supervisor (harness.jobs.supervised): never imports the candidate; drives a forked
    child through the plan, then writes the job's record after the child is gone."""
    from kopt.harness.jobs import supervised

    record = _Record()
    with record.steps("staged inputs"):
        staged = supervised.take_staged_inputs(job_dir, sealed=True)
    out_dir = job_dir / "out"
    _progress(out_dir, "import")
    # The child knows where the case and the candidate are, not the plan: every set, draw and
    # condition reaches it over the link, after import.
    child_request = {k: v for k, v in request.items() if k != "sets"}
    pid, link, early = supervised.start_child("candidate", job_dir, child_request)
    record.response["child"] = "early" if early else "forked"
    try:
        _drive(link, request, staged, record, out_dir)
    except supervised.ChannelClosed as err:
        record.lost = str(err)
    finally:
        for value in staged.values():  # a standby serves more jobs: its memory files go now
            if isinstance(value, SealedBuffer):
                value.close()
    with record.steps("child's end"):
        status = supervised.end_child(pid, link)
    with record.steps("write outputs"):
        out = supervised.clear_out(job_dir)
        for name, data in record.files.items():
            if isinstance(data, Sealed):
                data.write_to(out / f"{name}.safetensors")
                data.close()
            else:
                (out / f"{name}.safetensors").write_bytes(data)
    response = record.response
    response["steps"] = record.steps.to_dict()
    response["pid"] = pid
    response["supervisor_pid"] = os.getpid()
    if record.lost and response.get("stage") != "done":
        response["ok"] = False
        if not response.get("error"):
            response["error"] = _death(status, record.lost)
    (out / "stage").write_text(str(response.get("stage")))
    return response


def _handed(data: Any) -> Any:
    """A staged file (a state_dict or an input set) as the child gets it: a sealed memory file
    where the system has them (no copy through the socket; a new descriptor of the one staged,
    which stays open for the next set), else its bytes."""
    if isinstance(data, SealedBuffer):
        return data.dup()
    return seal_bytes(data) or data


def _data(value: Any) -> bytes | Sealed:
    """A file's contents as the child sent them: a sealed memory file (kept as it is) or
    bytes."""
    return value if isinstance(value, Sealed) else bytes(value or b"")


def _death(status: int | None, why: str) -> str:
    if status is not None and status < 0:
        import signal

        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"the candidate's process was killed by signal {name} (crash, segfault or out of memory)"
    if status is not None:
        return f"the candidate's process exited with status {status} before its work was done"
    return f"the candidate's process stopped answering ({why})"


class _Record:
    """What the supervisor has received so far: facts as they arrived, and output files."""

    def __init__(self) -> None:
        self.response: dict[str, Any] = {"ok": False, "stage": "import", "sets": {}}
        self.files: dict[str, bytes | Sealed] = {}
        self.lost = ""
        self.ops: dict[str, int] = {}
        self.launches: list[dict[str, Any]] = []
        self.steps = Steps()


def _expect(link: Any, record: _Record, want: str) -> dict[str, Any]:
    """Messages until `want`; launches and ops streamed meanwhile are kept by the supervisor."""
    while True:
        msg = link.recv()
        ev = msg.get("ev")
        if ev == "op":
            name = str(msg.get("name"))
            record.ops[name] = record.ops.get(name, 0) + int(msg.get("elements") or 0)
        elif ev == "launch":
            record.launches.append({"kernel": str(msg.get("kernel")),
                                    "stream": msg.get("stream"),
                                    "programs": int(msg.get("programs") or 0)})
        elif ev == "failed":
            record.response.update(ok=False, stage=str(msg.get("stage")),
                                   error=str(msg.get("error"))[:2000],
                                   traceback=str(msg.get("traceback"))[-3000:])
            raise _Failed()
        elif ev == want:
            return msg
        else:
            raise _Failed()


class _Failed(Exception):
    pass


def _drive(link: Any, request: dict[str, Any], staged: dict[str, Any], record: _Record,
           out_dir: Path) -> None:
    resp = record.response
    try:
        t_start = time.monotonic()
        msg = _expect(link, record, "imported")
        # the wait for an early child still making its own start, and the rest
        late = min(float(msg.get("early_late_s") or 0.0), time.monotonic() - t_start)
        record.steps.add("early child still starting", late)
        record.steps.add("start and import", time.monotonic() - t_start - late)
        resp["import_s"] = msg.get("import_s")
        _progress(out_dir, "forward")
        for item in request["sets"]:
            set_name = item["name"]
            facts: dict[str, Any] = {"forwards": [], "compiled": []}
            resp["sets"][set_name] = facts
            conds: dict[str, Any] = item.get("conditions") or {}
            link.send({"op": "set", "name": set_name, "spec": item.get("spec"),
                       "views": item.get("views"), "instance": item.get("instance"),
                       "weights": _handed(staged[item.get("weights") or f"weights-{set_name}"])})
            resp["stage"] = "build"
            t_build = time.monotonic()
            msg = _expect(link, record, "built")
            # the child's own parts and the rest (the state_dict's bytes through the link)
            parts = {str(k): float(v) for k, v in (msg.get("steps") or {}).items()
                     if isinstance(v, int | float)}
            for name, seconds in parts.items():
                record.steps.add(f"build: {name}", seconds)
            record.steps.add("build: link and other",
                             max(0.0, time.monotonic() - t_build - sum(parts.values())))
            resp["stage"] = "forward"

            def forward(group: str, poison: str, out_name: str, post: str | None,
                        inplace: bool = False, facts: dict[str, Any] = facts,
                        conds: dict[str, Any] = conds) -> dict[str, Any]:
                cond = conds.get(group) or {}
                record.ops, record.launches = {}, []
                kind = "compiled calls" if cond.get("compile") else "forward calls"
                t_call = time.monotonic()
                link.send({"op": "inplace" if inplace else "forward",
                           "inputs": _handed(staged[group]), "poison": poison, "cond": cond})
                msg = _expect(link, record, "forward")
                # the round trip by part: the child's own (inputs in, the call, outputs out...)
                # and the rest (the link's copies, this side's bookkeeping)
                parts = {str(k): float(v) for k, v in (msg.get("steps") or {}).items()
                         if isinstance(v, int | float)}
                for name, seconds in parts.items():
                    record.steps.add(f"{kind}: {name}", seconds)
                record.steps.add(f"{kind}: link and other",
                                 max(0.0, time.monotonic() - t_call - sum(parts.values())))
                fact = dict(msg.get("fact") or {})
                # Launches and ops are the ones streamed while forward ran, not a summary.
                fact["launches"] = len(record.launches)
                fact["kernels"] = sorted({x["kernel"] for x in record.launches})
                fact["launch_streams"] = [x["stream"] for x in record.launches]
                fact["compute_ops"] = sorted(record.ops)
                fact["compute_elements"] = dict(record.ops)
                fact["condition"] = cond
                # a torch.compile draw is judged for its outputs only (`conditions`)
                facts["compiled" if cond.get("compile") else "forwards"].append(fact)
                record.files[out_name] = _data(msg.get("outputs"))
                if post is not None and msg.get("post") is not None:
                    record.files[post] = _data(msg["post"])
                elif post is not None and msg.get("post_unchanged") is True:
                    resp.setdefault("post_unchanged", []).append(post)
                if msg.get("previous") is not None:
                    record.files[f"previous-{out_name}"] = _data(msg["previous"])
                return fact

            draws = item["draws"]
            for i, group in enumerate(draws):
                forward(group, "a", f"cand-{group}", f"post-{group}")
                if i == 0 and item.get("poison_b", True):
                    forward(group, "b", f"cand-{set_name}-poison-b", None)
            # New values written into the same storage the last call used: all of them
            # (`inplace`), then a few (`partial`).
            for key in ("inplace", "partial"):
                group = item.get(key)
                if not group:
                    continue
                fact = forward(group, "a", f"cand-{group}", f"post-{group}", inplace=True)
                facts[f"{key}_same_storage"] = bool(fact.get("inplace_same_storage"))
            with record.steps("weights after"):
                link.send({"op": "weights"})
                msg = _expect(link, record, "weights")
            if msg.get("unchanged") is True:  # bit-identical to the staged state_dict
                resp.setdefault("weights_unchanged", []).append(set_name)
            else:
                record.files[f"weights-post-{set_name}"] = _data(msg.get("data"))
            reload = item.get("reload")
            if reload:  # a second state_dict into the same instance (depends_on_weights)
                resp["stage"] = "load_state_dict"
                with record.steps("reload: a second state_dict"):
                    link.send({"op": "reload", "weights": _handed(staged[reload["weights"]])})
                    _expect(link, record, "reloaded")
                resp["stage"] = "forward"
                forward(reload["group"], "a", f"cand-{reload['group']}", None)
        link.send({"op": "finish"})
        msg = _expect(link, record, "done")
        for key in ("tampering", "leftovers", "spawns", "writes"):
            resp[key] = msg.get(key)
        resp.update(ok=True, stage="done")
    except _Failed:
        try:  # what the child observed up to its failure
            msg = link.recv()
            if msg.get("ev") == "observations":
                for key in ("tampering", "leftovers", "spawns", "writes"):
                    resp[key] = msg.get(key)
        except Exception:  # noqa: BLE001 (it may be gone)
            pass


def _child(link: Any, job_dir: Path, request: dict[str, Any], warmed: str | None = None) -> None:
    """The forked child: imports the candidate, then runs what the supervisor asks, one
    request at a time. Every fact leaves through `link` as soon as it exists. `warmed`: the
    device whose CUDA context and first Triton launch an early child has already made."""
    import triton  # noqa: F401  (imported before the snapshot: triton is not the candidate)
    import triton.language  # noqa: F401
    from safetensors.torch import load as st_load
    from safetensors.torch import save as st_save

    from kopt.harness.case import load_case_dir
    from kopt.harness.data import instantiate
    from kopt.harness.jobs import early, sealed
    from kopt.harness.verification import conditions, draws, guards, tensors  # noqa: F401

    send = link.send

    def send_launch(launch: Any) -> None:
        send({"ev": "launch", "kernel": launch.kernel, "stream": launch.stream,
              "programs": launch.programs})

    def send_op(name: str, elements: int) -> None:
        send({"ev": "op", "name": name, "elements": elements})

    seal = sealed.seal_tensors  # bound before the candidate exists, as the link's calls are
    mapped = sealed.mapped  # likewise
    early_late_s = early.EARLY_LATE_S  # read before it, likewise

    def pack(named: dict[str, torch.Tensor]) -> Any:
        """A safetensors file of `named`: in a sealed memory file (harness.jobs.sealed: the
        device's copy lands in the pages the supervisor reads), else as bytes."""
        found = seal(named)
        if found is not None:
            return found
        return st_save({k: v.detach().to("cpu", copy=True).contiguous() for k, v in named.items()})

    same_bits = _same_bits  # bound before the candidate exists, as the link's calls are
    weights_unchanged = _weights_unchanged  # likewise
    # the model's state outside its state_dict (harness.model_state), bound likewise
    state_calls = (model_state.load, model_state.restart, model_state.after_call)
    attributes: dict[str, torch.Tensor] = {}

    device = request["device"]
    guards.set_precision(request.get("precision", "strict"))
    case = load_case_dir(job_dir / request["case_dir"])
    counter = guards.LaunchCounter(sink=send_launch)
    counter.install()
    audit = guards.AuditWatch([job_dir])
    guards.start_device(device, warmed)
    counter.take()
    base = guards.take_baseline()

    def fail(stage: str, err: BaseException) -> None:
        audit.armed = False
        send({"ev": "failed", "stage": stage, "error": _error_line(err),
              "traceback": _candidate_traceback(err, job_dir / request["candidate"])})
        send({"ev": "observations", **_observations(audit, base, counter)})

    audit.armed = True
    t0 = time.monotonic()
    try:
        cls = _load_candidate(job_dir / request["candidate"])
    except BaseException as err:  # candidate code: any failure is data
        fail("import", err)
        return
    send({"ev": "imported", "import_s": round(time.monotonic() - t0, 3),
          "early_late_s": early_late_s})

    model: Any = None
    instances: dict[Any, Any] = {}  # sets with the same constructor may share one
    params: dict[str, torch.Tensor] = {}
    resolved: Any = None
    staged_weights: Any = None  # the state_dict's staged bytes, as the set (or reload) sent them
    views: dict[str, Any] | None = None
    bases: dict[str, torch.Tensor] = {}
    previous: list[torch.Tensor] | None = None
    previous_seen: list[torch.Tensor] = []
    while True:
        msg = link.recv()
        op = msg.get("op")
        if op == "set":
            stage = "build"
            clock = Steps()
            try:
                resolved = draws.resolve(case, msg)
                views = msg.get("views") or None
                with clock("weights in"):
                    staged_weights = mapped(msg["weights"])
                    weights = _private_copy(staged_weights, st_load)
                key = msg.get("instance")
                model = instances.get(key) if key is not None else None
                if model is None:
                    with clock("construct"):
                        model = instantiate(cls, resolved, case.model_file, state_follows=True)
                    if key is not None:
                        instances[key] = model
                stage = "load_state_dict"
                with clock("load_state_dict"):
                    attributes = state_calls[0](model, weights)
                with clock("to the device"):
                    model = model.to(device).eval()
            except BaseException as err:
                fail(stage, err)
                return
            params = {f"weight {k}": v for k, v in model.state_dict(keep_vars=True).items()
                      if isinstance(v, torch.Tensor)}
            previous = None
            send({"ev": "built", "steps": clock.to_dict()})
        elif op == "reload":  # a second state_dict loaded into the same instance
            try:
                staged_weights = mapped(msg["weights"])
                attributes = state_calls[0](model, _private_copy(staged_weights, st_load))
            except BaseException as err:
                fail("load_state_dict", err)
                return
            params = {f"weight {k}": v for k, v in model.state_dict(keep_vars=True).items()
                      if isinstance(v, torch.Tensor)}
            send({"ev": "reloaded"})
        elif op in ("forward", "inplace"):
            clock = Steps()
            with clock("inputs in"):
                new = {k: v.to(device) for k, v in _private_copy(mapped(msg["inputs"]), st_load).items()}
            fact: dict[str, Any] = {}
            if op == "inplace":  # new values written into the storage the last draw used
                ptrs = {k: v.data_ptr() for k, v in bases.items()}
                with torch.no_grad():
                    for k, v in new.items():
                        bases[k].copy_(v)
                fact["inplace_same_storage"] = all(bases[k].data_ptr() == p
                                                   for k, p in ptrs.items())
            else:
                bases = new
            with clock("pristine copy"):
                pristine = {k: v.detach().clone() for k, v in bases.items()}
            try:
                with clock("the call"):
                    seen, outs, more = _forward(model, resolved, bases, device, msg["poison"],
                                                counter, params, send_op, views,
                                                msg.get("cond") or {},
                                                (attributes, *state_calls[1:]))
            except BaseException as err:
                fail("forward", err)
                return
            fact.update(more)
            with clock("outputs out"):
                packed = pack({f"o{i}": t for i, t in enumerate(seen)})
            reply: dict[str, Any] = {"ev": "forward", "fact": fact, "outputs": packed}
            # Inputs after forward: sent only when a bit differs from the harness's own copy.
            with clock("bit checks"):
                unchanged = all(same_bits(bases[k], pristine[k]) for k in bases)
            if unchanged:
                reply["post_unchanged"] = True
            else:
                reply["post"] = pack(bases)
            if previous is not None:
                # The last call's result as it is now (a result must not change on the next
                # call): sent only when it no longer matches what was sent for that call.
                kept = [(j, t) for j, t in enumerate(previous) if type(t) is torch.Tensor]
                if not all(j < len(previous_seen) and same_bits(t, previous_seen[j])
                           for j, t in kept):
                    reply["previous"] = pack({f"o{j}": t for j, t in kept})
                fact["previous_shares_storage"] = any(
                    tensors.aliasing(outs, {f"previous output[{j}]": p
                                            for j, p in enumerate(previous)}))
            previous, previous_seen = list(outs), seen
            reply["steps"] = clock.to_dict()
            send(reply)
        elif op == "weights":
            state = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
            if weights_unchanged(state, staged_weights, st_load):
                send({"ev": "weights", "unchanged": True})
            else:
                send({"ev": "weights", "data": pack(state)})
        elif op == "finish":
            audit.armed = False
            send({"ev": "done", **_observations(audit, base, counter)})
            return
        else:
            return


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaN payloads included), compared where the tensors are."""
    if type(a) is not torch.Tensor or a.shape != b.shape or a.dtype != b.dtype or \
            a.device != b.device:
        return False
    if a.numel() == 0:
        return True
    with torch.no_grad():
        x = a.detach().contiguous().reshape(-1).view(torch.uint8)
        y = b.detach().contiguous().reshape(-1).view(torch.uint8)
        return bool(torch.equal(x, y))


_COMPARE_CHUNK = 1 << 26
"""Elements of a weight moved to the model's device at a time by `_weights_unchanged`."""


def _private_copy(staged: Any, load: Any) -> dict[str, torch.Tensor]:
    """The staged state_dict's tensors as the child's own copies (what the candidate's model
    loads: never views of the staged buffer, which stays the reference `_weights_unchanged`
    compares with). `load` reads what `tensor_views` cannot."""
    views = tensor_views(staged)
    if views is None:
        return dict(load(bytes(staged)))
    return {k: v.clone() for k, v in views.items()}


def _weights_unchanged(state: dict[str, torch.Tensor], staged: Any, load: Any) -> bool:
    """Whether every weight of the staged state_dict (`staged`: as the child received it, the
    read-only mapping of its sealed memory file or its bytes, read here as views: no tensor the
    candidate's model holds) is bit-identical in the model's
    `state` after the forwards, by the parent's rule (harness.verify `no_mutation`: state outside
    the state_dict skipped, a weight held in another dtype converted back first). Compared
    where the model holds each weight, a chunk at a time: a large model's weights do not travel
    to the parent when nothing changed (an 8 GB MLP's copy and write took 55 of its 246 s of
    verification on an H200). Anything else, the parent judges the whole state as before.
    `load` reads the bytes where `tensor_views` cannot."""
    if staged is None:
        return False
    wanted = tensor_views(staged)
    if wanted is None:
        wanted = load(bytes(staged))
    for k, want in wanted.items():
        if k.startswith(model_state.ATTRIBUTE_PREFIX):
            continue
        got = state.get(k)
        if type(got) is not torch.Tensor or got.shape != want.shape:
            return False
        with torch.no_grad():
            g = got.detach()
            g = (g if g.dtype == want.dtype else g.to(want.dtype)).reshape(-1)
            w = want.reshape(-1)
            for i in range(0, max(w.numel(), 1), _COMPARE_CHUNK):
                if not _same_bits(g[i:i + _COMPARE_CHUNK].contiguous(),
                                  w[i:i + _COMPARE_CHUNK].to(g.device)):
                    return False
    return True


def _error_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()[:2000]


def _candidate_traceback(err: BaseException, candidate: Path) -> str:
    """The traceback, and first the innermost frame in the candidate's file (what the user
    opens), as `candidate.py:LINE in FUNC: CODE`."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if Path(f.filename).name == candidate.name]
    if isinstance(err, SyntaxError) and err.lineno is not None:
        where = f"candidate.py:{err.lineno}: {(err.text or '').strip()}"
    elif mine:
        f = mine[-1]
        where = f"candidate.py:{f.lineno} in {f.name}: {(f.line or '').strip()}"
    else:
        where = ""
    text = "".join(traceback.format_exception(err))[-3000:]
    return (f"at {where}\n" if where else "") + text


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
             poison: str, counter: Any, params: dict[str, torch.Tensor], send_op: Any,
             views: dict[str, Any] | None, cond: dict[str, Any], state: tuple[Any, Any, Any],
             ) -> tuple[list[torch.Tensor], list[torch.Tensor], dict[str, Any]]:
    """One observed forward under the call conditions `cond` (grad mode, no dispatch mode, as
    under torch.compile; through the timer's call path: `verification.conditions`): copies of
    the outputs (what leaves the process), the live outputs (kept to check them again after
    the next call), and the facts seen. `state`: (the loaded plain tensor attributes, restart,
    after_call) of `harness.model_state`: the call starts from the loaded state, and the state
    it leaves is an output, as in the reference job."""
    from kopt.harness.verification import conditions, draws, guards, tensors

    attributes, restart, after_call = state
    restart(model, attributes)
    inputs = draws.materialize(resolved, bases, device, views)
    guards.poison_free_device_memory(device)
    recorder = guards.OpRecorder(poison, sink=send_op)
    counter.take()
    harness_stream = torch.cuda.current_stream() if device == "cuda" else None
    trace = _Trace(device)
    trace.start()
    result, mode_intact, compile_note = conditions.call_model(model, inputs, recorder, cond,
                                                              device, resolved.name)
    trace.stop()
    if attributes:
        result = (result, after_call(model, sorted(attributes)))
    # Before anything touches the result: a tensor subclass may compute only when touched.
    types_seen = [type(x).__module__ + "." + type(x).__qualname__
                  for x in _leaves(result) if isinstance(x, torch.Tensor)]
    outs, structure = tensors.flatten_outputs(result)
    # What a consumer ordered after forward on the harness's stream sees: copies enqueued on
    # that stream before any synchronize (work left on a side stream is not yet there).
    seen = [t.detach().clone() if type(t) is torch.Tensor else torch.empty(0) for t in outs]
    if device == "cuda":
        torch.cuda.synchronize()
    launches = counter.take()
    named_inputs = {f"input {k}": v for k, v in bases.items()}
    fact: dict[str, Any] = {
        "poison": poison,
        "structure": structure,
        "output_types": types_seen,
        "aliasing": tensors.aliasing(outs, {**named_inputs, **params}),
        "mode_intact": mode_intact,
    }
    if compile_note:
        fact["compile_note"] = compile_note
    if harness_stream is not None:
        fact["side_streams"] = sorted({x.kernel for x in launches
                                       if x.stream not in (None, harness_stream.cuda_stream)})
        fact["stream_restored"] = torch.cuda.current_stream() == harness_stream
    # Without a dispatch mode (a `plain` call) the recorder saw nothing by design: the
    # profiler's record is not compared with it there.
    hidden = None if cond.get("plain") else trace.hidden_ops(set(recorder.ops))
    if hidden is not None:
        fact["hidden_ops"] = hidden
    if device == "cuda" and trace.device_kernels is not None:
        fact["device_kernels"] = trace.device_kernels
    return seen, outs, fact


class _Trace:
    """The profiler's own record of one forward, beside the dispatch-mode recorder:

    - aten ops from PyTorch's C++ `RecordFunction` callbacks, which fire whether or not a
      Python dispatch mode is on the stack: a compute op seen here but not by the recorder ran
      while the recorder was switched off (`_disable_current_modes`);
    - CUDA only: the kernels the device really ran, from the CUDA profiler's activity records
      (CUPTI through Kineto), not from Python-level counters.
    A profiler that cannot start leaves both facts absent (never empty)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._prof: Any = None
        self.events: Any = None
        self.device_kernels: dict[str, int] | None = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        try:
            self._prof = profile(activities=activities)
            self._prof.__enter__()
        except Exception:  # noqa: BLE001 (no profiler here)
            self._prof = None

    def stop(self) -> None:
        if self._prof is None:
            return
        try:
            self._prof.__exit__(None, None, None)
            self.events = list(self._prof.events())
        except Exception:  # noqa: BLE001 (a candidate that stopped it: the facts stay absent)
            self.events = None
            return
        if self.device == "cuda":
            names: dict[str, int] = {}
            for event in self.events:
                if str(getattr(event, "device_type", "")).endswith("CUDA"):
                    names[event.name] = names.get(event.name, 0) + 1
            self.device_kernels = names

    def hidden_ops(self, seen: set[str]) -> list[str] | None:
        """Leaf aten ops of the profiler's record that the recorder did not see, neither
        themselves nor any aten op above them (the recorder sees an op with a kernel of its
        own, e.g. `stack`, whose profiler record holds a `cat` beneath it), less bookkeeping
        and conversions that did nothing (a leaf `to`: with a copy, `_to_copy` is beneath)."""
        from kopt.harness.verification.guards import NON_COMPUTE_OPS

        if self.events is None:
            return None
        hidden = set()
        for event in self.events:
            name = str(event.name)
            if not name.startswith("aten::") or any(
                    str(c.name).startswith("aten::") for c in event.cpu_children):
                continue
            op = name[len("aten::"):]
            if op in NON_COMPUTE_OPS or op in NO_OP_LEAVES:
                continue
            # An op the recorder saw may run others below the dispatcher (convolution ->
            # cudnn_convolution, stack -> cat): a leaf under a recorded op was not hidden.
            above, depth, covered = event, 0, False
            while above is not None and depth < 64 and not covered:
                covered = str(above.name).startswith("aten::") and str(above.name)[6:] in seen
                above, depth = getattr(above, "cpu_parent", None), depth + 1
            if not covered:
                hidden.add(op)
        return sorted(hidden)


def _leaves(result: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return list(tree_leaves(result))


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
