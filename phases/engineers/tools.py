"""The five tools of the Triton Code Engineer, confined to the run's worktree.

Names and arguments are the original design's: `read_file(file_path)`,
`write_file(file_path, content)`, `list_directory(path=".", recursive=False)`,
`verification_tool(candidate_path)`, `profiler_tool(candidate_path)`.

A tool never raises at the model: a bad path (absolute, `..`, a symlink leading out, `.git`),
malformed input, Python that does not parse or a failing verifier all come back as a
`ToolOutcome` with `is_error=True` and a message the model can act on. `verification_tool`
goes through `Toolbox.verify`, which records an iteration commit with the verdict.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kopt.harness.errors import KoptError
from kopt.phases.engineers.base import Toolbox, VerifyResult

MAX_READ_CHARS = 200_000
"""A kernel file is a few KB; more than this is not something the model should read whole."""
MAX_LIST_ENTRIES = 400
HIDDEN_DIRS = {".git", "__pycache__", ".pytest_cache"}

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a text file of the run's worktree. Paths are relative to the "
                       "worktree root, e.g. 'case/model.py' or 'kernels/<case>.py'.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string",
                                         "description": "path relative to the worktree"}},
            "required": ["file_path"],
        },
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a file in the worktree with `content`. Python "
                       "files are syntax-checked first and refused if they do not parse.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "path relative to the worktree"},
                "content": {"type": "string", "description": "the whole new file"},
            },
            "required": ["file_path", "content"],
        },
    },
    {
        "name": "list_directory",
        "description": "List a directory of the worktree (directories end with '/').",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "default": ".",
                         "description": "directory relative to the worktree"},
                "recursive": {"type": "boolean", "default": False},
            },
        },
    },
    {
        "name": "verification_tool",
        "description": "Verify a candidate kernel file against the baseline model: loads, "
                       "correct within tolerance on fresh inputs and every shape, finite, every "
                       "output element written, depends on inputs, no mutation or aliasing, a "
                       "Triton kernel launched. Returns one line per check. Every call records "
                       "an iteration commit with its verdict.",
        "input_schema": {
            "type": "object",
            "properties": {"candidate_path": {"type": "string",
                                              "description": "candidate file in the worktree"}},
            "required": ["candidate_path"],
        },
    },
    {
        "name": "profiler_tool",
        "description": "Time a candidate and profile it: median latency, % of the roofline "
                       "floor, speedup vs eager and the top kernels by device time.",
        "input_schema": {
            "type": "object",
            "properties": {"candidate_path": {"type": "string",
                                              "description": "candidate file in the worktree"}},
            "required": ["candidate_path"],
        },
    },
]
TOOL_NAMES = tuple(spec["name"] for spec in TOOL_SPECS)


class PathRefused(Exception):
    """A tool path that would leave the worktree (shown to the model, never raised out)."""


@dataclass
class ToolOutcome:
    """What one tool call produced."""

    text: str
    """The tool_result content sent back to the model."""
    is_error: bool = False
    verify: VerifyResult | None = None
    """Set by `verification_tool` when the verifier ran."""
    path: str | None = None
    """The worktree-relative file the call wrote or verified."""


def file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def resolve_in_worktree(worktree: Path, raw: object) -> tuple[Path, str]:
    """(absolute path, normalised relative path) of `raw`, or `PathRefused` saying why."""
    if not isinstance(raw, str) or not raw.strip():
        raise PathRefused(f"expected a non-empty relative path string (not {raw!r})")
    text = raw.strip().replace("\\", "/")
    pure = PurePosixPath(text)
    if pure.is_absolute() or text.startswith("~") or (len(text) > 1 and text[1] == ":"):
        raise PathRefused(f"{raw!r} is absolute; use a path relative to the worktree root, "
                          "e.g. 'kernels/model.py'")
    if ".." in pure.parts:
        raise PathRefused(f"{raw!r} climbs out with '..'; paths stay inside the worktree")
    if any(part in (".git",) for part in pure.parts):
        raise PathRefused(f"{raw!r} is inside .git; git is kopt's job, not a tool's")
    root = worktree.resolve()
    full = (root / pure)
    resolved = full.resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise PathRefused(f"{raw!r} leads outside the worktree through a symlink")
    rel = resolved.relative_to(root).as_posix() if resolved != root else "."
    return full, rel


class WorktreeTools:
    """Runs tool calls for one engineer request."""

    def __init__(self, worktree: Path, toolbox: Toolbox) -> None:
        self.worktree = worktree
        self.toolbox = toolbox

    def run(self, name: str, tool_input: Any) -> ToolOutcome:
        """Execute one tool call; every failure is an error outcome, never an exception."""
        handler = getattr(self, f"_tool_{name}", None)
        if name not in TOOL_NAMES or handler is None:
            return ToolOutcome(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}",
                               is_error=True)
        if not isinstance(tool_input, dict):
            return ToolOutcome(f"{name}: input must be a JSON object (not {tool_input!r:.80})",
                               is_error=True)
        spec = next(s for s in TOOL_SPECS if s["name"] == name)["input_schema"]
        problem = _check_input(name, tool_input, spec)
        if problem:
            return ToolOutcome(problem, is_error=True)
        try:
            return handler(**tool_input)
        except PathRefused as err:
            return ToolOutcome(f"{name}: refused: {err}", is_error=True)
        except KoptError as err:
            return ToolOutcome(f"{name}: {err.one_line()}", is_error=True)
        except OSError as err:
            return ToolOutcome(f"{name}: {type(err).__name__}: {err.strerror or err}",
                               is_error=True)

    # -- the tools ---------------------------------------------------------------------

    def _tool_read_file(self, file_path: str) -> ToolOutcome:
        full, rel = resolve_in_worktree(self.worktree, file_path)
        if not full.is_file():
            return ToolOutcome(f"read_file: no file {rel!r} (list_directory shows what exists)",
                               is_error=True)
        text = full.read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_READ_CHARS:
            text = text[:MAX_READ_CHARS] + f"\n[... truncated at {MAX_READ_CHARS} characters]"
        return ToolOutcome(text, path=rel)

    def _tool_write_file(self, file_path: str, content: str) -> ToolOutcome:
        full, rel = resolve_in_worktree(self.worktree, file_path)
        if rel == "." or full.is_dir():
            return ToolOutcome(f"write_file: {rel!r} is a directory", is_error=True)
        if rel.endswith(".py"):
            try:
                ast.parse(content, filename=rel)
            except SyntaxError as err:
                line = (err.text or "").rstrip()
                return ToolOutcome(
                    f"write_file: refused, {rel} does not parse: SyntaxError: {err.msg} "
                    f"(line {err.lineno}, column {err.offset})" + (f"\n    {line}" if line else "")
                    + "\nNothing was written; fix the code and write it again.", is_error=True)
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content, encoding="utf-8")
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        return ToolOutcome(f"wrote {rel} ({lines} lines, {len(content.encode())} bytes)",
                           path=rel)

    def _tool_list_directory(self, path: str = ".", recursive: bool = False) -> ToolOutcome:
        full, rel = resolve_in_worktree(self.worktree, path)
        if not full.is_dir():
            return ToolOutcome(f"list_directory: no directory {rel!r}", is_error=True)
        entries: list[str] = []
        walker = sorted(full.rglob("*")) if recursive else sorted(full.iterdir())
        for entry in walker:
            parts = entry.relative_to(full).parts
            if any(p in HIDDEN_DIRS for p in parts):
                continue
            shown = PurePosixPath(*parts).as_posix()
            entries.append(shown + "/" if entry.is_dir() else shown)
            if len(entries) >= MAX_LIST_ENTRIES:
                entries.append(f"[... more than {MAX_LIST_ENTRIES} entries]")
                break
        return ToolOutcome("\n".join(entries) if entries else "(empty)", path=rel)

    def _candidate(self, tool: str, candidate_path: str) -> tuple[Path, str] | ToolOutcome:
        full, rel = resolve_in_worktree(self.worktree, candidate_path)
        if not full.is_file():
            return ToolOutcome(f"{tool}: no file {rel!r}; write the candidate first",
                               is_error=True)
        if not rel.endswith(".py"):
            return ToolOutcome(f"{tool}: {rel!r} is not a Python file", is_error=True)
        return full, rel

    def _tool_verification_tool(self, candidate_path: str) -> ToolOutcome:
        found = self._candidate("verification_tool", candidate_path)
        if isinstance(found, ToolOutcome):
            return found
        _, rel = found
        result = self.toolbox.verify(rel)
        verdict = "ACCEPTED" if result.accepted else "REJECTED"
        lines = [f"{verdict}: {rel}" + (f" (commit {result.commit[:10]})" if result.commit else ""),
                 result.report_text.rstrip()]
        if result.metrics:
            lines.append("metrics: " + format_metrics(result.metrics))
        return ToolOutcome("\n".join(lines), verify=result, path=rel)

    def _tool_profiler_tool(self, candidate_path: str) -> ToolOutcome:
        found = self._candidate("profiler_tool", candidate_path)
        if isinstance(found, ToolOutcome):
            return found
        _, rel = found
        return ToolOutcome(format_profile(self.toolbox.profile(rel)), path=rel)


def _check_input(name: str, tool_input: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """A readable complaint about missing, unknown or mistyped arguments, or None."""
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in tool_input]
    if missing:
        return (f"{name}: missing argument(s) {', '.join(missing)}; "
                f"expected {name}({', '.join(props)})")
    unknown = [k for k in tool_input if k not in props]
    if unknown:
        return f"{name}: unknown argument(s) {', '.join(unknown)}; expected {', '.join(props)}"
    types = {"string": str, "boolean": bool}
    for key, value in tool_input.items():
        want = types.get(props[key].get("type", ""))
        if want and not isinstance(value, want):
            return f"{name}: {key} must be a {props[key]['type']} (not {type(value).__name__})"
    return None


def format_metrics(metrics: dict[str, Any]) -> str:
    parts = []
    for key, fmt in (("median_ms", "{:.4f} ms"), ("speedup", "{:.2f}x vs eager"),
                     ("pct_of_floor", "{:.1f}% of floor")):
        value = metrics.get(key)
        if isinstance(value, int | float):
            parts.append(fmt.format(value))
    label = metrics.get("timing_label")
    if label:
        parts.append(f"[{label}]")
    return ", ".join(parts) if parts else json.dumps(metrics, default=str)


def format_profile(profile: dict[str, Any]) -> str:
    """The profiler's dict as a few lines: timing, % of floor, top kernels."""
    lines: list[str] = []
    latency = profile.get("latency_ms")
    median = latency.get("median") if isinstance(latency, dict) else profile.get("median_ms")
    if isinstance(median, int | float):
        lines.append(f"median: {median:.4f} ms")
    roofline = profile.get("roofline") if isinstance(profile.get("roofline"), dict) else {}
    pct = roofline.get("pct_of_floor", profile.get("pct_of_floor"))
    if isinstance(pct, int | float):
        floor = roofline.get("floor_ms")
        lines.append(f"roofline: {pct:.1f}% of floor" + (
            f" (floor {floor:.4f} ms, {roofline.get('bound', '?')}-bound)"
            if isinstance(floor, int | float) else ""))
    for key in ("speedup", "speedup_vs_eager"):
        if isinstance(profile.get(key), int | float):
            lines.append(f"speedup vs eager: {profile[key]:.2f}x")
            break
    if profile.get("timing_label"):
        lines.append(f"timing: {profile['timing_label']}")
    kernels = profile.get("top_kernels") or []
    if kernels:
        lines.append("top kernels by device time:")
        for k in kernels[:10]:
            if isinstance(k, dict):
                name = k.get("name", "?")
                t = k.get("time_ms", k.get("device_time_ms"))
                pct_k = k.get("pct", k.get("percent"))
                lines.append(f"  {name}: " + (f"{t:.4f} ms" if isinstance(t, int | float) else "?")
                             + (f" ({pct_k:.1f}%)" if isinstance(pct_k, int | float) else ""))
            else:
                lines.append(f"  {k}")
    if not lines:
        return json.dumps(profile, indent=1, default=str)[:4000]
    return "\n".join(lines)
