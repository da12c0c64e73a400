"""A local HTTP server that speaks the Anthropic Messages API wire format, scripted by tests.

`POST /v1/messages` answers the next entry of a script: a message (sent as one JSON body,
or as Server-Sent Events when the request has `"stream": true`), an HTTP error with its
headers (401, 429 with `retry-after`, 529, ...), or a stream dropped half-way. An entry
may be a callable that receives the request body, so a script can react to tool results.
Every request is recorded (body and headers) so tests can check what the client sent;
nothing is written to disk.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


def text(value: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": value}


def tool_use(name: str, input: Any, id: str | None = None) -> dict[str, Any]:
    """A tool_use content block (input may be anything, to script malformed calls)."""
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name,
            "input": input}


def message(*content: dict[str, Any], stop_reason: str | None = None,
            input_tokens: int = 100, output_tokens: int = 50,
            cache_read: int = 0, cache_write: int = 0) -> dict[str, Any]:
    """An assistant message; stop_reason defaults to tool_use when it calls a tool."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant",
        "model": "claude-fake", "content": list(content), "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read},
    }


@dataclass
class ErrorReply:
    """Answer with an HTTP error in the API's error envelope."""

    status: int
    error_type: str = "api_error"
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class DropReply:
    """Start streaming `message`, then close the connection after `after_events` SSE events."""

    message: dict[str, Any]
    after_events: int = 3


Reply = dict[str, Any] | ErrorReply | DropReply
ScriptEntry = Reply | Callable[[dict[str, Any]], Reply]


@dataclass
class RecordedRequest:
    """One request the server received."""

    body: dict[str, Any]
    headers: dict[str, str]


def sse_events(msg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The Messages API streaming events that build `msg`, in order."""
    start = dict(msg, content=[], stop_reason=None)
    start["usage"] = dict(msg["usage"], output_tokens=1)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(msg["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            body = block["text"]
            for piece in [body[i:i + 16] for i in range(0, len(body), 16)] or [""]:
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {
                "type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"],
                                  "input": {}}}))
            raw = json.dumps(block["input"])
            for piece in [raw[i:i + 40] for i in range(0, len(raw), 40)]:
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": msg["usage"]["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-stream (a test's cancelled or timed-out request) is expected
    here: no traceback in the test log for it; anything else is still printed."""

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's signature
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeAnthropic:
    """The scripted server; use as a context manager, point the SDK at `.url`."""

    def __init__(self, script: list[ScriptEntry]) -> None:
        self.script = list(script)
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def remaining(self) -> int:
        return len(self.script)

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if not self.script:
                return ErrorReply(500, message="fake server: script exhausted")
            entry = self.script.pop(0)
        return entry(body) if callable(entry) else entry

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(RecordedRequest(body, {k.lower(): v for k, v in
                                                              self.headers.items()}))
                if self.path.rstrip("/") != "/v1/messages":
                    return self._json(404, {"type": "error", "error": {
                        "type": "not_found_error", "message": self.path}})
                reply = server._next(body)
                if isinstance(reply, ErrorReply):
                    return self._json(reply.status, {"type": "error", "error": {
                        "type": reply.error_type, "message": reply.message}}, reply.headers)
                if isinstance(reply, DropReply):
                    return self._sse(sse_events(reply.message)[:reply.after_events], drop=True)
                if body.get("stream"):
                    return self._sse(sse_events(reply))
                return self._json(200, reply)

            def _json(self, status: int, payload: dict[str, Any],
                      headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{next(_ids):04d}")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[tuple[str, dict[str, Any]]], drop: bool = False) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                if drop:
                    # Promise more bytes than we send, then hang up: a torn stream.
                    self.send_header("content-length", "100000")
                else:
                    self.send_header("connection", "close")
                self.end_headers()
                for name, data in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        return Handler
