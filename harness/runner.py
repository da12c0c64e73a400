"""The variant runner: docs/CASES.md's harness API.

- `make_case_forward(case, ...)` -> `CaseForward`: a zero-argument callable that runs one
  model (the baseline, or a candidate's `ModelNew` with the baseline's weights, strict) on
  the case's cached inputs.
- `execute_variant(label, forward, ...)` (inside a worker): seeds the RNG, attaches several
  copies of the cached input buffers, warms up, times, checks parity against the reference
  (the baseline's outputs on the same inputs, computed before the variant ran), and writes
  `<artifacts>/<label>/metrics.json` (+ a profiler trace under `<label>/profiler/`).
- `measure_variant(case, variant, ...)` (parent side): stages a `measure` job and runs it in
  a worker on a target with a timeout. A crash, hang or timeout comes back as
  `{"ok": false, "error": ...}`; it never takes kopt down. A baseline that cannot load or
  run is the case's fault: `CaseError` (exit 2).

Variants: `eager`, `compile` (torch.compile, default mode) or a path to a candidate file
defining `ModelNew`. Artifacts go to the directory given (a run's
`manifests/<run-id>/artifacts/`) or `.kopt/artifacts/`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from kopt.harness.case import Case, load_case
from kopt.harness.data import Inputs, agent_provide_inputs, build_model
from kopt.harness.device import (
    default_input_set,
    is_interpreter,
    resolve_device,
    timing_label,
    worker_env,
)
from kopt.harness.errors import BadInputError
from kopt.harness.paths import cache_dir, kopt_dir

VARIANTS = ("eager", "compile")
# A worker gets this long for load + warm-up + compile + timing + profile before it is killed.
DEFAULT_TIMEOUT = 600.0
# Input buffer copies rotated between timed calls (fewer when they would not fit).
GPU_BUFFER_SETS, CPU_BUFFER_SETS = 3, 2
# Buffer copies may take at most this share of the free GPU memory.
BUFFER_MEMORY_SHARE = 0.2


class CaseForward:
    """One model on one case's inputs: call it with no arguments to run a forward."""

    def __init__(self, case: Case, model: torch.nn.Module, inputs: Inputs, device: str,
                 input_set: str, seed: int = 0) -> None:
        self.case = case
        self.model = model
        self.inputs = inputs
        self.device = device
        self.input_set = input_set
        self.seed = seed
        self.buffer_sets: list[Inputs] = [inputs]

    grad_enabled = False
    """Timed calls run under no_grad; the verifier also calls with grad enabled."""

    def __call__(self) -> Any:
        with torch.set_grad_enabled(self.grad_enabled):
            return self.model(*self.inputs.args, **self.inputs.kwargs)

    def with_model(self, model: torch.nn.Module) -> CaseForward:
        """The same inputs (and buffer sets) driving another model (e.g. torch.compile's)."""
        other = CaseForward(self.case, model, self.inputs, self.device, self.input_set, self.seed)
        other.buffer_sets = self.buffer_sets
        return other

    def attach_buffer_sets(self, count: int | None = None) -> int:
        """Keep `count` input sets (distinct storage) to rotate through. Set i > 0 holds the
        values of seed `seed + i` (so a timed call whose output is fingerprinted cannot pass
        with the output of another buffer set: `verification.fingerprints`), else a copy."""
        base = self.buffer_sets[0]
        if count is None:
            count = _buffer_set_count(base, self.device)
        self.buffer_sets = [base] + [self._buffer_set(i) for i in range(1, max(1, count))]
        self.inputs = base
        return len(self.buffer_sets)

    def _buffer_set(self, i: int) -> Inputs:
        if self.case is None:
            return _clone_inputs(self.buffer_sets[0])
        return agent_provide_inputs(self.case, self.input_set, self.seed + i, device=self.device)

    def rotate(self, i: int) -> None:
        """Swap in input buffer set `i` (modulo the number attached)."""
        self.inputs = self.buffer_sets[i % len(self.buffer_sets)]


def _clone_inputs(inputs: Inputs) -> Inputs:
    def clone(v: Any) -> Any:
        # clone() keeps the strides of a transposed view (preserve_format)
        return v.clone() if isinstance(v, torch.Tensor) else v

    return Inputs([clone(a) for a in inputs.args], {k: clone(v) for k, v in inputs.kwargs.items()})


