"""The `offline` engineer: capture -> fusion groups -> Triton source, no network, no key.

`generate_candidate` is deterministic for a case and a fusion policy. The optimizer calls
`OfflineEngineer.propose` once per iteration; after a failed verification it backs off to a
more conservative policy (no matmul epilogue, then no fusion across reductions, then one
kernel per op), so each iteration is a different, simpler candidate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kopt.harness.case import Case
from kopt.harness.errors import NothingToGenerate
from kopt.phases.engineers.base import EngineerRequest, Proposal
from kopt.phases.engineers.offline.capture import capture
from kopt.phases.engineers.offline.codegen import build_kernels, write_module
from kopt.phases.engineers.offline.fusion import FusionPolicy, partition
from kopt.phases.engineers.offline.kernels.recurrent import STEP_KERNEL, STEP_TUNABLES
from kopt.phases.engineers.offline.layout import build_constructor
from kopt.phases.engineers.offline.recurrent import recurrent_kind
from kopt.phases.engineers.offline.regions import SWITCH, regions
from kopt.phases.engineers.offline.rewrites import fold_product_sums
from kopt.phases.engineers.offline.sibling_products import fuse_sibling_products
from kopt.phases.events import LOG, Event, EventSink, null_sink

# Policies tried in order: each later one fuses less (what a failure report backs off to).
POLICIES: list[tuple[str, FusionPolicy]] = [
    ("full fusion", FusionPolicy()),
    ("no matmul epilogue", FusionPolicy(matmul_epilogue=False)),
    ("reductions alone", FusionPolicy(matmul_epilogue=False, reduction_prologue=False)),
    ("one kernel per op", FusionPolicy(pointwise=False, reduction_prologue=False, matmul_epilogue=False)),
]


FIXED_LEAD_NOTE = "torch.export kept the inputs' leading size as the constant"
"""The start of the note a candidate gets when its leading size is not symbolic."""


@dataclass
class OfflineResult:
    """A generated candidate and what it does and does not fuse."""

    source: str
    """The candidate file's text."""
    unfused: list[dict[str, str]]
    """Ops left to PyTorch: {"op", "node", "reason"}."""
    tunables: dict[str, dict[str, list[Any]]]
    """Per kernel: launch parameter -> values the accelerator may try (KOPT_TUNABLES)."""
    kernels: list[dict[str, Any]]
    """Per kernel: {"name", "kind", "fuses": [graph nodes]}."""
    notes: list[str] = field(default_factory=list)
    """Sizes fixed at traced values and other caveats."""
    policy: str = "full fusion"
    seconds: float = 0.0
    """Code generation time (capture included)."""


def generate_candidate(case: Case, *, input_set: str = "main", policy: FusionPolicy | None = None,
                       policy_name: str = "", rewrites: bool = True) -> OfflineResult:
    """Capture `case` on `input_set` and write a fused Triton candidate for it. Sizes tied to
    the constructor are read at run time where their source can be traced (a forward
    argument, a parameter, a library call's weight), so the candidate also builds and runs at
    the smoke set's constructor; the rest are fixed at their traced values. `rewrites`:
    the algebraic rewrites of `rewrites.py` (exact for every input and weight) first."""
    t0 = time.perf_counter()
    policy = policy or POLICIES[0][1]
    captured = capture(case, input_set)
    rewritten = (fold_product_sums(captured.graph) + fuse_sibling_products(captured.graph)
                 if rewrites else [])
    part = partition(captured.graph, policy, case.manifest.precision)
    kernels = build_kernels(part, case.manifest.precision)
    recurrent = [n for n in part.graph.nodes if recurrent_kind(n)]
    if not kernels and not recurrent:
        left = "; ".join(dict.fromkeys(f"{u['op'].removeprefix('aten.')}: {u['reason']}"
                                       for u in part.unfused)) or "no compute op"
        raise NothingToGenerate(f"{case.name}: no op of the model could be generated as a "
                                f"Triton kernel (left to PyTorch: {left})",
                                fix="keep PyTorch for this model; the offline engineer fuses "
                                    "pointwise ops, reductions, pooling, scans, matmuls and "
                                    "convolutions")
    ctor = build_constructor(case, captured.model, input_set)
    source, notes = write_module(case, part, ctor, kernels, part.unfused)
    notes = [f"rewrite: {r}" for r in rewritten] + part.notes + notes
    if captured.lead_sizes:
        notes.insert(0, f"torch.export fixed the inputs' leading size; {captured.lead_sizes} "
                        "size(s) follow it again, fitted from a second trace one row larger")
    if captured.constructor_numbers:
        notes.insert(0, f"{captured.constructor_numbers} number(s) the model derives from its "
                        "constructor's integers (view sizes, scales) follow them, fitted from a "
                        "second trace at another input set's arguments")
    if captured.fixed_lead is not None and captured.loop_over_lead:
        notes.insert(0, f"{FIXED_LEAD_NOTE} {captured.fixed_lead} (a Python loop over it: "
                        f"every row of the leading input read by index, {captured.fixed_lead} "
                        "steps unrolled): the candidate runs that many steps only and fails "
                        "at the other leading sizes the verifier tries")
    elif captured.fixed_lead is not None:
        notes.insert(0, f"{FIXED_LEAD_NOTE} {captured.fixed_lead} (a static export, or a size "
                        "derived from it through int(), a Python loop or a branch): the "
                        "candidate may fail at the other leading sizes the verifier tries")
    compile(source, f"{case.name}.py", "exec")
    return OfflineResult(
        source=source,
        unfused=part.unfused,
        tunables={k.name: k.tunables for k in kernels.values()}
        | ({STEP_KERNEL: STEP_TUNABLES} if recurrent else {}),
        kernels=[{"name": k.name, "kind": k.kind, "fuses": k.fuses} for k in kernels.values()]
        + ([{"name": STEP_KERNEL, "kind": "recurrent", "fuses": [n.origin for n in recurrent]}]
           if recurrent else []),
        notes=notes,
        policy=policy_name or next((n for n, p in POLICIES if p == policy), "custom"),
        seconds=time.perf_counter() - t0,
    )


