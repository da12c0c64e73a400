"""Outputs checked during timing: every timed call's output fingerprinted, a sample compared.

Worker side (`TimedOutputs`): wraps the forward the timer calls. It keeps a reference to the
latest call's outputs and fingerprints them when the timer next swaps input buffers
(`rotate`, which runs before the next call's start event) or when timing ends: never inside
the timed region. A fingerprint per output tensor: the float64 sum, the float64 L1 norm (one
reduction each, no full-size temporary) and `SAMPLE` elements at evenly spaced positions.
On a GPU the fingerprints stay on the device until timing ends (no synchronisation between
timed calls); they leave the worker in the job's response.

Parent side (`compare`): the fingerprints of every timed call are compared with the
reference's outputs on the same buffer set, computed where candidate code never ran. For
tolerances `atol`, `rtol` the element-wise bound implies
`|sum(out) - sum(ref)| <= atol * n + rtol * sum(|ref|)` (and the same for the L1 norm), so a
correct output never fails it, while a stale, lazy or made-up output fails it unless it
matches the reference's sums; the sampled elements are compared element-wise.

The verifier's own forwards go through the same wrapper and the same timer call path
(`verification.conditions.call_model`), so the frames under the model's forward do not tell
checking from timing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

SAMPLE = 16
"""Elements sampled per output tensor per timed call."""
MAX_CALLS = 2048
"""Timed calls fingerprinted at most (the rest are counted, not fingerprinted)."""


def _outputs(result: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]


class TimedOutputs:
    """The forward the timer calls; remembers what each call returned (see the module doc)."""

    def __init__(self, forward: Callable[[], Any], *, rotate: Callable[[int], None] | None = None,
                 record: bool = False) -> None:
        self.forward = forward
        self._rotate = rotate
        self.record = record
        self.result: Any = None
        self.buffer = 0
        self.calls = 0
        self._pending: tuple[int, Any] | None = None
        self._prints: list[tuple[int, list[tuple[Any, ...]]]] = []

    def __call__(self) -> Any:
        self.result = self.forward()
        self.calls += 1
        if self.record:
            self._pending = (self.buffer, self.result)
        return self.result

    def rotate(self, i: int) -> None:
        """Fingerprint the last call (outside the timed region), then swap in buffer set i."""
        self.take()
        self.buffer = i
        if self._rotate is not None:
            self._rotate(i)

    def take(self) -> None:
        if self._pending is None:
            return
        buffer, result = self._pending
        self._pending = None
        if len(self._prints) >= MAX_CALLS:
            return
        prints = []
        with torch.no_grad():
            for t in _outputs(result):
                t = t.detach()
                if t.is_complex() or t.numel() == 0:
                    continue
                flat = t.reshape(-1)
                # integer steps: a float32 linspace rounds n - 1 up past the end for n > 2**24
                # (a device-side assert on the H100 at 8192x8192)
                k = min(SAMPLE, flat.numel())
                idx = torch.arange(k, device=t.device, dtype=torch.int64) * (flat.numel() - 1) \
                    // max(k - 1, 1)
                x = flat if t.dtype != torch.bool else flat.to(torch.uint8)
                xf = x if x.is_floating_point() else x.to(torch.float64)
                prints.append((torch.sum(x, dtype=torch.float64),
                               torch.linalg.vector_norm(xf, ord=1, dtype=torch.float64),
                               torch.linalg.vector_norm(xf, ord=2, dtype=torch.float64),
                               flat[idx].clone(), flat.numel()))
        self._prints.append((buffer, prints))

    def fingerprints(self) -> list[dict[str, Any]]:
        """Every recorded call: `{"buffer", "outputs": [{"sum", "l1", "l2", "sample", "numel"}]}`."""
        self.take()
        out = []
        for buffer, prints in self._prints:
            out.append({"buffer": buffer, "outputs": [
                {"sum": float(s), "l1": float(l1), "l2": float(l2),
                 "sample": s_.double().cpu().tolist(), "numel": n}
                for s, l1, l2, s_, n in prints]})
        return out


def expected(reference: list[torch.Tensor]) -> list[dict[str, Any]]:
    """The fingerprint of the reference's outputs (same positions as `TimedOutputs`)."""
    rec = TimedOutputs(lambda: reference, record=True)
    rec()
    return rec.fingerprints()[0]["outputs"]