def _buffer_set_count(inputs: Inputs, device: str) -> int:
    if device != "cuda":
        return CPU_BUFFER_SETS
    size = sum(t.numel() * t.element_size() for t in inputs.tensors())
    free, _ = torch.cuda.mem_get_info()
    fits = int(BUFFER_MEMORY_SHARE * free // max(size, 1))
    return max(1, min(GPU_BUFFER_SETS, fits))


def apply_precision(precision: str) -> None:
    """The case's `precision:`: TF32 for float32 matmuls/convs only under `tf32`."""
    allow = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def make_case_forward(case: Case | str | Path, device: str | None = None,
                      input_set: str | None = None, seed: int = 0,
                      model_cls: type[torch.nn.Module] | None = None) -> CaseForward:
    """A zero-argument runner of the case's model (or `model_cls`, loaded strictly with the
    baseline's weights) on `input_set` (default: `main` on a GPU, `smoke` on the CPU)."""
    if not isinstance(case, Case):
        case = load_case(case)
    device = resolve_device(case, device)
    input_set = input_set or default_input_set(case, device)
    apply_precision(case.manifest.precision)
    model = build_model(case, input_set, device=device, cls=model_cls, seed=seed)
    inputs = agent_provide_inputs(case, input_set, seed, device=device)
    return CaseForward(case, model, inputs, device, input_set, seed)


def output_tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a forward's result (a tensor, or any nesting of tuples/lists/dicts)."""
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def reference_outputs(forward: CaseForward) -> list[torch.Tensor]:
    """The baseline's outputs on the forward's current inputs, detached copies."""
    out = output_tensors(forward())
    if forward.device == "cuda":
        torch.cuda.synchronize()
    return [t.detach().clone() for t in out]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def _parity(case: Case, out: list[torch.Tensor], ref: list[torch.Tensor] | None) -> dict[str, Any]:
    """Does the variant match the reference within the case's tolerance? Computed on the
    device (full-size outputs are GBs); informational, `harness.verify` is the judge.

    The same two allowances as the verifier and the bench's output sample (`Comparison.
    within_norm`, `within_elementwise`): every output within the whole-tensor bound with a
    few elements outside their own, or every element within its bound with an output whose
    norm cancels to near zero (the mean of a group norm's output: noise around 0). Either
    passes here; the verifier settles both against the float64 truth."""
    if ref is None:
        return {"checked": False, "passed": None, "max_abs_err": None, "rel_err": None,
                "detail": "no reference given"}
    from kopt.harness.tolerance import tolerance_for

    if len(out) != len(ref):
        return {"checked": True, "passed": False, "max_abs_err": None, "rel_err": None,
                "detail": f"{len(out)} outputs, expected {len(ref)}"}
    problems: list[str] = []
    misses: list[tuple[str, int, bool]] = []  # (what missed, elements outside, norm within)
    max_abs, rel = 0.0, 0.0
    for i, (o, r) in enumerate(zip(out, ref, strict=True)):
        name = f"output[{i}]" if len(ref) > 1 else "output"
        if o.shape != r.shape or o.dtype != r.dtype:
            problems.append(f"{name}: {o.dtype}{tuple(o.shape)}, expected {r.dtype}{tuple(r.shape)}")
            continue
        tol = tolerance_for(case, r.dtype)
        o = o.detach().to(r.device)
        if tol.exact or not r.dtype.is_floating_point:
            bad = int((o != r).sum())
            if bad:
                problems.append(f"{name}: {bad} of {r.numel()} elements differ (exact match needed)")
            continue
        of, rf = o.float(), r.float()
        both = torch.isfinite(of) & torch.isfinite(rf)
        same_special = (torch.isnan(of) & torch.isnan(rf)) | (torch.isinf(of) & (of == rf))
        diff = torch.where(both, (of - rf).abs(), torch.zeros_like(of))
        special = int((~both & ~same_special).sum())
        bad = int((diff > tol.atol + tol.rtol * rf.abs().where(both, 0.0)).sum())
        err_norm, ref_norm = float(diff.norm()), float(rf.where(both, 0.0).norm())
        t_rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
        max_abs = max(max_abs, float(diff.max()) if diff.numel() else 0.0)
        rel = max(rel, t_rel)
        if special:
            problems.append(f"{name}: {special} of {r.numel()} elements NaN/Inf where the "
                            f"reference differs")
        norm_ok = not (tol.rel > 0 and t_rel >= tol.rel)
        if bad or not norm_ok:
            misses.append((f"{name}: {bad} of {r.numel()} elements outside {tol.describe()}, "
                           f"relative error {t_rel:.3g}", bad, norm_ok))
    # the verifier's two allowances (`Comparison.within_norm`, `within_elementwise`): every
    # output within one of the bounds, the same bound for all
    allowed = all(norm_ok for _, _, norm_ok in misses) or all(not bad for _, bad, _ in misses)
    detail = [m for m, _, _ in misses]
    if problems or not allowed:
        return {"checked": True, "passed": False, "max_abs_err": max_abs, "rel_err": rel,
                "detail": "; ".join(problems + detail)[:1000]}
    return {"checked": True, "passed": True, "max_abs_err": max_abs, "rel_err": rel,
            "detail": "; ".join(f"within the allowance the float64 truth settles: {m}"
                                for m in detail)[:1000]}


def _peak_memory(forward: CaseForward) -> int | None:
    """Memory one forward needs at its peak: one input set, the weights, and the most the
    call allocated on top (outputs, intermediates; on the GPU also workspaces). Other buffer
    sets, the reference and the L2 flush buffer are not counted (harness.memory)."""
    from kopt.harness.memory import cpu_peak_bytes, cuda_peak_bytes

    resident = forward.inputs.tensors() + [
        t for t in forward.model.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)]
    if forward.device == "cuda":
        return int(cuda_peak_bytes(forward, resident))
    if forward.device == "cpu":
        try:
            return int(cpu_peak_bytes(forward, resident))
        except Exception:  # a variant that cannot run under a dispatch mode: no figure
            return None
    return None


