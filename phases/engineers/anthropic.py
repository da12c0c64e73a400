"""Engineer `anthropic`: Claude writes, verifies and iterates on Triton kernels with tools.

One `propose` is one optimizer iteration: a tool-use conversation that starts from the
cached system prompt (contract, style, case, plan, offline starting point, knowledge) and
the iteration's feedback, and runs until a verified candidate meets the plan's target, the
model stops, the budget (turns, verifications, run tokens, run dollars) is spent, or the
user cancels. Text and tool calls stream out as events; every verified candidate is an
iteration commit (the optimizer's `Toolbox.verify` makes it); the conversation goes to
`<run>/transcripts/optimizer.jsonl`, from which `replay` reproduces the same commits.

`run_tool_loop` is shared with the replay engineer: the only difference between the two is
where the model's replies come from.
"""

from __future__ import annotations

import ast
import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.harness.case import Case
from kopt.harness.paths import kopt_dir
from kopt.phases.engineers.base import (
    EngineerRequest,
    Proposal,
    VerifyResult,
    register_engineer,
)
from kopt.phases.engineers.llm_client import (
    AnthropicClient,
    CallCancelled,
    ModelClient,
    ReplayExhausted,
    Usage,
)
from kopt.phases.engineers.prompts import engineer_first_message, engineer_system
from kopt.phases.engineers.settings import EngineerSettings, load_settings
from kopt.phases.engineers.tools import TOOL_SPECS, WorktreeTools, file_digest
from kopt.phases.engineers.transcript import Transcript
from kopt.phases.events import LOG, TEXT_DELTA, TOOL_CALL, TOOL_RESULT, USAGE, Event, EventSink
from kopt.phases.knowledge_base import retrieve

TRANSCRIPT_NAME = "optimizer.jsonl"
_TUNABLE_PREFIXES = ("BLOCK", "NUM_WARPS", "NUM_STAGES", "GROUP_SIZE")


def candidate_path(case: Case) -> str:
    """Where the engineer writes the candidate (ARCHITECTURE.md's worktree layout)."""
    return f"kernels/{case.name}.py"


def transcript_file(request: EngineerRequest, name: str = TRANSCRIPT_NAME) -> Path:
    base = request.run_dir if request.run_dir is not None else kopt_dir() / "runs" / request.case.name
    return base / "transcripts" / name


def target_speedup(plan: dict[str, Any], settings: EngineerSettings) -> float | None:
    """The speedup at which an accepted candidate ends the iteration (None: accepted is enough)."""
    if settings.target_speedup:
        return settings.target_speedup
    for key in ("target_speedup", "expected_speedup"):
        value = plan.get(key)
        if isinstance(value, int | float) and value > 0:
            return float(value)
    return None


def meets_target(result: VerifyResult, target: float | None) -> bool:
    if not result.accepted:
        return False
    speedup = (result.metrics or {}).get("speedup")
    if target is None or not isinstance(speedup, int | float):
        return True  # no target, or no GPU timing to judge it by (CPU interpreter)
    return speedup >= target


def tunables_of(source: str) -> dict[str, list[int]]:
    """Module-level launch constants (BLOCK_*, NUM_WARPS, ...) with a small range around them."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, list[int]] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith(_TUNABLE_PREFIXES)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            value = node.value.value
            if value > 0 and value & (value - 1) == 0:  # powers of two: halve and double
                out[node.targets[0].id] = [v for v in (value // 2, value, value * 2) if v >= 1]
    return out


def offline_starting_point(case: Case, events: EventSink, phase: str) -> str | None:
    """The offline engineer's candidate source, when that engineer is installed and succeeds."""
    try:
        from kopt.phases.engineers.offline import generate_candidate
    except ImportError:
        return None
    input_set = "smoke" if "smoke" in case.input_set_names() else "main"
    try:
        return generate_candidate(case, input_set=input_set).source
    except Exception as err:  # noqa: BLE001 - a hint only: any failure means "no starting point"
        events(Event(LOG, phase, f"anthropic: no offline starting point ({type(err).__name__}: "
                                 f"{str(err)[:120]})"))
        return None


@dataclass
class LoopOutcome:
    """Bookkeeping of one `propose`."""

    usage: Usage = field(default_factory=Usage)
    calls: int = 0
    verifications: int = 0
    written: str | None = None
    verified_path: str | None = None
    verified_digest: str | None = None
    verified: VerifyResult | None = None
    text: list[str] = field(default_factory=list)
    stop: str = ""


