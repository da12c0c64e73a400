"""The engineer interface: one shape for a local code generator and for an LLM that streams
text and calls tools.

The optimizer phase calls `engineer.propose(request, events)` once per iteration. An
engineer writes its candidate inside `request.worktree` and returns a `Proposal`. An LLM
engineer may call `request.toolbox.verify(...)` many times inside one `propose`; each such
call is an iteration commit (the toolbox does the committing, so engineers never touch git).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kopt.harness.case import Case
from kopt.phases.events import EventSink


@dataclass
class VerifyResult:
    """What `Toolbox.verify` returns to an engineer."""

    accepted: bool
    report_text: str
    """The verifier's per-check report, verbatim (fed back to the engineer)."""
    report: dict[str, Any]
    """The verifier's JSON report."""
    commit: str | None = None
    """The iteration commit recorded for this candidate."""
    metrics: dict[str, Any] | None = None
    """Timing of an accepted candidate (median_ms, speedup, pct_of_floor) when measured."""


@dataclass
class Toolbox:
    """Services the optimizer offers an engineer, bound to one run."""

    verify: Callable[[str], VerifyResult]
    """verify(candidate_path relative to the worktree) -> VerifyResult; commits an iteration."""
    profile: Callable[[str], dict[str, Any]]
    """profile(candidate_path) -> timing, % of floor, top kernels."""


@dataclass
class EngineerRequest:
    """Everything an engineer gets for one iteration."""

    case: Case
    worktree: Path
    """The run's worktree: the engineer's only writable place."""
    plan: dict[str, Any]
    """The architect's plan (ranked targets)."""
    iteration: int
    """1-based iteration number."""
    toolbox: Toolbox
    feedback: str | None = None
    """Verifier report of the previous candidate, or the user's rejection reason."""
    previous: Path | None = None
    """Path (in the worktree) of the previous candidate, if any."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """Baseline metrics, profile and model summary from the architect manifest."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set when the user cancels; engineers stop promptly and return what they have."""
    run_dir: Path | None = None
    """manifests/<run-id>/ : where transcripts and logs go."""
    options: dict[str, Any] = field(default_factory=dict)
    """Engineer options (model name, budgets, ...)."""


@dataclass
class Proposal:
    """What an engineer returns for one iteration."""

    candidate: str | None
    """Path of the candidate file relative to the worktree (None: nothing produced)."""
    notes: str = ""
    """The engineer's summary of what it did (goes into the commit message body)."""
    unfused: list[dict[str, Any]] = field(default_factory=list)
    """Ops it could not fuse: [{"op": ..., "reason": ...}] (honest report)."""
    tunables: dict[str, list[Any]] = field(default_factory=dict)
    """Launch parameters the accelerator may search: {"BLOCK_SIZE": [256, 512, ...]}."""
    usage: dict[str, Any] = field(default_factory=dict)
    """Token and cost accounting for LLM engineers."""
    transcript: str | None = None
    """Path of the transcript JSONL, if any."""
    kernels: list[dict[str, Any]] = field(default_factory=list)
    """The candidate's kernels, when the engineer knows them: [{"name", "kind"}] (the
    optimizer's profile facts and strategy space read them)."""
    verified: VerifyResult | None = None
    """Set when the engineer already verified the returned candidate through the toolbox."""
    cancelled: bool = False
    alternatives: list[str] = field(default_factory=list)
    """More candidates of this round (paths relative to the worktree): evaluated beside
    `candidate`, at once where the run has several GPUs, committed in this order after it."""


class Engineer(Protocol):
    name: str

    def propose(self, request: EngineerRequest, events: EventSink) -> Proposal: ...


# name -> factory(options) ; "replay:PATH" is resolved by prefix.
ENGINEERS: dict[str, Callable[[dict[str, Any]], Engineer]] = {}


def register_engineer(name: str, factory: Callable[[dict[str, Any]], Engineer]) -> None:
    ENGINEERS[name] = factory


def check_engineer(spec: str) -> str:
    """The engineer's name if `spec` names one that can be built (`replay:PATH` with an
    existing file), else a BadInputError: checked before a run writes anything."""
    import importlib
    from pathlib import Path

    from kopt.harness.errors import BadInputError

    name, _, arg = spec.partition(":")
    if name not in ENGINEERS and name.isidentifier():
        for mod in (f"kopt.phases.engineers.{name}", f"kopt.phases.engineers.{name}.engineer"):
            try:
                importlib.import_module(mod)
                break
            except ModuleNotFoundError:
                continue
    if name not in ENGINEERS:
        raise BadInputError(f"unknown engineer {spec!r}",
                            fix="expected one of 'offline', 'anthropic', 'replay:PATH'")
    if name == "replay" and not arg:
        raise BadInputError("engineer 'replay' needs a transcript",
                            fix="use --engineer replay:PATH (a .jsonl or a run folder)")
    if name == "replay" and not Path(arg).exists():
        raise BadInputError(f"no transcript at {arg}",
                            fix="use --engineer replay:PATH (a .jsonl or a run folder)")
    return name


def make_engineer(spec: str, options: dict[str, Any] | None = None) -> Engineer:
    """`offline`, `anthropic`, or `replay:PATH`."""
    name = check_engineer(spec)
    _, _, arg = spec.partition(":")
    opts = dict(options or {})
    if arg:
        opts["path"] = arg
    return ENGINEERS[name](opts)
