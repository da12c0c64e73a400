"""The plan: ranked fusion targets, and the offline Strategy Analyst that makes one.

The analyst gets the architect's measurements (`PlanInputs.to_dict()`: baseline, profile,
model summary, roofline) and answers with a plan dict valid against `schemas/plan.json`.
The offline analyst ranks targets by time above the roofline floor: first the whole forward
fused into one kernel (inputs and weights read once, outputs written once: the floor's own
assumption), then each hot op on its own. An LLM analyst (`phases.analyst.AnthropicAnalyst`)
replaces it through `make_analyst`; whatever it returns is validated the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kopt.harness.errors import BadInputError, EngineerError
from kopt.phases.events import EventSink, null_sink
from kopt.phases.manifest import plan_errors

# Ops that cost time but are not computation a fusion removes (allocation, views, copies
# the profiler lists on the CPU).
BOOKKEEPING_OPS = ("aten::empty", "aten::empty_like", "aten::view", "aten::reshape",
                   "aten::as_strided", "aten::detach", "aten::resolve_", "aten::t",
                   "aten::transpose", "aten::expand", "aten::contiguous", "aten::_to_copy")
# Share of the measured time the offline analyst expects a one-kernel fusion to remove when
# no floor is known (CPU): launches and intermediate round-trips of all but one op.
NO_FLOOR_GAIN_SHARE = 0.5
MAX_TARGETS = 5


@dataclass
class PlanInputs:
    """What an analyst is given (all measured by the architect)."""

    case: str
    description: str
    baseline: dict[str, Any]
    profile: dict[str, Any]
    model_summary: dict[str, Any]
    roofline: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "description": self.description, "baseline": self.baseline,
                "profile": self.profile, "model_summary": self.model_summary,
                "roofline": self.roofline, **self.extra}


class Analyst(Protocol):
    name: str

    def plan(self, inputs: dict[str, Any]) -> dict[str, Any]: ...


def _hot_ops(profile: dict[str, Any]) -> list[dict[str, Any]]:
    return [k for k in profile.get("top_kernels", [])
            if not str(k["name"]).startswith(BOOKKEEPING_OPS)]


class OfflineAnalyst:
    """Ranks targets by time above the floor; no network, deterministic."""

    name = "offline"

    def plan(self, inputs: dict[str, Any]) -> dict[str, Any]:
        regions = inputs.get("regions")
        if regions and any(r["engine"] == "library" for r in regions["regions"]):
            return self._region_plan(inputs, regions)
        baseline_ms = float(inputs["baseline"]["median_ms"])
        floor = inputs["roofline"].get("floor_ms")
        hot = _hot_ops(inputs["profile"])
        ops = [str(k["name"]) for k in hot] or ["forward"]
        per_call = max(1, int(inputs["profile"].get("iterations") or 1))
        total_prof = sum(float(k["total_ms"]) for k in hot) or 1.0
        layers = inputs["model_summary"].get("layers", [])
        region = " -> ".join(dict.fromkeys(str(layer["type"]) for layer in layers)) or "forward"
        if floor is not None:
            whole_gain = max(0.0, baseline_ms - floor)
            why = (f"{baseline_ms:.4g} ms measured vs a {floor:.4g} ms floor "
                   f"({inputs['roofline'].get('bound') or 'memory'}-bound): one kernel that reads "
                   f"inputs and weights once and writes outputs once can approach the floor")
        else:
            whole_gain = baseline_ms * NO_FLOOR_GAIN_SHARE
            why = (f"no roofline floor on this device ({inputs['baseline'].get('timing_label')}); "
                   f"estimate: fusing {len(ops)} ops removes about half of {baseline_ms:.4g} ms")
        targets = [{"rank": 1, "region": f"forward ({region})", "ops": ops,
                    "fusion": f"fuse {' + '.join(o.removeprefix('aten::') for o in ops)} "
                              f"into one Triton kernel, one pass over each row",
                    "time_ms": baseline_ms, "floor_ms": floor,
                    "expected_gain_ms": round(whole_gain, 6), "rationale": why}]
        for k in hot[: MAX_TARGETS - 1]:
            share = float(k["total_ms"]) / total_prof
            time_ms = baseline_ms * share
            kfloor = None if floor is None else floor * share
            gain = (time_ms - kfloor) if kfloor is not None else time_ms * NO_FLOOR_GAIN_SHARE
            targets.append({
                "rank": 0, "region": str(k["name"]), "ops": [str(k["name"])],
                "fusion": f"a Triton kernel for {str(k['name']).removeprefix('aten::')} "
                          f"with its neighbours' prologue/epilogue",
                "time_ms": round(time_ms, 6), "floor_ms": kfloor,
                "expected_gain_ms": round(max(0.0, gain), 6),
                "rationale": f"{share * 100:.1f}% of the profiled time "
                             f"({k['calls'] // per_call or 1} call(s) per forward)"})
        head, rest = targets[0], sorted(targets[1:], key=lambda t: -t["expected_gain_ms"])
        for i, t in enumerate([head, *rest], start=1):
            t["rank"] = i
        target_speedup = (baseline_ms / floor) if floor else None
        return {"analyst": self.name, "targets": [head, *rest],
                "target_speedup": target_speedup,
                "summary": f"{len(ops)} hot op(s) in {inputs['case']}; fuse the whole forward "
                           f"first (expected gain {whole_gain:.4g} ms)"}


    def _region_plan(self, inputs: dict[str, Any], regions: dict[str, Any]) -> dict[str, Any]:
        """A whole model (library calls between fusable regions): the regions the engine can
        take, by time above floor (phases.regions); library calls stay as they are."""
        from kopt.phases.regions import region_targets

        baseline_ms = float(inputs["baseline"]["median_ms"])
        targets = region_targets(regions, baseline_ms, NO_FLOOR_GAIN_SHARE)
        if not targets:
            targets = [{"rank": 1, "region": "forward", "ops": [], "time_ms": baseline_ms,
                        "floor_ms": None, "expected_gain_ms": 0.0,
                        "fusion": "nothing the engine can fuse: every region is a library call",
                        "rationale": "keep the model as it is"}]
        gain = sum(t["expected_gain_ms"] for t in targets)
        lib = [r for r in regions["regions"] if r["engine"] == "library"]
        floor = inputs["roofline"].get("floor_ms")
        return {"analyst": self.name, "targets": targets,
                "target_speedup": (baseline_ms / floor) if floor else None,
                "summary": f"{len(targets)} fusable region(s) between {len(lib)} library "
                           f"call(s) in {inputs['case']}; expected gain {gain:.4g} ms"}


def make_analyst(spec: str | Analyst | None, *, events: EventSink = null_sink,
                 run_dir: Path | None = None, cancel: threading.Event | None = None,
                 options: dict[str, Any] | None = None) -> Analyst:
    """`offline` (default), `anthropic`, or an object with `plan(inputs) -> dict`."""
    if spec is None or spec == "offline":
        return OfflineAnalyst()
    if not isinstance(spec, str):
        return spec
    if spec == "anthropic":
        from kopt.phases.analyst import AnthropicAnalyst

        return AnthropicAnalyst(options, events=events, run_dir=run_dir, cancel=cancel)
    raise BadInputError(f"unknown analyst {spec!r}", fix="expected one of 'offline', 'anthropic'")


def make_plan(analyst: Analyst, inputs: PlanInputs) -> dict[str, Any]:
    """Ask the analyst, validate its answer against the plan schema."""
    plan = analyst.plan(inputs.to_dict())
    errors = plan_errors(plan)
    if errors:
        raise EngineerError(f"the {getattr(analyst, 'name', 'analyst')} analyst's plan is "
                            f"invalid at {errors[0]}", fix="run again, or use --analyst offline")
    plan.setdefault("analyst", getattr(analyst, "name", "custom"))
    return plan