def _with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of `messages` whose last block carries cache_control (the growing prefix)."""
    out = copy.deepcopy(messages)
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def run_tool_loop(request: EngineerRequest, events: EventSink, client: ModelClient,
                  settings: EngineerSettings, *, system: list[dict[str, Any]],
                  transcript: Transcript, run_usage: Usage, engineer: str) -> Proposal:
    """The tool-use conversation of one iteration (see the module docstring)."""
    phase = str(request.options.get("phase", "optimizer"))
    candidate = candidate_path(request.case)
    target = target_speedup(request.plan, settings)
    tools = WorktreeTools(request.worktree, request.toolbox)
    out = LoopOutcome()
    first = engineer_first_message(
        iteration=request.iteration, candidate=candidate, feedback=request.feedback,
        previous=str(request.previous) if request.previous else None,
        target_speedup=target, baseline=request.baseline,
        profile=request.options.get("profile_facts_text"))
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    transcript.write("session", engineer=engineer, model=client.model, case=request.case.name,
                     iteration=request.iteration, candidate=candidate, target_speedup=target)

    def emit(kind: str, message: str = "", **data: Any) -> None:
        events(Event(kind, phase, message, data))

    def on_text(text: str) -> None:
        out.text.append(text)
        emit(TEXT_DELTA, text)

    def on_tool_use(block: dict[str, Any]) -> None:
        emit(TOOL_CALL, f"{block['name']}({_brief(block.get('input'))})",
             name=block["name"], input=_loggable(block.get("input")), id=block.get("id"))

    while True:
        if request.cancel.is_set():
            out.stop = "cancelled"
            break
        if out.calls >= settings.max_turns:
            out.stop = f"turn budget spent ({settings.max_turns} model calls)"
            break
        if run_usage.total_tokens >= settings.max_run_tokens:
            out.stop = f"token budget spent ({run_usage.total_tokens} >= {settings.max_run_tokens})"
            break
        if run_usage.cost_usd >= settings.max_run_cost_usd:
            out.stop = (f"dollar budget spent (${run_usage.cost_usd:.2f} >= "
                        f"${settings.max_run_cost_usd:.2f})")
            break
        params = {"model": settings.model, "max_tokens": settings.max_tokens, "system": system,
                  "tools": TOOL_SPECS, "messages": _with_cache_breakpoint(messages)}
        try:
            reply = client.call(params, cancel=request.cancel, on_text=on_text,
                                on_tool_use=on_tool_use)
        except CallCancelled:
            out.stop = "cancelled"
            break
        except ReplayExhausted:
            out.stop = "the transcript ends here"
            break
        except Exception as err:
            transcript.write("end", reason=f"failed: {err}", candidate=out.written,
                             usage=out.usage.to_dict())
            raise
        out.calls += 1
        out.usage.add(reply.usage)
        run_usage.add(reply.usage)
        emit(USAGE, f"{client.model}: {reply.usage.input_tokens} in / "
                    f"{reply.usage.output_tokens} out, ${reply.usage.cost_usd:.4f} "
                    f"(run ${run_usage.cost_usd:.4f})",
             **reply.usage.to_dict(), model=client.model, run=run_usage.to_dict())
        messages.append({"role": "assistant", "content": reply.content})
        tool_uses = [b for b in reply.content if b.get("type") == "tool_use"]
        if not tool_uses:
            out.stop = ("the model stopped" if reply.stop_reason != "max_tokens"
                        else "the model ran out of output tokens")
            break
        results: list[dict[str, Any]] = []
        done = False
        for block in tool_uses:
            if request.cancel.is_set():
                break
            outcome = tools.run(block["name"], block.get("input"))
            text = outcome.text
            if outcome.path and block["name"] == "write_file" and not outcome.is_error:
                out.written = outcome.path
            if outcome.verify is not None:
                out.verifications += 1
                out.verified = outcome.verify
                out.verified_path = outcome.path
                out.verified_digest = file_digest(request.worktree / outcome.path)
                if meets_target(outcome.verify, target):
                    done = True
                elif outcome.verify.accepted and target:
                    text += (f"\nAccepted, but below the target of {target:.2f}x vs eager: "
                             "keep optimising.")
            transcript.write("tool_result", tool_use_id=block["id"], name=block["name"],
                             input=block.get("input"), is_error=outcome.is_error, content=text)
            emit(TOOL_RESULT, text, name=block["name"], is_error=outcome.is_error,
                 id=block.get("id"))
            results.append({"type": "tool_result", "tool_use_id": block["id"],
                            "content": text, "is_error": outcome.is_error})
        messages.append({"role": "user", "content": results or
                         [{"type": "text", "text": "(cancelled)"}]})
        if request.cancel.is_set():
            out.stop = "cancelled"
            break
        if done:
            out.stop = "accepted" + (f" at the target {target:.2f}x" if target else "")
            break
        if out.verifications >= settings.max_verifications:
            out.stop = f"verification budget spent ({settings.max_verifications})"
            break

    return _proposal(request, events, phase, out, transcript, run_usage, client.model)


def _proposal(request: EngineerRequest, events: EventSink, phase: str, out: LoopOutcome,
              transcript: Transcript, run_usage: Usage, model: str) -> Proposal:
    cancelled = out.stop == "cancelled"
    # A cancelled iteration keeps its partial work, the last file written; otherwise the
    # candidate is what was last verified (its commit exists), else the last file written.
    chosen = (out.written or out.verified_path) if cancelled else (out.verified_path
                                                                   or out.written)
    verified = None
    if out.verified is not None and chosen == out.verified_path:
        if file_digest(request.worktree / chosen) == out.verified_digest:
            verified = out.verified  # the file is exactly what was verified
    usage = {**out.usage.to_dict(), "model": model, "run": run_usage.to_dict()}
    transcript.write("end", reason=out.stop, candidate=chosen, usage=usage)
    events(Event(LOG, phase, f"anthropic: iteration {request.iteration} ended: {out.stop}; "
                             f"{out.calls} calls, ${out.usage.cost_usd:.4f}"))
    tunables: dict[str, list[Any]] = {}
    if chosen and (request.worktree / chosen).is_file():
        tunables = dict(tunables_of((request.worktree / chosen).read_text(encoding="utf-8")))
    notes = "".join(out.text).strip()
    return Proposal(candidate=chosen, notes=(notes[-2000:] + f"\n[{out.stop}]").strip(),
                    tunables=tunables, usage=usage, transcript=str(transcript.path),
                    verified=verified, cancelled=cancelled)


def _brief(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in value.items() if k != "content")
    return _short(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _loggable(value: Any) -> Any:
    """Tool input for an event: file contents shortened (the transcript keeps them whole)."""
    if isinstance(value, dict):
        return {k: (v if not (k == "content" and isinstance(v, str) and len(v) > 200)
                    else v[:200] + f"... [{len(v)} chars]") for k, v in value.items()}
    return value


class AnthropicEngineer:
    """Claude through the Anthropic SDK (`--engineer anthropic`)."""

    name = "anthropic"

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = dict(options)
        self.settings = load_settings(self.options)
        self.run_usage = Usage()
        self._starting_point: dict[str, str | None] = {}

    def system_prompt(self, request: EngineerRequest, events: EventSink,
                      phase: str) -> list[dict[str, Any]]:
        case = request.case
        if case.name not in self._starting_point:
            use_offline = request.options.get("starting_point", self.options.get(
                "starting_point", True))
            self._starting_point[case.name] = (offline_starting_point(case, events, phase)
                                               if use_offline else None)
        query = " ".join([case.manifest.description, case.model_file.read_text(encoding="utf-8"),
                          str(request.plan)])
        knowledge = retrieve(query, self.settings.knowledge_snippets)
        return engineer_system(case, request.plan, candidate=candidate_path(case),
                               starting_point=self._starting_point[case.name],
                               knowledge=knowledge,
                               max_verifications=self.settings.max_verifications)

    def propose(self, request: EngineerRequest, events: EventSink) -> Proposal:
        settings = load_settings({**self.options, **request.options})
        phase = str(request.options.get("phase", "optimizer"))
        key = os.environ.get("ANTHROPIC_API_KEY", "")
        transcript = Transcript(transcript_file(request), secrets=(key,))
        client = AnthropicClient(settings, events=events, phase=phase, transcript=transcript)
        client.api_key()  # fail before any work when there is no key
        system = self.system_prompt(request, events, phase)
        return run_tool_loop(request, events, client, settings, system=system,
                             transcript=transcript, run_usage=self.run_usage,
                             engineer=self.name)


register_engineer("anthropic", AnthropicEngineer)