def _policy_for(request: EngineerRequest) -> int:
    """Iteration 1 fuses everything; each failed verification backs off one level."""
    level = request.options.get("policy_level")
    if isinstance(level, int):
        return max(0, min(level, len(POLICIES) - 1))
    if not request.feedback or request.iteration <= 1:
        return 0
    failures = request.options.get("_failures", 0)
    return min(failures, len(POLICIES) - 1)


class OfflineEngineer:
    """Deterministic code generator registered as engineer `offline`."""

    name = "offline"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        self.failures = 0

    def propose(self, request: EngineerRequest, events: EventSink = null_sink) -> Proposal:
        def log(msg: str) -> None:
            events(Event(LOG, "optimizer", msg, {"engineer": "offline"}))

        feedback = (request.feedback or "").strip()
        if feedback and request.iteration > 1 and not _accepted(feedback):
            self.failures += 1
        level = self.options.get("policy_level", min(self.failures, len(POLICIES) - 1))
        named = [n for n, _p in POLICIES]
        if request.options.get("policy") in named:  # a hypothesis of the optimizer's strategy space
            level = max(int(level), named.index(request.options["policy"]))
        level = max(0, min(int(level), len(POLICIES) - 1))
        name, policy = POLICIES[level]
        if feedback and level:
            first = feedback.splitlines()[0][:160]
            log(f"previous candidate failed verification ({first}); backing off to: {name}")
        log(f"capturing {request.case.name} with torch.export and fusing ({name})")
        rewrites = request.options.get("rewrites", True) is not False
        result = generate_candidate(request.case, policy=policy, policy_name=name, rewrites=rewrites)
        overrides = request.options.get("kopt_config")
        if isinstance(overrides, dict) and overrides:  # phases.strategy: a launch hypothesis
            from kopt.phases.strategy import apply_kopt_config

            result.source, changed = apply_kopt_config(result.source, result.kernels, overrides)
            log(f"hypothesis {request.options.get('hypothesis')!r}: "
                + (", ".join(changed) if changed else "no kernel here declares it"))
        rel = f"kernels/{request.case.name}.py"
        path = request.worktree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.source)
        for k in result.kernels:
            log(f"{k['name']} ({k['kind']}): fuses {', '.join(k['fuses'])}")
        for u in result.unfused:
            log(f"left to PyTorch: {u['node']} ({u['op']}): {u['reason']}")
        for note in result.notes:
            log(f"note: {note}")
        switchable = regions(result.source)
        if switchable:
            log(f"regions with a PyTorch form ({SWITCH}, triton | torch per region): "
                + ", ".join(r.name for r in switchable))
        log(f"wrote {rel}: {len(result.kernels)} kernel(s) in {result.seconds:.2f} s")
        flat: dict[str, list[Any]] = {}
        for kname, params in result.tunables.items():
            for p, values in params.items():
                flat[f"{kname}.{p}"] = values
        notes = (f"offline engineer ({name}): {len(result.kernels)} Triton kernel(s): "
                 + "; ".join(f"{k['name']} fuses {', '.join(k['fuses'])}" for k in result.kernels))
        return Proposal(candidate=rel, notes=notes, unfused=result.unfused, tunables=flat,
                        kernels=[{"name": k["name"], "kind": k["kind"]} for k in result.kernels])


def _accepted(feedback: str) -> bool:
    low = feedback.lower()
    return "accepted" in low.splitlines()[0] if low else False
