"""Engineer transcripts: every request, response and tool result of a run, as JSONL.

One JSON object per line, each with a `kind`:

- `session`     one `propose` (or analyst call) begins: engineer, model, iteration, case
- `request`     what was sent: model, max_tokens, system, tools, messages (no headers, no key)
- `response`    the assistant message as received, its usage and cost
- `tool_result` a tool call re-executed by kopt: name, input, is_error, content
- `error`       a failed call (status, message) or a lost stream
- `end`         the session stopped: reason, candidate, usage

Transcripts live in the run (`manifests/<run-id>/transcripts/`) and are archived with it.
They never hold the API key: every line is scrubbed of the secrets given to the writer,
and of anything that looks like an Anthropic key, before it is written.
`phases.engineers.replay` reads them back.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from kopt.harness.errors import BadInputError

REDACTED = "[redacted]"
# Anthropic keys look like sk-ant-api03-...; scrub anything of that shape whatever its origin.
_KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")


def scrub(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """`value` with every secret string (and key-shaped string) replaced, recursively."""
    if isinstance(value, str):
        for secret in secrets:
            if secret:
                value = value.replace(secret, REDACTED)
        return _KEY_PATTERN.sub(REDACTED, value)
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, secrets) for v in value]
    return value


class Transcript:
    """Append-only JSONL writer for one engineer or analyst conversation log."""

    def __init__(self, path: Path, *, secrets: tuple[str, ...] = ()) -> None:
        self.path = path
        self._secrets = tuple(s for s in secrets if s)
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, kind: str, **data: Any) -> None:
        record = scrub({"kind": kind, "time": round(time.time(), 3), **data}, self._secrets)
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def read_transcript(path: Path) -> list[dict[str, Any]]:
    """All records of a transcript file; a torn last line (a killed run) is skipped."""
    records: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):
                break
            raise BadInputError(f"{path}:{number}: not a JSON line ({err.msg})",
                                fix="pass a transcript written by kopt") from err
    return records


def find_transcript(ref: str | Path, *, name: str = "optimizer.jsonl") -> Path:
    """A transcript file from a path: the file itself, or a run folder's `transcripts/NAME`."""
    path = Path(ref).expanduser()
    candidates = [path, path / "transcripts" / name, path / name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise BadInputError(f"no transcript at {str(ref)!r}",
                        fix=f"pass a .jsonl file or a run folder holding transcripts/{name}")


def sessions(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Records split at each `session` record (records before the first one are dropped)."""
    out: list[list[dict[str, Any]]] = []
    for record in records:
        if record.get("kind") == "session":
            out.append([record])
        elif out:
            out[-1].append(record)
    return out
