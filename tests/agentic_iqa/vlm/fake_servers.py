"""A real local HTTP server standing in for the OpenAI and Anthropic APIs.

The SDKs run unmodified against it, so tests exercise their actual wire format, retries and
error handling. The server records every request and answers from a scripted queue, then from a
default responder.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def fast_retry(status: int, body: Any) -> Reply:
    """An error reply asking the SDK to retry after 10 ms instead of its 0.5 s+ backoff."""
    return Reply(status, body, {"retry-after-ms": "10"})


class FakeAPIServer:
    """ThreadingHTTPServer on 127.0.0.1, any free port; use as a context manager."""

    def __init__(self, default: Callable[[Recorded], Reply] | None = None) -> None:
        self.requests: list[Recorded] = []
        self._queue: deque[Reply] = deque()
        self._default = default or (lambda _request: Reply(404, {"error": "not scripted"}))
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        # A short poll interval makes shutdown() quick (the default waits up to 0.5 s).
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def __enter__(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _respond(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            scripted = self._queue.popleft() if self._queue else None
        return scripted or self._default(request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = server._respond(Recorded("POST", self.path, headers, body))
                payload = (
                    reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                ).encode("utf-8")
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Silence the per-request stderr lines."""

        return Handler


def openai_completion(
    content: str, *, model: str = "gpt-test", top_logprobs: list[tuple[str, float]] | None = None
) -> dict[str, Any]:
    """A chat.completion body; with ``top_logprobs``, logprobs for one generated token."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content, "refusal": None},
        "finish_reason": "stop",
        "logprobs": None,
    }
    if top_logprobs is not None:
        first, first_logprob = top_logprobs[0]
        choice["logprobs"] = {
            "content": [
                {
                    "token": first,
                    "logprob": first_logprob,
                    "bytes": list(first.encode()),
                    "top_logprobs": [
                        {"token": token, "logprob": logprob, "bytes": list(token.encode())}
                        for token, logprob in top_logprobs
                    ],
                }
            ],
            "refusal": None,
        }
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def openai_error(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def anthropic_message(text: str, *, model: str = "claude-test") -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_error(message: str, kind: str = "api_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
