"""Phase 1, the architect (Strategy Analyst): measure, profile, summarise, plan. No kernel code.

Baseline: the eager model timed and profiled in a worker (`measure_variant(..., profile=True)`,
i.e. `execute_variant` with the profiler). Model summary: parameters, FLOPs and per-layer
output shapes from forward hooks (on the `meta` device at the main inputs; on the CPU at the
run's inputs when the model cannot run on `meta`). Roofline: the case's floor (null on the
CPU, where no ceiling is claimed) and each hot region's share of it. Plan: from the analyst
(offline by default), validated against `schemas/plan.json`.

The run branch's first commit holds `case/` (a copy of the case) and `plan.json`.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from kopt.harness.case import Case
from kopt.harness.errors import BadInputError
from kopt.phases.events import LOG, Event, EventSink
from kopt.phases.history import commit_iteration
from kopt.phases.manifest import FileRef, Manifest
from kopt.phases.plan import PlanInputs, make_analyst, make_plan
from kopt.phases.run import RunContext

PHASE = "architect"


def model_summary(case: Case, input_set: str = "main") -> dict[str, Any]:
    """Parameters, FLOPs, bytes and every leaf module's output shape (harness.summary)."""
    from kopt.harness.summary import model_summary as summarize

    return summarize(case, input_set)


def region_profile(ctx: RunContext, events: EventSink) -> dict[str, Any] | None:
    """The eager model's time by region and module (phases.regions), or None (logged) when the
    model cannot be exported: the plan then ranks the profiler's top ops alone. A profile of
    the unchanged case on this device and input set made in this workspace in the last ten
    minutes is kept (`.kopt/baselines/`, as the integrator's baselines: a second run) and
    carries `profiled_s_ago`."""
    from kopt.phases.regions import profile_regions

    kept_file = _kept_regions_file(ctx)
    kept = _read_kept(kept_file)
    if kept is not None:
        events(Event(LOG, PHASE, f"region profile kept from this workspace's profile of the "
                                 f"unchanged case {kept['profiled_s_ago']:.0f} s ago"))
        return kept
    try:
        with ctx.breakdown.clocked("architect region profile"):
            profile = profile_regions(ctx.case, ctx.input_set, ctx.device)
    except Exception as err:  # noqa: BLE001 - a region profile is an addition, never a blocker
        events(Event(LOG, PHASE, f"no region profile: {type(err).__name__}: {str(err)[:200]}"))
        return None
    try:
        kept_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"profiled_at": time.time(), "profile": profile}, default=str))
        os.replace(tmp, kept_file)
    except (OSError, TypeError, ValueError):
        pass  # kept for nothing: the next run profiles again
    return profile


