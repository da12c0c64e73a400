"""Prompts of the Triton Code Engineer and the Strategy Analyst.

The engineer's system prompt is the stable prefix of every call of a run (it is cached):
role, docs/CASES.md's candidate contract, STYLE.md's kernel order, the tools' rules, the case
(manifest and model source), the plan, the offline engineer's candidate as a starting point,
and the knowledge snippets most relevant to this case. What changes per iteration (the
feedback of the previous one) goes into the first user message.
"""

from __future__ import annotations

import json
from typing import Any

from kopt.harness.case import Case
from kopt.phases.knowledge_base import Snippet

ENGINEER_ROLE = """\
You are kopt's Triton Code Engineer. You make a PyTorch model faster by writing one candidate
file of fused Triton kernels, verifying it with the tools, reading the verifier's report and
iterating until the candidate is accepted and meets the plan's target. You work only inside
the run's git worktree; every candidate you verify becomes a commit the user reviews."""

CANDIDATE_CONTRACT = """\
## The candidate contract (docs/CASES.md)
A Python file defining `class ModelNew(nn.Module)` with the same constructor signature and the
same `state_dict` keys and shapes as `Model`; the harness loads the baseline's weights into it
(strict). Its forward runs the hot path in Triton kernels (`@triton.jit`) it defines.
Verification accepts a candidate only if all hold: it imports and compiles; same outputs as the
baseline within tolerance on several fresh random input draws and on every declared shape; no
NaN/Inf where the baseline has none; every output element written (outputs are poisoned before
the run); outputs change when inputs change (no cached or constant results); outputs do not
alias inputs and inputs are not modified; at least one Triton kernel actually launched; the
reference is computed where the candidate cannot reach or patch it. A case's `precision` is the
user's explicit choice: never lower precision on your own (no TF32 under `precision: strict`)."""

KERNEL_ORDER = """\
## How the kernel file reads (STYLE.md)
Top to bottom: tuning constants (each with a why-comment) -> `@triton.jit` `_name_kernel`
functions -> plain launchers (check constraints with a message naming the bad value, allocate
the output, launch; launch heuristics in one function with a hard cap) -> `ModelNew` last.
Kernel signatures: pointer/stride pairs (`x_ptr, x_row_stride`), compile-time parameters in
CAPS as `tl.constexpr`, a shape comment on each pointer (`x_ptr,  # (rows, cols)`),
`tl.program_id(0).to(tl.int64)` for row offsets. Comments carry measured evidence, not
narration.
Declare what the accelerator phase may tune on the GPU with two module-level literals and
launch with the second:
    KOPT_TUNABLES = {"BLOCK_SIZE": [512, 1024, 2048], "num_warps": [2, 4, 8]}  # search space
    KOPT_CONFIG = {"BLOCK_SIZE": 1024, "num_warps": 4}                         # launched with"""

TOOL_RULES = """\
## Tools and how to work
- Paths are relative to the worktree root. The case is under `case/` (manifest.yaml,
  model.py). Write the candidate to `{candidate}` (overwrite it for each attempt, so the git
  diff between iterations is the kernel diff).
- `write_file` refuses Python that does not parse; fix and write again.
- `verification_tool(candidate_path)` runs the verifier and records an iteration commit with
  its verdict: call it once per finished attempt, not for half-written code. Read its report:
  each failing check names the reason; fix exactly that.
- `profiler_tool(candidate_path)` times an accepted candidate: median, % of the roofline floor,
  speedup vs eager and top kernels. Use it to decide what to improve next.
- Stop (answer without a tool call, with a two-line summary of the kernel and its numbers) once
  a candidate is accepted and meets the target, or when you cannot improve it further.
- Budget: at most {max_verifications} verifications in this iteration."""


def engineer_system(case: Case, plan: dict[str, Any], *, candidate: str,
                    starting_point: str | None, knowledge: list[Snippet],
                    max_verifications: int) -> list[dict[str, Any]]:
    """System prompt blocks; the last carries the cache breakpoint of the stable prefix."""
    parts = [ENGINEER_ROLE, CANDIDATE_CONTRACT, KERNEL_ORDER,
             TOOL_RULES.format(candidate=candidate, max_verifications=max_verifications)]
    parts.append(case_section(case))
    parts.append("## The plan (from the Strategy Analyst)\n```json\n"
                 + json.dumps(plan, indent=1, default=str) + "\n```")
    if starting_point:
        parts.append("## Starting point: the offline engineer's candidate\n"
                     "kopt's offline code generator produced this for the case. It is a fair "
                     "first attempt: improve on it (more fusion, better launch parameters), or "
                     "replace it.\n```python\n" + starting_point.rstrip() + "\n```")
    if knowledge:
        notes = "\n\n".join(f"### {s.title}\n{s.text}" for s in knowledge)
        parts.append("## Notes on Triton optimisation relevant to this case\n" + notes)
    text = "\n\n".join(parts)
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def case_section(case: Case) -> str:
    manifest = case.manifest_file.read_text(encoding="utf-8")
    source = case.model_file.read_text(encoding="utf-8")
    return (f"## The case: {case.name}\n{case.manifest.description.strip()}\n\n"
            f"`case/manifest.yaml`:\n```yaml\n{manifest.rstrip()}\n```\n\n"
            f"`case/{case.model_file.name}`:\n```python\n{source.rstrip()}\n```")


def engineer_first_message(*, iteration: int, candidate: str, feedback: str | None,
                           previous: str | None, target_speedup: float | None,
                           baseline: dict[str, Any], profile: str | None = None) -> str:
    """The user turn that opens one optimizer iteration (`profile`: the last iteration's
    profile facts, `phases.strategy.ProfileFacts.text()`)."""
    lines = [f"Optimizer iteration {iteration}."]
    if baseline:
        lines.append("Baseline measurements:\n```json\n"
                     + json.dumps(_compact(baseline), indent=1, default=str)[:6000] + "\n```")
    if previous:
        lines.append(f"The previous iteration's candidate is `{previous}` (read it first).")
    if profile:
        lines.append("Profile of the last iteration (where the time above the floor is):\n"
                     + profile.rstrip())
    if feedback:
        lines.append("Feedback on the previous iteration, verbatim:\n```\n"
                     + feedback.rstrip() + "\n```")
    goal = (f"an accepted candidate at {target_speedup:.2f}x or more vs eager"
            if target_speedup else "an accepted candidate, as fast as you can make it")
    lines.append(f"Write `{candidate}`, verify it, and iterate until you have {goal}.")
    return "\n\n".join(lines)


def _compact(baseline: dict[str, Any]) -> dict[str, Any]:
    """Drop bulky keys (environment dumps, raw traces) from baseline metrics for the prompt."""
    return {k: v for k, v in baseline.items() if k not in ("environment", "trace", "samples")}


ANALYST_SYSTEM = """\
You are kopt's Strategy Analyst. From a PyTorch model's baseline measurements, profile, model
summary and roofline floor, you plan where fused Triton kernels will pay: ranked targets, each
with the fusion to make and the expected gain (time above the floor it can recover). You write
no code. Answer with one JSON object only, no prose, matching this JSON Schema:
```json
{schema}
```"""


def analyst_user_message(inputs: dict[str, Any]) -> str:
    return ("Plan the optimisation of this case. Inputs:\n```json\n"
            + json.dumps(inputs, indent=1, default=str)[:60000] + "\n```\n"
            "Reply with the plan as one JSON object.")


def analyst_retry_message(error: str) -> str:
    return (f"That plan is not valid: {error}\n"
            "Reply again with the corrected plan as one JSON object only.")