def expected_by_buffer(references: dict[int, list[torch.Tensor]]) -> dict[int, dict[str, Any]]:
    """Buffer set -> `{"outputs": fingerprints, "dtypes": [...]}` of the reference's outputs."""
    return {b: {"outputs": expected(r), "dtypes": [str(t.dtype).removeprefix("torch.") for t in r]}
            for b, r in references.items()}


def compare(prints: list[dict[str, Any]], references: dict[int, dict[str, Any]],
            tol: Callable[[torch.dtype], Any], buffers: int) -> tuple[bool, str]:
    """Do the timed calls' fingerprints match the reference on their buffer sets?

    `references`: buffer set index (modulo `buffers`) -> `expected_by_buffer`'s entry.
    """
    if not prints:
        return False, "no timed call was fingerprinted"
    refs = {int(b): (r["outputs"], [getattr(torch, d) for d in r["dtypes"]])
            for b, r in references.items()}
    for n, call in enumerate(prints):
        b = call["buffer"] % max(buffers, 1)
        if b not in refs:
            continue
        want, ref = refs[b]
        if len(call["outputs"]) != len(want):
            return False, f"timed call {n}: {len(call['outputs'])} outputs, the baseline returns {len(want)}"
        for j, (got, exp, dtype) in enumerate(zip(call["outputs"], want, ref, strict=True)):
            t = tol(dtype)
            atol, rtol = float(getattr(t, "atol", 0.0)), float(getattr(t, "rtol", 0.0))
            rel = float(getattr(t, "rel", 0.0) or 0.0)
            if got["numel"] != exp["numel"]:
                return False, f"timed call {n}: output[{j}] has {got['numel']} elements, expected {exp['numel']}"
            slack = atol * exp["numel"] + rtol * exp["l1"] + 1e-9 * max(exp["l1"], 1.0)
            if rel > 0 and math.isfinite(exp.get("l2", math.nan)):
                # ||out - ref|| < rel ||ref||: by the triangle inequality the norms differ by
                # less, and the sums by less than sqrt(n) times that
                bound = rel * exp["l2"] * (1 + 1e-6) + 1e-30
                if not abs(got.get("l2", math.nan) - exp["l2"]) <= bound:
                    return False, (f"timed call {n} (buffer set {b}): output[{j}] L2 norm "
                                   f"{got.get('l2', math.nan):.6g}, the baseline's {exp['l2']:.6g} "
                                   f"(relative bound {rel:g})")
                slack = min(slack, math.sqrt(exp["numel"]) * bound + 1e-9 * max(exp["l1"], 1.0))
            for key in ("sum", "l1"):
                if not math.isfinite(exp[key]):  # NaN/Inf in the baseline: the sample decides
                    continue
                if not abs(got[key] - exp[key]) <= slack:
                    return False, (f"timed call {n} (buffer set {b}): output[{j}] {key} {got[key]:.6g}, "
                                   f"the baseline's {exp[key]:.6g} (bound {slack:.3g})")
            for i, (g, e) in enumerate(zip(got["sample"], exp["sample"], strict=False)):
                if math.isnan(e) and math.isnan(g) or (math.isinf(e) and g == e):
                    continue
                if not abs(g - e) <= atol + rtol * abs(e):
                    return False, (f"timed call {n} (buffer set {b}): output[{j}] sampled element "
                                   f"{i} is {g:.6g}, the baseline's {e:.6g}")
    return True, f"{len(prints)} timed calls fingerprinted; sums, L1 norms and samples match the baseline"


# -- parent side: the reference's fingerprints, from a worker that never saw candidate code ------

def _staged_inputs(case: Any, input_set: str, seed: int) -> dict[str, torch.Tensor]:
    """The timed buffer set of `seed` as the reference job stages tensors (`arg0`, `kw_<k>`;
    a non-contiguous input as its contiguous base)."""
    from kopt.harness.case import TensorSpec
    from kopt.harness.data import agent_provide_inputs
    from kopt.harness.verification.tensors import input_keys

    inputs = agent_provide_inputs(case, input_set, seed)
    specs = input_keys(case.input_set(input_set))
    values = {f"arg{i}": a for i, a in enumerate(inputs.args)}
    values.update({f"kw_{k}": v for k, v in inputs.kwargs.items()})
    out = {}
    for k, spec in specs.items():
        if isinstance(spec, TensorSpec):
            t = values[k]
            out[k] = t.transpose(-1, -2) if not spec.contiguous and t.dim() >= 2 else t
    return out


