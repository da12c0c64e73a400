"""One model call through the Anthropic SDK: streaming, retries, cost, transcripts.

`AnthropicClient.call(params, ...)` sends one Messages API request and returns the
assistant message as plain dicts. It streams text and finished tool calls to callbacks as
they arrive; retries 429, 529, 5xx and connection failures with backoff (honouring
`retry-after`); turns 400/401/403/404 into one-line `EngineerError`s; fails cleanly when a
stream breaks half-way (`StreamLostError`; nothing of that call is kept, the run can
resume); stops promptly when `cancel` is set (`CallCancelled`). Every request, response and
error goes to the transcript, never the key or the headers.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

from kopt.harness.errors import EngineerError
from kopt.phases.engineers.settings import EngineerSettings
from kopt.phases.engineers.transcript import Transcript
from kopt.phases.events import LOG, Event, EventSink, null_sink

# USD per million tokens (input, output), from Anthropic's model pages (platform.claude.com,
# November 2026). Cache writes (5-minute TTL) cost 1.25x input, cache reads 0.1x input.
# The longest matching prefix wins; an unknown id is priced like the default model.
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "claude-fable-5-1": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-opus-4-8": (5.0, 25.0),
    "claude-opus-4-7": (5.0, 25.0),  # between 4.5 and 4.8, which are both $5/$25
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
}
DEFAULT_PRICE = PRICES_PER_MTOK["claude-sonnet-5-5"]
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1

# 408 timeout, 409 conflict, 429 rate limit, 5xx server, 529 overloaded: worth another try.
RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}


class CallCancelled(Exception):
    """The user cancelled while a call was in flight (not an error: the engineer returns)."""


class ReplayExhausted(Exception):
    """A replayed session has no more recorded responses: the original stopped here."""


class StreamLostError(EngineerError):
    """The connection dropped in the middle of a streamed response."""


@dataclass
class Usage:
    """Tokens and dollars of one call, or summed over many."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return (self.input_tokens + self.output_tokens + self.cache_creation_input_tokens
                + self.cache_read_input_tokens)

    def add(self, other: Usage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["cost_usd"] = round(self.cost_usd, 6)
        return out


def price_for(model: str) -> tuple[float, float]:
    """(input, output) USD per million tokens for a model id."""
    best = max((p for p in PRICES_PER_MTOK if model.startswith(p)), key=len, default=None)
    return PRICES_PER_MTOK[best] if best else DEFAULT_PRICE


def usage_from(model: str, raw: dict[str, Any] | None) -> Usage:
    """A call's `Usage` (with its cost) from the API's usage object."""
    raw = raw or {}
    usage = Usage(
        calls=1,
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_creation_input_tokens=int(raw.get("cache_creation_input_tokens") or 0),
        cache_read_input_tokens=int(raw.get("cache_read_input_tokens") or 0),
    )
    price_in, price_out = price_for(model)
    usage.cost_usd = (usage.input_tokens * price_in + usage.output_tokens * price_out
                      + usage.cache_creation_input_tokens * price_in * CACHE_WRITE_FACTOR
                      + usage.cache_read_input_tokens * price_in * CACHE_READ_FACTOR) / 1e6
    return usage


@dataclass
class ModelReply:
    """The assistant's message from one call."""

    content: list[dict[str, Any]]
    """Content blocks as plain dicts: {"type": "text", "text"} / {"type": "tool_use", ...}."""
    stop_reason: str | None
    usage: Usage
    message_id: str = ""
    model: str = ""


TextCallback = Callable[[str], None]
ToolCallback = Callable[[dict[str, Any]], None]


class ModelClient(Protocol):
    """What the tool loop needs from a model: the live API, or a recorded transcript."""

    model: str

    def call(self, params: dict[str, Any], *, cancel: threading.Event,
             on_text: TextCallback, on_tool_use: ToolCallback) -> ModelReply: ...


def block_dict(block: Any) -> dict[str, Any]:
    """A content block (SDK model or dict) as the plain dict we send back and record."""
    data = block if isinstance(block, dict) else block.model_dump(mode="json", exclude_none=True)
    kind = data.get("type")
    if kind == "text":
        return {"type": "text", "text": data.get("text", "")}
    if kind == "tool_use":
        return {"type": "tool_use", "id": data["id"], "name": data["name"],
                "input": data.get("input")}
    return {k: v for k, v in data.items() if k not in ("citations", "caller")}


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP library's transport errors (a stream torn mid-body surfaces as one)."""
    errors: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        errors.append(module.TransportError)
    return tuple(errors)


class AnthropicClient:
    """The live Messages API (honours `ANTHROPIC_BASE_URL`; the key stays in memory)."""

    def __init__(self, settings: EngineerSettings, *, events: EventSink = null_sink,
                 phase: str = "optimizer", transcript: Transcript | None = None) -> None:
        self.settings = settings
        self.model = settings.model
        self.events = events
        self.phase = phase
        self.transcript = transcript
        self._sdk: Any = None
        self._calls = 0

    @staticmethod
    def api_key() -> str:
        key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
        if not key:
            raise EngineerError("ANTHROPIC_API_KEY is not set",
                                fix="export your key, or use --engineer offline")
        return key

    def _client(self) -> Any:
        if self._sdk is None:
            import anthropic

            # Our own retry loop (below) logs each retry and honours cancel; the SDK's is off.
            self._sdk = anthropic.Anthropic(api_key=self.api_key(), max_retries=0,
                                            timeout=self.settings.timeout_s)
        return self._sdk

    def _log(self, message: str) -> None:
        self.events(Event(LOG, self.phase, message))

    def call(self, params: dict[str, Any], *, cancel: threading.Event,
             on_text: TextCallback, on_tool_use: ToolCallback) -> ModelReply:
        import anthropic

        client = self._client()
        self._calls += 1
        call_no = self._calls
        if self.transcript:
            self.transcript.write("request", call=call_no, params=params)
        attempts = self.settings.max_retries + 1
        for attempt in range(1, attempts + 1):
            if cancel.is_set():
                raise CallCancelled()
            started = [False]
            try:
                if self.settings.stream:
                    reply = self._stream(client, params, cancel, on_text, on_tool_use, started)
                else:
                    reply = self._create(client, params, on_text, on_tool_use)
            except CallCancelled:
                self._record_error(call_no, "cancelled by the user")
                raise
            except anthropic.APIStatusError as err:
                if err.status_code in RETRYABLE_STATUS and attempt < attempts:
                    self._wait(self._delay(err, attempt), f"{err.status_code} {_kind(err)}",
                               attempt, attempts, cancel, call_no)
                    continue
                self._record_error(call_no, str(err), status=err.status_code)
                raise _status_error(err, self.model) from err
            except (anthropic.APIConnectionError, *_transport_errors()) as err:
                if started[0] or (cancel.is_set()):
                    if cancel.is_set():
                        self._record_error(call_no, "cancelled by the user")
                        raise CallCancelled() from err
                    self._record_error(call_no, f"stream lost: {err}")
                    raise StreamLostError(
                        f"connection to the Anthropic API was lost mid-response ({_short(err)})",
                        fix="this iteration failed; `kopt run --resume RUN_ID` continues") from err
                if attempt < attempts:
                    self._wait(self._delay(None, attempt), f"connection failed ({_short(err)})",
                               attempt, attempts, cancel, call_no)
                    continue
                self._record_error(call_no, f"connection failed: {err}")
                raise EngineerError(f"cannot reach the Anthropic API: {_short(err)}",
                                    fix="check the network or ANTHROPIC_BASE_URL") from err
            if self.transcript:
                self.transcript.write("response", call=call_no, message={
                    "id": reply.message_id, "model": reply.model, "content": reply.content,
                    "stop_reason": reply.stop_reason}, usage=reply.usage.to_dict())
            return reply
        raise AssertionError("unreachable: the retry loop returns or raises")

    def _create(self, client: Any, params: dict[str, Any], on_text: TextCallback,
                on_tool_use: ToolCallback) -> ModelReply:
        message = client.messages.create(**params)
        reply = self._reply(message)
        for block in reply.content:
            if block["type"] == "text" and block["text"]:
                on_text(block["text"])
            elif block["type"] == "tool_use":
                on_tool_use(block)
        return reply

    def _stream(self, client: Any, params: dict[str, Any], cancel: threading.Event,
                on_text: TextCallback, on_tool_use: ToolCallback,
                started: list[bool]) -> ModelReply:
        finished = threading.Event()
        with client.messages.stream(**params) as stream:

            def close_on_cancel() -> None:
                while not finished.is_set():
                    if cancel.wait(0.05):
                        stream.close()
                        return

            watcher = threading.Thread(target=close_on_cancel, daemon=True)
            watcher.start()
            try:
                for event in stream:
                    started[0] = True
                    if cancel.is_set():
                        raise CallCancelled()
                    if event.type == "text":
                        on_text(event.text)
                    elif event.type == "thinking":
                        # Newer models return the text between tool calls as thinking.
                        on_text(event.thinking)
                    elif event.type == "content_block_stop":
                        block = getattr(event, "content_block", None)
                        if block is not None and block.type == "tool_use":
                            on_tool_use(block_dict(block))
                if cancel.is_set():
                    raise CallCancelled()
                message = stream.get_final_message()
            except CallCancelled:
                raise
            except Exception as err:
                if cancel.is_set():  # the watcher closed the stream under the iterator
                    raise CallCancelled() from err
                raise
            finally:
                finished.set()
        return self._reply(message)

    def _reply(self, message: Any) -> ModelReply:
        raw_usage = message.usage.model_dump(mode="json") if message.usage else {}
        model = getattr(message, "model", "") or self.model
        return ModelReply(content=[block_dict(b) for b in message.content],
                          stop_reason=message.stop_reason,
                          usage=usage_from(self.model, raw_usage),
                          message_id=getattr(message, "id", ""), model=model)

    def _delay(self, err: Any, attempt: int) -> float:
        cap = self.settings.retry_cap_s
        headers = getattr(getattr(err, "response", None), "headers", None) or {}
        for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
            value = headers.get(name)
            if value is not None:
                try:
                    return min(max(float(value) * scale, 0.0), cap)
                except ValueError:
                    pass  # an HTTP date: fall back to backoff
        return min(self.settings.retry_base_s * 2 ** (attempt - 1) * (0.75 + random.random() / 2), cap)

    def _wait(self, delay: float, why: str, attempt: int, attempts: int,
              cancel: threading.Event, call_no: int) -> None:
        self._log(f"anthropic: {why}; retrying in {delay:.1f}s (attempt {attempt + 1}/{attempts})")
        if self.transcript:
            self.transcript.write("error", call=call_no, error=why, retry_in_s=round(delay, 3))
        if cancel.wait(delay):  # sleeps, but a Ctrl-C ends the wait at once
            raise CallCancelled()

    def _record_error(self, call_no: int, message: str, status: int | None = None) -> None:
        if self.transcript:
            self.transcript.write("error", call=call_no, error=message, status=status)


def _kind(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner, dict) and inner.get("type"):
            return str(inner["type"])
    return type(err).__name__


def _api_message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(err, "message", err))


def _short(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:160]


def _status_error(err: Any, model: str) -> EngineerError:
    """A one-line error for a status the user must fix (or a retryable one that persisted)."""
    status = err.status_code
    detail = _api_message(err)[:200]
    if status == 401:
        return EngineerError(f"the Anthropic API rejected the key (401 {_kind(err)})",
                             fix="check ANTHROPIC_API_KEY")
    if status == 403:
        return EngineerError(f"the Anthropic API refused access (403 {_kind(err)}: {detail})",
                             fix="check the key's workspace and permissions")
    if status == 404:
        return EngineerError(f"the Anthropic API has no model {model!r} (404: {detail})",
                             fix="choose another with --model or anthropic.model in .kopt/config.yaml")
    if status == 400:
        return EngineerError(f"the Anthropic API refused the request (400 {_kind(err)}: {detail})",
                             fix="check --model and the engineer options")
    if status in RETRYABLE_STATUS:
        return EngineerError(f"the Anthropic API kept failing ({status} {_kind(err)}: {detail})",
                             fix="try again later; `kopt run --resume RUN_ID` continues the run")
    return EngineerError(f"the Anthropic API returned {status} ({_kind(err)}: {detail})",
                         fix="see the run transcript for the request")