def _kept_regions_file(ctx: RunContext) -> Path:
    """Where the region profile of this case file, device and input set is kept."""
    import hashlib

    from kopt.harness.bench import case_files_digest
    from kopt.harness.paths import baselines_dir

    key = json.dumps([case_files_digest(ctx.case), str(ctx.case.directory.resolve()), ctx.device,
                      ctx.input_set, os.environ.get("CUDA_VISIBLE_DEVICES", "")])
    return baselines_dir() / f"regions-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _read_kept(file: Path) -> dict[str, Any] | None:
    from kopt.harness.bench import BASELINE_KEEP_S

    try:
        data = json.loads(file.read_text())
        age = time.time() - float(data["profiled_at"])
        profile = data["profile"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not 0 <= age <= BASELINE_KEEP_S or not isinstance(profile, dict):
        return None
    return {**profile, "profiled_s_ago": round(age, 1)}


def _regions(profile: dict[str, Any], median_ms: float,
             floor_ms: float | None) -> list[dict[str, Any]]:
    """Each hot kernel's share of the measured time and of the floor (apportioned by time:
    an estimate, labelled so in the manifest)."""
    kernels = profile.get("kernels") or profile.get("top_kernels") or []
    total = sum(float(k["total_ms"]) for k in kernels) or 1.0
    out = []
    for k in kernels:
        share = float(k["total_ms"]) / total
        out.append({"region": str(k["name"]), "time_ms": median_ms * share,
                    "floor_ms": None if floor_ms is None else floor_ms * share})
    return out


def _write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path


def run(ctx: RunContext, events: EventSink, cancel: threading.Event | None = None) -> Manifest:
    """Measure the baseline, profile it, summarise the model and plan the fusions."""
    ctx.check_cancel()
    case = ctx.case
    events(Event(LOG, PHASE, f"timing and profiling the eager baseline on {ctx.input_set} "
                             f"({ctx.timing_label})"))
    metrics = ctx.measure_variant("eager", profile=True, label="eager")
    if not metrics.get("ok", True):
        raise BadInputError(f"the baseline of case {case.name!r} failed: {metrics.get('error')}",
                            fix=f"run `kopt baseline {case.name}` to see the error")
    ctx.check_cancel()
    lat = metrics["latency_ms"]
    roof = metrics.get("roofline") or {}
    profile = metrics.get("profile") or {"by": "cpu", "kernels": []}
    floor = roof.get("floor_ms")
    summary = model_summary(case, "main")
    events(Event(LOG, PHASE, f"baseline {lat['median']:.4g} ms median ({ctx.timing_label}); "
                             f"{summary['total_params']} params; floor "
                             f"{'n/a on CPU' if floor is None else f'{floor:.4g} ms'}"))
    top = [{"name": k["name"], "calls": int(k["calls"]), "total_ms": float(k["total_ms"]),
            "pct": float(k["pct"])} for k in profile.get("kernels", [])]
    baseline = {"median_ms": lat["median"], "p20_ms": lat["p20"], "p80_ms": lat["p80"],
                "timing_label": metrics.get("timing_label", ctx.timing_label),
                "gbps": (metrics.get("throughput") or {}).get("gbps"),
                "tflops": (metrics.get("throughput") or {}).get("tflops"),
                "peak_memory_bytes": metrics.get("peak_memory_bytes"),
                "metrics": ""}
    roofline = {"bytes": int(roof.get("bytes") or 0), "flops": float(roof.get("flops") or 0.0),
                "floor_ms": floor, "pct_of_floor": roof.get("pct_of_floor"),
                "bound": roof.get("bound"),
                "note": ("region floors apportion the case's floor by each kernel's share of the "
                         "measured time (an estimate)") if floor is not None else
                        "no roofline floor on the CPU interpreter: no GPU ceilings were measured",
                "regions": _regions(profile, lat["median"], floor)}
    prof_out = {"by": profile.get("by", "cpu"), "top_kernels": top,
                "iterations": profile.get("iterations"), "trace": profile.get("trace_file")}
    regions = region_profile(ctx, events)
    if regions is not None:
        lib = sum(1 for r in regions["regions"] if r["engine"] == "library")
        events(Event(LOG, PHASE, f"{len(regions['regions'])} region(s), {lib} library call(s) "
                                 f"kept; per-op times {regions['timing_label']}"))
    inputs = PlanInputs(case.name, case.manifest.description, baseline,
                        prof_out, summary, roofline,
                        extra={"regions": regions} if regions is not None else {})
    analyst = make_analyst(ctx.config.analyst, events=events, run_dir=ctx.run_dir,
                           cancel=ctx.cancel, options=ctx.config.engineer_options)
    events(Event(LOG, PHASE, f"planning with the {getattr(analyst, 'name', 'custom')} analyst"))
    plan = make_plan(analyst, inputs)
    ctx.check_cancel()

    out_dir = ctx.phase_dir(PHASE)
    plan_file = _write_json(out_dir / "plan.json", plan)
    summary_file = _write_json(out_dir / "model_summary.json", summary)
    metrics_file = Path(metrics.get("artifacts_dir") or ctx.artifacts_dir / "eager") / "metrics.json"
    if not metrics_file.is_file():
        metrics_file = _write_json(out_dir / "baseline_metrics.json", metrics)
    baseline["metrics"] = str(FileRef.of(metrics_file, ctx.root).path)
    outputs = [FileRef.of(f, ctx.root) for f in (plan_file, summary_file, metrics_file)]
    trace = profile.get("trace_file")
    if trace and Path(trace).is_file():
        outputs.append(FileRef.of(Path(trace), ctx.root))

    wt = ctx.worktree
    shutil.rmtree(wt / "case", ignore_errors=True)
    shutil.copytree(case.directory, wt / "case",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(plan_file, wt / "plan.json")
    first = plan["targets"][0]
    commit = commit_iteration(
        wt, run_id=ctx.run_id, phase=PHASE, iteration=None, case=case.name,
        subject=f"architect: {case.name} baseline {lat['median']:.4g} ms ({ctx.timing_label}), "
                f"plan of {len(plan['targets'])} target(s)",
        body=f"rank 1: {first['fusion']}\nexpected gain {first['expected_gain_ms']:.4g} ms; "
             f"floor {floor if floor is not None else 'n/a (cpu)'}",
        author=str(plan.get("analyst", "offline")), paths=["case", "plan.json"])
    return Manifest(
        phase=PHASE, run_id=ctx.run_id, case=case.name, status="verified", branch=ctx.branch,
        commit=commit, baseline_ms=lat["median"], best_ms=None, speedup=None,
        timing_label=baseline["timing_label"], inputs=[FileRef.of(case.manifest_file, ctx.root),
                                                       FileRef.of(case.model_file, ctx.root)],
        outputs=outputs,
        details={"device": ctx.device, "input_set": ctx.input_set, "baseline": baseline,
                 "profile": prof_out, "model_summary": summary, "roofline": roofline,
                 "plan": plan, **({"regions": regions} if regions is not None else {})})