def reference_outputs(case: Any, input_set: str, seed: int, buffers: int, *, device: str,
                      target: Any, timeout: float) -> dict[int, list[torch.Tensor]]:
    """The baseline's outputs on each timed buffer set, from a `reference` job."""
    from kopt.harness.data import agent_provide_weights
    from kopt.harness.device import worker_env
    from kopt.harness.job import cleanup, stage_job
    from kopt.harness.verification.tensors import load_outputs

    groups = {f"timed-b{j}": _staged_inputs(case, input_set, seed + j) for j in range(buffers)}
    request = {"device": device, "precision": case.manifest.precision,
               "interpret": device == "cpu",
               "sets": [{"name": input_set, "groups": list(groups), "weights": "weights-timed"}]}
    job_dir = stage_job("reference", request, case=case,
                        tensors={**groups, "weights-timed": agent_provide_weights(case, input_set, seed)})
    try:
        outcome = target.run(job_dir, timeout=timeout, env=worker_env(device))
        if not outcome.ok:
            raise RuntimeError(f"the reference worker failed: {outcome.failure_reason()}")
        out = {}
        for j, g in enumerate(groups):
            got = load_outputs(job_dir / "out" / f"ref-{g}.safetensors")
            if got is not None:
                out[j] = got
        return out
    finally:
        cleanup(job_dir)


def check_timed_outputs(case: Any, metrics: dict[str, Any], artifacts: Any, *, device: str,
                        input_set: str, seed: int, target: Any, timeout: float) -> dict[str, Any]:
    """`{"checked", "passed", "calls", "detail"}`: the timed calls' fingerprints (written by
    the worker under `artifacts`) against the baseline's outputs on the same buffer sets."""
    import json
    from pathlib import Path

    from kopt.harness.tolerance import tolerance_for

    info = metrics.get("timed_outputs") or {}
    file = Path(artifacts) / str(info.get("file", "timed_outputs.json"))
    if not file.is_file():
        return {"checked": False, "passed": None, "calls": 0, "detail": "no fingerprints recorded"}
    prints = json.loads(file.read_text())
    buffers = int(metrics.get("buffer_sets") or 1)
    cache = _cache_file(case, input_set, seed, buffers, device)
    refs = None
    if cache.is_file():
        try:
            refs = json.loads(cache.read_text())
        except ValueError:
            refs = None
    if refs is None:
        try:
            refs = expected_by_buffer(reference_outputs(case, input_set, seed, buffers,
                                                        device=device, target=target,
                                                        timeout=timeout))
        except Exception as err:  # no reference, no verdict: say so (never a pass)
            return {"checked": False, "passed": None, "calls": len(prints),
                    "detail": f"reference not computed: {type(err).__name__}: {err}"[:300]}
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(refs))
        tmp.replace(cache)
    try:
        ok, detail = compare(prints, refs, lambda dt: tolerance_for(case, dt), buffers)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        # the fingerprints came from the candidate's process: malformed ones are a failure
        ok, detail = False, f"malformed fingerprints ({type(err).__name__}: {err})"[:300]
    return {"checked": True, "passed": ok, "calls": len(prints), "detail": detail}


def _cache_file(case: Any, input_set: str, seed: int, buffers: int, device: str) -> Any:
    """Where the reference's fingerprints for these timed inputs are kept: keyed by the case's
    files, the input set, seed, buffer count, device and precision."""
    import hashlib

    from kopt.harness.data import DRAW_SCHEME
    from kopt.harness.paths import cache_dir

    h = hashlib.sha256()
    for p in sorted(q for q in case.directory.rglob("*") if q.is_file() and "__pycache__" not in q.parts):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(repr((input_set, seed, buffers, device, case.manifest.precision, DRAW_SCHEME,
                   SAMPLE, torch.__version__)).encode())
    return cache_dir() / "fingerprints" / case.name / f"{h.hexdigest()[:24]}.json"
