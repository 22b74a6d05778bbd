"""A real local HTTP server standing in for the OpenAI and Anthropic APIs.

The SDKs run unmodified against it, so tests exercise their actual wire format, retries and
error handling. The server records every request and answers from a scripted queue, then from a
default responder.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    #: The JSON body decoded, else the body as text (None when empty).
    body: Any
    #: The body as it came (a multipart upload is read from it).
    raw: bytes = b""
    content_type: str = ""


@dataclass(frozen=True)
class Reply:
    status: int = 200
    #: JSON-encoded unless it is text or bytes (sent as they are).
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


def fast_retry(status: int, body: Any) -> Reply:
    """An error reply asking the SDK to retry after 10 ms instead of its 0.5 s+ backoff."""
    return Reply(status, body, {"retry-after-ms": "10"})


class FakeAPIServer:
    """ThreadingHTTPServer on 127.0.0.1, any free port; use as a context manager.

    Only POST reaches the responders unless ``methods`` names more (``("POST", "GET",
    "DELETE")`` for the batch server): a GET elsewhere (a preflight's model list) keeps the
    HTTP 501 a plain server answers.
    """

    def __init__(
        self,
        default: Callable[[Recorded], Reply] | None = None,
        *,
        methods: Collection[str] = ("POST",),
    ) -> None:
        self.methods = frozenset(methods)
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
                self._handle("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle("DELETE")

            def _handle(self, method: str) -> None:
                if method not in server.methods:
                    self.send_error(501, f"Unsupported method ({method!r})")
                    return
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw) if raw else None
                except (json.JSONDecodeError, UnicodeDecodeError):
                    body = raw.decode("utf-8", "replace")
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = server._respond(
                    Recorded(method, self.path, headers, body, raw, headers.get("content-type", ""))
                )
                payload = (
                    reply.body
                    if isinstance(reply.body, bytes)
                    else (
                        reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                    ).encode("utf-8")
                )
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("content-length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Silence the per-request stderr lines."""

        return Handler


def openai_completion(
    content: str,
    *,
    model: str = "gpt-test",
    top_logprobs: list[tuple[str, float]] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A chat.completion body; with ``top_logprobs``, logprobs for one generated token;
    ``usage`` replaces the default usage object."""
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
        "usage": usage
        if usage is not None
        else {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def openai_error(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def anthropic_message(
    text: str, *, model: str = "claude-test", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage if usage is not None else {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_error(message: str, kind: str = "api_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class RateLimitedResponder:
    """A default responder that behaves like a rate-limited provider, and keeps the evidence.

    Requests are counted per fixed window of ``window`` seconds (aligned to the epoch, as
    providers count per minute); above ``limit`` in a window the answer is 429 with
    ``Retry-After`` (seconds until the window ends, rounded up, at least ``retry_after``).
    :meth:`throttle_next` makes the next request a 429 whatever the counts.  Every request is
    logged as ``(arrival time, status, authorization header)``, and the most requests in
    flight at once is kept.  ``reply`` builds a 200 answer; ``latency`` (+ uniform ``jitter``)
    is slept before answering.
    """

    def __init__(
        self,
        reply: Callable[[Recorded], Reply],
        *,
        limit: int | None = None,
        window: float = 60.0,
        retry_after: float = 1.0,
        latency: float = 0.0,
        jitter: float = 0.0,
    ) -> None:
        self.reply = reply
        self.limit = limit
        self.window = window
        self.retry_after = retry_after
        self.latency = latency
        self.jitter = jitter
        self.log: list[tuple[float, int, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._counts: dict[int, int] = {}
        self._throttle: deque[float] = deque()
        self._lock = threading.Lock()

    def throttle_next(self, retry_after: float) -> None:
        with self._lock:
            self._throttle.append(retry_after)

    def __call__(self, request: Recorded) -> Reply:
        import math
        import random
        import time

        now = time.time()
        who = request.headers.get("authorization", "")
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            window = int(now // self.window)
            wait: float | None = None
            if self._throttle:
                wait = self._throttle.popleft()
            elif self.limit is not None and self._counts.get(window, 0) >= self.limit:
                wait = max(self.retry_after, math.ceil((window + 1) * self.window - now))
            else:
                self._counts[window] = self._counts.get(window, 0) + 1
            self.log.append((now, 200 if wait is None else 429, who))
        try:
            if wait is not None:
                return Reply(
                    429,
                    openai_error("Rate limit reached", "rate_limit_error"),
                    {"retry-after": f"{wait:g}"},
                )
            if self.latency or self.jitter:
                time.sleep(max(0.0, self.latency + random.uniform(-self.jitter, self.jitter)))
            return self.reply(request)
        finally:
            with self._lock:
                self.in_flight -= 1

    def accepted(self) -> list[tuple[float, int, str]]:
        return [entry for entry in self.log if entry[1] == 200]

    def rejected(self) -> int:
        return sum(1 for entry in self.log if entry[1] == 429)

    def max_per_window(self) -> int:
        """The most requests answered 200 in one window (what the provider would bill)."""
        with self._lock:
            return max(self._counts.values(), default=0)