def execute_variant(label: str, forward_impl: CaseForward, *, use_profiler: bool = False,
                    artifacts_dir: Path | str | None = None,
                    reference: list[torch.Tensor] | None = None, variant: str | None = None,
                    timing_options: dict[str, Any] | None = None,
                    on_output: Callable[[list[torch.Tensor]], None] | None = None,
                    on_timed_outputs: Callable[[list[dict[str, Any]]], None] | None = None,
                    ) -> dict[str, Any]:
    """Time `forward_impl`, check it against `reference`, write `<artifacts>/<label>/metrics.json`.
    `on_output` receives the first call's outputs (a candidate's measure job sends them out of
    the candidate's process, where no reference exists, to be checked by its supervisor).
    `on_timed_outputs` receives the timed calls' fingerprints instead of
    `<label>/timed_outputs.json` (the candidate's measure job sends them to its supervisor,
    which writes the file after the candidate's process is gone).

    Returns the metrics dict (ARCHITECTURE.md's keys, plus `timing`, `profile`, `seed`).
    """
    from kopt.harness.environment import describe_environment
    from kopt.harness.roofline import roofline_summary
    from kopt.harness.steps import Steps
    from kopt.harness.timing import time_callable
    from kopt.harness.verification.fingerprints import TimedOutputs

    steps = Steps()
    fwd = forward_impl
    case, device = fwd.case, fwd.device
    out_dir = Path(artifacts_dir) if artifacts_dir is not None else kopt_dir() / "artifacts"
    label_dir = out_dir / label
    label_dir.mkdir(parents=True, exist_ok=True)

    seed_everything(fwd.seed)
    with steps("buffer sets"):
        fwd.attach_buffer_sets()
    with steps("first call"):  # a candidate's Triton compiles happen here
        fwd.rotate(0)  # the reference was computed on these values
        out = output_tensors(fwd())
        if device == "cuda":
            torch.cuda.synchronize()
    with steps("parity"):
        if on_output is not None:
            on_output(out)
        correctness = _parity(case, out, reference)
        del out

    # every timed call's outputs fingerprinted between calls, judged by the parent
    # (KOPT_TIMED_FINGERPRINTS=0 turns it off, for benchmarks/conditions_gpu.py's A/B)
    fingerprint = os.environ.get("KOPT_TIMED_FINGERPRINTS", "1") != "0"
    timed = TimedOutputs(fwd, rotate=fwd.rotate, record=fingerprint)
    with steps("timing"):
        timing = time_callable(timed, device=device, rotate=timed.rotate,
                               **(timing_options or {}))
    with steps("peak memory"):
        peak = _peak_memory(fwd)
    with steps("roofline"):
        roofline = roofline_summary(case, fwd.input_set, device, timing.median_ms)
    seconds = timing.median_ms * 1e-3
    rates = {"gbps": roofline["bytes"] / seconds / 1e9 if seconds > 0 else None,
             "tflops": roofline["flops"] / seconds / 1e12 if seconds > 0 else None}
    profile = None
    if use_profiler:
        from kopt.harness.profiling import profile_callable

        with steps("profile"):
            profile = profile_callable(fwd, device=device, out_dir=label_dir / "profiler",
                                       rotate=fwd.rotate).to_dict()
        profile["trace_file"] = "profiler/trace.json"  # relative to the label's folder
    metrics: dict[str, Any] = {
        "label": label,
        "case": case.name,
        "variant": variant or label,
        "input_set": fwd.input_set,
        "device": device,
        "timing_label": timing.label,
        "latency_ms": {"median": timing.median_ms, "p20": timing.p20_ms, "p80": timing.p80_ms},
        "samples": timing.samples,
        "throughput": rates,
        "peak_memory_bytes": peak,
        "roofline": roofline,
        "correctness": correctness,
        "environment": describe_environment(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "timing": timing.to_dict(),
        "deferred_work_suspected": timing.deferred_work_suspected(),
        "buffer_sets": len(fwd.buffer_sets),
        "seed": fwd.seed,
        "cpu_threads": torch.get_num_threads(),
        "interpret": is_interpreter(device),
        "profile": profile,
        "timed_outputs": {"calls": timed.calls,
                          "file": "timed_outputs.json" if fingerprint else None},
        "steps": steps.to_dict(),
    }
    if fingerprint and on_timed_outputs is not None:
        on_timed_outputs(timed.fingerprints())
    elif fingerprint:
        (label_dir / "timed_outputs.json").write_text(json.dumps(timed.fingerprints()))
    tmp = label_dir / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=1, default=str))
    tmp.replace(label_dir / "metrics.json")
    return metrics


