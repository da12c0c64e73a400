"""The Anthropic Strategy Analyst: measurements in, a validated plan (JSON) out.

The architect phase gives it the baseline metrics, the profile (top kernels by device time),
the model summary and the roofline floor; Claude answers with the plan as one JSON object,
which is validated against the plan schema (`phases/schemas/plan.json`, or the local schema
below until that file exists). An invalid answer is sent back with the validation error, a
bounded number of times. It writes no code. The offline analyst lives in `phases/plan.py`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import jsonschema

from kopt.harness.errors import EngineerError
from kopt.harness.paths import kopt_dir
from kopt.phases.engineers.llm_client import AnthropicClient, CallCancelled, ModelClient, Usage
from kopt.phases.engineers.prompts import (
    ANALYST_SYSTEM,
    analyst_retry_message,
    analyst_user_message,
)
from kopt.phases.engineers.settings import load_settings
from kopt.phases.engineers.transcript import Transcript
from kopt.phases.events import LOG, TEXT_DELTA, USAGE, Event, EventSink, null_sink

PLAN_SCHEMA_FILE = Path(__file__).resolve().parent / "schemas" / "plan.json"

# The plan's shape (ARCHITECTURE.md, issue 4): ranked targets, each the fusion to make and
# the gain expected from it. Used until the pipeline's phases/schemas/plan.json exists.
LOCAL_PLAN_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "kopt plan",
    "type": "object",
    "required": ["targets"],
    "properties": {
        "summary": {"type": "string"},
        "target_speedup": {"type": "number", "exclusiveMinimum": 0},
        "targets": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["rank", "region", "fusion", "expected_gain_ms"],
                "properties": {
                    "rank": {"type": "integer", "minimum": 1},
                    "region": {"type": "string", "minLength": 1},
                    "ops": {"type": "array", "items": {"type": "string"}},
                    "fusion": {"type": "string", "minLength": 1},
                    "time_ms": {"type": "number", "minimum": 0},
                    "floor_ms": {"type": "number", "minimum": 0},
                    "expected_gain_ms": {"type": "number", "minimum": 0},
                    "rationale": {"type": "string"},
                },
            },
        },
    },
}


def plan_schema() -> dict[str, Any]:
    """The pipeline's plan schema when present, else the local one."""
    if PLAN_SCHEMA_FILE.is_file():
        return json.loads(PLAN_SCHEMA_FILE.read_text(encoding="utf-8"))
    return LOCAL_PLAN_SCHEMA


def extract_json(text: str) -> Any:
    """The JSON object in a reply: a ```json fence, else the outermost braces; ValueError if none."""
    fence = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.DOTALL)
    body = fence.group(1) if fence else text[text.find("{"): text.rfind("}") + 1]
    if not body:
        raise ValueError("the reply holds no JSON object")
    try:
        return json.loads(body)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") from err


def validation_error(plan: Any, schema: dict[str, Any]) -> str | None:
    """The most relevant schema violation as one line naming the key path, or None."""
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(plan))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"at {where}: {error.message}"


class AnthropicAnalyst:
    """`plan(inputs) -> dict`: the Strategy Analyst on Claude (`--analyst anthropic`)."""

    name = "anthropic"

    def __init__(self, options: dict[str, Any] | None = None, *, events: EventSink = null_sink,
                 run_dir: Path | None = None, cancel: threading.Event | None = None,
                 client: ModelClient | None = None) -> None:
        self.options = dict(options or {})
        self.settings = load_settings(self.options)
        self.events = events
        self.run_dir = run_dir
        self.cancel = cancel or threading.Event()
        self.usage = Usage()
        self.transcript = Transcript(
            (run_dir if run_dir is not None else kopt_dir()) / "transcripts" / "analyst.jsonl",
            secrets=(os.environ.get("ANTHROPIC_API_KEY", ""),))
        self.client = client or AnthropicClient(self.settings, events=events, phase="architect",
                                                transcript=self.transcript)

    def plan(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The plan for `inputs` (baseline, profile, model summary, roofline), schema-valid."""
        schema = plan_schema()
        system = [{"type": "text", "cache_control": {"type": "ephemeral"},
                   "text": ANALYST_SYSTEM.format(schema=json.dumps(schema, indent=1))}]
        messages: list[dict[str, Any]] = [{"role": "user",
                                           "content": analyst_user_message(inputs)}]
        self.transcript.write("session", engineer="analyst", model=self.client.model,
                              case=inputs.get("case"))
        attempts = max(1, self.settings.analyst_attempts)
        problem = ""
        for attempt in range(1, attempts + 1):
            params = {"model": self.settings.model, "max_tokens": min(self.settings.max_tokens, 8000),
                      "system": system, "messages": messages}
            try:
                reply = self.client.call(
                    params, cancel=self.cancel,
                    on_text=lambda t: self.events(Event(TEXT_DELTA, "architect", t)),
                    on_tool_use=lambda b: None)
            except CallCancelled as err:
                self.transcript.write("end", reason="cancelled")
                raise EngineerError("the Strategy Analyst was cancelled",
                                    fix="run again, or use --analyst offline") from err
            self.usage.add(reply.usage)
            self.events(Event(USAGE, "architect", f"analyst: ${reply.usage.cost_usd:.4f}",
                              {**reply.usage.to_dict(), "model": self.client.model,
                               "run": self.usage.to_dict()}))
            text = "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
            try:
                plan = extract_json(text)
                problem = validation_error(plan, schema) or ""
            except ValueError as err:
                plan, problem = None, str(err)
            if not problem and isinstance(plan, dict):
                self.transcript.write("end", reason="valid plan", attempts=attempt,
                                      usage=self.usage.to_dict())
                return plan
            self.events(Event(LOG, "architect",
                              f"analyst: plan attempt {attempt}/{attempts} invalid: {problem}"))
            self.transcript.write("tool_result", name="plan_validation", is_error=True,
                                  content=problem)
            messages += [{"role": "assistant", "content": reply.content or
                          [{"type": "text", "text": "(empty)"}]},
                         {"role": "user", "content": analyst_retry_message(problem)}]
        self.transcript.write("end", reason=f"no valid plan after {attempts} attempts: {problem}")
        raise EngineerError(f"the Strategy Analyst gave no valid plan in {attempts} attempts "
                            f"({problem})", fix="run again, or use --analyst offline")
