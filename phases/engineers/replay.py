"""Engineer `replay:PATH`: replays a recorded engineer conversation with no network.

PATH is a transcript (`optimizer.jsonl`) or a run folder holding `transcripts/optimizer.jsonl`.
Each `propose` replays the next recorded session: the recorded assistant messages are fed to
the same tool loop as the live engineer, so every tool call is executed again against the
new run's worktree — files are written, candidates verified and committed — and the same
commits result. Replayed text and tool calls stream out as events like a live run's.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from kopt.harness.errors import BadInputError
from kopt.phases.engineers.anthropic import run_tool_loop, transcript_file
from kopt.phases.engineers.base import EngineerRequest, Proposal, register_engineer
from kopt.phases.engineers.llm_client import (
    ModelReply,
    ReplayExhausted,
    TextCallback,
    ToolCallback,
    Usage,
)
from kopt.phases.engineers.settings import EngineerSettings, load_settings
from kopt.phases.engineers.transcript import Transcript, find_transcript, read_transcript, sessions
from kopt.phases.events import EventSink

UNLIMITED = 10**9


class ReplayClient:
    """A `ModelClient` that answers with one session's recorded responses, in order."""

    def __init__(self, session: list[dict[str, Any]], transcript: Transcript | None = None) -> None:
        self.transcript = transcript
        head = session[0]
        self.model = str(head.get("model") or "replay")
        self.session_info = head
        self._responses = [r for r in session if r.get("kind") == "response"]

    def call(self, params: dict[str, Any], *, cancel: threading.Event,
             on_text: TextCallback, on_tool_use: ToolCallback) -> ModelReply:
        if not self._responses:
            raise ReplayExhausted()
        record = self._responses.pop(0)
        message = record["message"]
        if self.transcript:
            self.transcript.write("request", call=record.get("call"), params=params)
            self.transcript.write("response", call=record.get("call"), message=message,
                                  usage=record.get("usage"), replayed=True)
        content = list(message.get("content") or [])
        for block in content:
            if block.get("type") == "text" and block.get("text"):
                on_text(block["text"])
            elif block.get("type") == "tool_use":
                on_tool_use(block)
        # Nothing was spent: report a call with no tokens (the recorded usage stays in PATH).
        return ModelReply(content=content, stop_reason=message.get("stop_reason"),
                          usage=Usage(calls=1), message_id=str(message.get("id", "")),
                          model=self.model)


class ReplayEngineer:
    """Replays `options["path"]` session by session."""

    name = "replay"

    def __init__(self, options: dict[str, Any]) -> None:
        if not options.get("path"):
            raise BadInputError("engineer 'replay' needs a transcript",
                                fix="use --engineer replay:PATH (a .jsonl or a run folder)")
        self.path = find_transcript(options["path"])
        self.sessions = sessions(read_transcript(self.path))
        if not self.sessions:
            raise BadInputError(f"{self.path}: no recorded session",
                                fix="pass a transcript written by --engineer anthropic")
        self.options = dict(options)
        self.run_usage = Usage()
        self._used: set[int] = set()

    def _session_for(self, iteration: int) -> list[dict[str, Any]] | None:
        """The first unused session recorded for `iteration`, else the next unused one (a
        resumed run starts at a later iteration with a fresh engineer)."""
        unused = [i for i in range(len(self.sessions)) if i not in self._used]
        match = [i for i in unused if self.sessions[i][0].get("iteration") == iteration]
        if not (match or unused):
            return None
        index = (match or unused)[0]
        self._used.add(index)
        return self.sessions[index]

    def propose(self, request: EngineerRequest, events: EventSink) -> Proposal:
        session = self._session_for(request.iteration)
        if session is None:
            return Proposal(candidate=None, notes=f"replay: {self.path} has no session "
                                                  f"for iteration {request.iteration}")
        head = session[0]
        settings = _replay_settings(load_settings({}), head)
        out = transcript_file(request)
        if out.resolve() == self.path.resolve():
            raise BadInputError(f"replay would overwrite its own transcript {self.path}",
                                fix="replay into a new run")
        transcript = Transcript(out)
        # The system prompt is not needed to replay: record the original's model instead.
        system = [{"type": "text", "text": f"replay of {self.path} (model {head.get('model')})"}]
        return run_tool_loop(request, events, ReplayClient(session, transcript), settings, system=system,
                             transcript=transcript, run_usage=self.run_usage,
                             engineer=self.name)


def _replay_settings(base: EngineerSettings, head: dict[str, Any]) -> EngineerSettings:
    """No budget of this machine cuts a replay short: the transcript decides where it ends."""
    target = head.get("target_speedup")
    return replace(base, model=str(head.get("model") or base.model), max_turns=UNLIMITED,
                   max_verifications=UNLIMITED, max_run_tokens=UNLIMITED,
                   max_run_cost_usd=float(UNLIMITED),
                   target_speedup=float(target) if isinstance(target, int | float) else None)


register_engineer("replay", ReplayEngineer)
