"""Settings of the LLM engineer and analyst: model, limits and budgets.

Precedence, highest first: the engineer options (`--model`, ...), then `.kopt/config.yaml`
(keys under `anthropic:`, or a top-level `model:`), then the defaults below. The API key is
never a setting: it is read from `ANTHROPIC_API_KEY` at call time and kept in memory only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

import yaml

from kopt.harness.errors import BadInputError
from kopt.harness.paths import kopt_dir

DEFAULT_MODEL = "claude-sonnet-5-5"
"""The current Sonnet (November 2026): the best balance of speed, cost and coding skill."""
CONFIG_SECTION = "anthropic"


@dataclass
class EngineerSettings:
    """How the Anthropic engineer and analyst talk to the API and when they stop."""

    model: str = DEFAULT_MODEL
    """Claude model id (`--model`, config `anthropic.model`)."""
    max_tokens: int = 16000
    """Output tokens per model call (a whole kernel plus its explanation fits)."""
    stream: bool = True
    """Stream responses (SSE) so text and tool calls reach the UI as they arrive."""
    max_turns: int = 24
    """Model calls per `propose` (one optimizer iteration)."""
    max_verifications: int = 6
    """`verification_tool` calls per `propose`; each one is an iteration commit."""
    max_run_tokens: int = 3_000_000
    """Token budget of the whole run (input + output + cache), across iterations."""
    max_run_cost_usd: float = 20.0
    """Dollar budget of the whole run, across iterations."""
    max_retries: int = 5
    """Retries of one call on 429, 529, 5xx and connection failures before it starts."""
    retry_base_s: float = 1.0
    """First backoff wait when the server gives no `retry-after` (doubles per attempt)."""
    retry_cap_s: float = 60.0
    """Longest wait between retries, whatever `retry-after` says."""
    timeout_s: float = 600.0
    """Read timeout of one call."""
    analyst_attempts: int = 3
    """How many times the analyst may be asked for a valid plan."""
    knowledge_snippets: int = 4
    """Knowledge-base snippets put into the engineer's system prompt."""
    target_speedup: float | None = None
    """Stop once an accepted candidate reaches this speedup (else the plan's, else accepted)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def read_config() -> dict[str, Any]:
    """The `anthropic:` section of `.kopt/config.yaml` (with a top-level `model:` folded in)."""
    file = kopt_dir() / "config.yaml"
    if not file.is_file():
        return {}
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as err:
        raise BadInputError(f"{file}: not valid YAML: {err}", fix="fix or delete the file") from err
    if not isinstance(data, dict):
        raise BadInputError(f"{file}: expected a mapping at the top level",
                            fix="write `anthropic: {model: ...}`")
    section = data.get(CONFIG_SECTION) or {}
    if not isinstance(section, dict):
        raise BadInputError(f"{file}: {CONFIG_SECTION}: expected a mapping (not {section!r})",
                            fix="write `anthropic: {model: claude-sonnet-5-5}`")
    merged = dict(section)
    if "model" in data and "model" not in merged:
        merged["model"] = data["model"]
    return merged


def load_settings(options: dict[str, Any] | None = None) -> EngineerSettings:
    """Settings from options, then config file, then `KOPT_MODEL`, then defaults."""
    known = {f.name: f for f in fields(EngineerSettings)}
    values: dict[str, Any] = {}
    if os.environ.get("KOPT_MODEL"):
        values["model"] = os.environ["KOPT_MODEL"]
    for source_name, source in (("config", read_config()), ("options", options or {})):
        for key, value in source.items():
            if key not in known:
                if source_name == "config":
                    raise BadInputError(
                        f".kopt/config.yaml: {CONFIG_SECTION}.{key}: unknown setting",
                        fix=f"expected one of {', '.join(sorted(known))}")
                continue  # options carry other engineers' keys too (path, phase, ...)
            if value is None:
                continue
            values[key] = _coerce(key, value, known[key].type, source_name)
    return EngineerSettings(**values)


def _coerce(key: str, value: Any, type_name: Any, source: str) -> Any:
    kind = str(type_name)
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind == "bool":
            if isinstance(value, str):
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        return str(value)
    except (TypeError, ValueError) as err:
        raise BadInputError(f"{source}: {key}: expected {kind} (not {value!r})",
                            fix=f"give {key} a {kind} value") from err