# -- parent side --------------------------------------------------------------------------------

def variant_name(variant: str | Path) -> str:
    """`eager`, `compile`, or a candidate file's stem."""
    return str(variant) if str(variant) in VARIANTS else Path(variant).stem


def measure_variant(case: Case | str | Path, variant: str | Path, *, device: str | None = None,
                    artifacts_root: Path | str | None = None, profile: bool = False,
                    target: Any = None, timeout: float = DEFAULT_TIMEOUT,
                    label: str | None = None, input_set: str | None = None, seed: int = 0,
                    on_line: Callable[[str], None] | None = None,
                    timing_options: dict[str, Any] | None = None,
                    keep_job: bool = False) -> dict[str, Any]:
    """Measure one variant in a worker; its metrics dict with `ok: true`, or `ok: false`
    and `error` when the variant failed (crash, hang, timeout, raised). Does not verify.

    Raises `CaseError` when the baseline itself cannot load or run (bad input, exit 2).
    """
    from kopt.harness.job import cleanup, run_job, stage_job
    from kopt.harness.targets.resolve import resolve_target

    if not isinstance(case, Case):
        case = load_case(case)
    device = resolve_device(case, device)
    input_set = input_set or default_input_set(case, device)
    candidate: Path | None = None
    if str(variant) not in VARIANTS:
        candidate = Path(variant).expanduser()
        if not candidate.is_file():
            raise BadInputError(f"no candidate file {str(variant)!r}",
                                fix=f"give a Python file defining ModelNew, or one of {VARIANTS}")
    name = variant_name(variant)
    label = label or f"{case.name}-{name}"
    artifacts = Path(artifacts_root) if artifacts_root is not None else kopt_dir() / "artifacts"
    if target is None or isinstance(target, str):
        target = resolve_target(target)
    if device == "cuda":  # the window the case's work calls for; the caller's options win
        from kopt.harness.roofline import timing_window

        timing_options = {**timing_window(case, input_set), **(timing_options or {})}
    request = {"variant": "candidate" if candidate else name, "name": name, "device": device,
               "input_set": input_set, "label": label, "profile": profile, "seed": seed,
               "interpret": is_interpreter(device), "timing_options": timing_options or {}}
    job_dir = stage_job("measure", request, case=case, candidate=candidate)
    env = worker_env(device)
    if getattr(target, "name", "") == "local":
        env["KOPT_CACHE"] = str(cache_dir())  # share the tensor and ceilings caches
    try:
        outcome = run_job(target, job_dir, timeout=timeout, env=env, on_line=on_line)
        response = outcome.response or {}
        base = {"ok": False, "case": case.name, "variant": name, "label": label,
                "device": device, "input_set": input_set, "timing_label": timing_label(device)}
        if not outcome.ok:
            if response.get("error_kind") == "case" and not outcome.timed_out:
                # the worker saw its own copy of the case; name the user's files instead
                text = str(response.get("error")).replace(str(job_dir / "case"),
                                                          str(case.directory))
                raise BadInputError(text)
            return {**base, "error": outcome.failure_reason(),
                    "error_kind": "timeout" if outcome.timed_out else
                    response.get("error_kind", "crash"),
                    "output_tail": outcome.output_tail[-2000:]}
        metrics = dict(response.get("metrics") or {})
        produced = job_dir / "out" / "artifacts" / label
        dest = artifacts / label
        if produced.is_dir():
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(produced, dest)
        if metrics.get("profile"):
            metrics["profile"]["trace_file"] = str(dest / "profiler" / "trace.json")
        if candidate is not None and (metrics.get("timed_outputs") or {}).get("file"):
            from kopt.harness.verification.fingerprints import check_timed_outputs

            check = check_timed_outputs(case, metrics, dest, device=device, input_set=input_set,
                                        seed=seed, target=target, timeout=timeout)
            metrics["timed_outputs"] = {**metrics["timed_outputs"], **check}
            if check["checked"] and not check["passed"]:
                metrics["correctness"] = {**(metrics.get("correctness") or {}), "passed": False,
                                          "detail": f"timed calls: {check['detail']}"}
        return {**metrics, "ok": True, "artifacts_dir": str(dest)}
    finally:
        if not keep_job:
            cleanup(job_dir)
