"""Bound every model call in time and in bytes, whatever the server does.

The SDKs' ``timeout`` is httpx's, per read: a server sending one byte every two seconds keeps
a call with a 5-second timeout going for ever, and nothing stops a 400 MB answer from being
read into memory.  :class:`BoundedTransport`, the transport of the SDK clients of
:mod:`.openai` and :mod:`.anthropic`, adds within a :func:`bounded_call` (what
:meth:`.sdk.SDKClient.complete` opens around its SDK call):

* a **total deadline** per HTTP attempt, connect to last byte: ``timeout`` seconds.  Every
  phase's own timeout is cut to what is left of it, each chunk of the body is checked against
  it, and a watchdog shuts the socket down when it passes while a read still waits.  Past it
  the attempt raises :class:`CallDeadlineExceeded` ("model call exceeded its 5 s deadline"),
  a timeout, so the SDK's retries and then the pipeline's (a
  :class:`~.base.TransientVLMError`) apply as to any timeout;
* a **byte cap** on the body, enforced while it is read (before any parsing; a
  ``Content-Length`` above it is refused before reading): :class:`ResponseTooLarge` names the
  cap.  Bodies come uncompressed (``Accept-Encoding: identity``), so the cap is on what is
  kept, not on a compressed stream that would expand past it;
* the **step's deadline** (:func:`step_deadline`), for steps that no signal can interrupt (a
  Celery thread pool has no time limits): a call that would outlast it ends when it passes
  with the step's own error, which no SDK retries (it travels as :class:`StepDeadlineReached`,
  a ``BaseException``, through the SDK's ``except Exception``).

Requests outside a :func:`bounded_call` (the Batch API's uploads and downloads, whose files
may be large and slow by nature) keep the SDK's own timeouts.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx2

log = logging.getLogger(__name__)

#: Bytes of an answer allowed per token of ``max_tokens``: generous, for JSON framing and
#: 20 log-probabilities per token, each with its bytes.
BYTES_PER_TOKEN = 4096
#: Bytes allowed on top of that, whatever ``max_tokens`` (headers of the JSON, usage, ids).
BASE_BYTES = 64 * 1024


def response_cap(max_tokens: int, absolute: int) -> int:
    """The most bytes an answer of up to ``max_tokens`` tokens may have, at most ``absolute``."""
    return min(absolute, BASE_BYTES + max_tokens * BYTES_PER_TOKEN)


class CallDeadlineExceeded(httpx2.TimeoutException):
    """An attempt ran past its total deadline (a timeout: retried like one)."""

    def __init__(self, seconds: float, request: httpx2.Request | None = None) -> None:
        super().__init__(f"model call exceeded its {seconds:g} s deadline", request=request)
        self.seconds = seconds


class ResponseTooLarge(Exception):
    """The answer's body exceeded its byte cap; reading stopped there."""

    def __init__(self, cap: int, max_tokens: int | None, absolute: int | None) -> None:
        why = (
            f"{BASE_BYTES:,} + {BYTES_PER_TOKEN:,} per token of max_tokens {max_tokens}, at "
            f"most max_response_bytes {absolute:,}"
            if max_tokens is not None and absolute is not None
            else "max_response_bytes"
        )
        super().__init__(
            f"the model's answer exceeded its cap of {cap:,} bytes ({why}); reading stopped "
            "there: check the endpoint, or raise the role's max_response_bytes "
            "(AGENTIC_IQA_<ROLE>_MAX_RESPONSE_BYTES)"
        )
        self.cap = cap


class StepOverrun(Exception):  # noqa: N818 - named for what happened, like TimeoutError
    """A step ran past its own time limit: a base for the worker's own error, which no
    subtask swallows (:func:`agentic_iqa.agents.executor.subtasks.run_subtask`)."""


class StepDeadlineReached(BaseException):  # noqa: N818 - a signal, like KeyboardInterrupt
    """The step's deadline passed during a call; ``error`` is the step's own exception.

    A ``BaseException`` so that the SDKs (which retry any ``Exception``) let it through;
    :meth:`.sdk.SDKClient.complete` raises ``error`` in its place."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class CallLimits:
    """What bounds the attempts of one call: seconds per attempt, bytes per body."""

    seconds: float
    max_bytes: int | None = None
    #: For the error: the request's max_tokens and the absolute cap the byte cap came from.
    max_tokens: int | None = None
    absolute: int | None = None
    #: An oversize answer already seen: the SDK's retries get the same error without a request.
    refused: ResponseTooLarge | None = None


@dataclass(frozen=True)
class StepDeadline:
    ends: float
    expired: Callable[[], Exception]


_CALL: ContextVar[CallLimits | None] = ContextVar("agentic_iqa_call_limits", default=None)
_STEP: ContextVar[StepDeadline | None] = ContextVar("agentic_iqa_step_deadline", default=None)


@contextmanager
def bounded_call(limits: CallLimits) -> Iterator[CallLimits]:
    """Bound the HTTP attempts made in this block (this thread or task) by ``limits``."""
    token = _CALL.set(limits)
    try:
        yield limits
    finally:
        _CALL.reset(token)


@contextmanager
def step_deadline(seconds: float, expired: Callable[[], Exception]) -> Iterator[None]:
    """End the model calls of this block when ``seconds`` have passed, with ``expired()``."""
    token = _STEP.set(StepDeadline(time.monotonic() + seconds, expired))
    try:
        yield
    finally:
        _STEP.reset(token)


def check_step_deadline() -> None:
    """Raise the step's error if its deadline (:func:`step_deadline`) has passed."""
    step = _STEP.get()
    if step is not None and time.monotonic() >= step.ends:
        raise step.expired()


class _Watchdog:
    """One daemon thread that runs each armed action at its time, unless disarmed first."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, when: float, action: Callable[[], None]) -> int:
        with self._wake:
            ident = next(self._ids)
            heapq.heappush(self._heap, (when, ident, action))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="vlm-deadline", daemon=True)
                self._thread.start()
            self._wake.notify()
            return ident

    def disarm(self, ident: int) -> None:
        with self._wake:
            if any(entry[1] == ident for entry in self._heap):
                self._cancelled.add(ident)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wake.wait(timeout)
                _when, ident, action = heapq.heappop(self._heap)
                if ident in self._cancelled:
                    self._cancelled.discard(ident)
                    continue
            try:
                action()
            except OSError:  # a socket already gone needs no shutdown
                continue
            except Exception:  # this thread serves every call: it never dies of one
                log.exception("the model-call watchdog failed to end a call")


_WATCHDOG = _Watchdog()


class _Socket:
    """The socket of one attempt, as soon as it is known, for the watchdog to shut down: a
    new connection's from httpcore's trace (so a status line or headers sent a byte at a
    time are cut too), else the response's once its headers are in."""

    _CONNECTED = frozenset(
        f"connection.{name}.complete"
        for name in ("connect_tcp", "connect_unix_socket", "start_tls")
    )

    def __init__(self, previous: Callable[[str, dict[str, Any]], None] | None) -> None:
        self.stream: Any = None
        self._previous = previous

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event in self._CONNECTED and info.get("return_value") is not None:
            self.stream = info["return_value"]
        if self._previous is not None:
            self._previous(event, info)

    def shutdown(self) -> None:
        sock = self.stream.get_extra_info("socket") if self.stream is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on it


class _Bounds:
    """The deadline and cap of one attempt, and the error each raises."""

    def __init__(
        self, call: CallLimits, step: StepDeadline | None, request: httpx2.Request
    ) -> None:
        now = time.monotonic()
        self.call, self.step, self.request = call, step, request
        call_ends = now + call.seconds
        step_ends = step.ends if step is not None else float("inf")
        self.ends = min(call_ends, step_ends)
        self.step_binds = step_ends <= call_ends

    @property
    def remaining(self) -> float:
        return self.ends - time.monotonic()

    def passed(self, slack: float = 0.0) -> bool:
        return time.monotonic() >= self.ends - slack

    def expired(self) -> BaseException:
        if self.step_binds and self.step is not None:
            return StepDeadlineReached(self.step.expired())
        return CallDeadlineExceeded(self.call.seconds, self.request)

    def too_large(self) -> ResponseTooLarge:
        assert self.call.max_bytes is not None
        refused = ResponseTooLarge(self.call.max_bytes, self.call.max_tokens, self.call.absolute)
        self.call.refused = refused
        return refused


class _BoundedStream(httpx2.SyncByteStream):
    """A response body read under its attempt's deadline and byte cap."""

    def __init__(self, inner: httpx2.SyncByteStream, bounds: _Bounds, watch: int) -> None:
        self._inner = inner
        self._bounds = bounds
        self._watch: int | None = watch

    def __iter__(self) -> Iterator[bytes]:
        bounds = self._bounds
        cap = bounds.call.max_bytes
        received = 0
        try:
            for chunk in self._inner:
                received += len(chunk)
                if cap is not None and received > cap:
                    raise bounds.too_large()
                if bounds.passed():
                    raise bounds.expired()
                yield chunk
        except (httpx2.TransportError, OSError):
            if bounds.passed(slack=0.05):  # the watchdog shut the socket, or a cut timeout
                raise bounds.expired() from None
            raise

    def close(self) -> None:
        if self._watch is not None:
            _WATCHDOG.disarm(self._watch)
            self._watch = None
        self._inner.close()


class BoundedTransport(httpx2.HTTPTransport):
    """httpx's transport, each attempt bounded as the module docstring says."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        call, step = _CALL.get(), _STEP.get()
        if call is None:  # not a model call (the Batch API's): the SDK's own timeouts
            return super().handle_request(request)
        if call.refused is not None:
            raise call.refused
        bounds = _Bounds(call, step, request)
        if bounds.remaining <= 0:
            raise bounds.expired()
        remaining = bounds.remaining
        timeouts = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {
            phase: remaining if timeouts.get(phase) is None else min(timeouts[phase], remaining)
            for phase in ("connect", "read", "write", "pool")
        }
        if call.max_bytes is not None:
            request.headers["accept-encoding"] = "identity"
        connection = _Socket(request.extensions.get("trace"))
        request.extensions["trace"] = connection.trace
        watch = _WATCHDOG.arm(bounds.ends, connection.shutdown)
        try:
            response = super().handle_request(request)
        except httpx2.TransportError:
            _WATCHDOG.disarm(watch)
            if bounds.passed(slack=0.05):
                raise bounds.expired() from None
            raise
        except BaseException:
            _WATCHDOG.disarm(watch)
            raise
        connection.stream = response.extensions.get("network_stream") or connection.stream
        length = response.headers.get("content-length", "")
        cap = call.max_bytes
        if cap is not None and length.isdigit() and int(length) > cap:
            _WATCHDOG.disarm(watch)
            response.close()
            raise bounds.too_large()
        stream = response.stream
        assert isinstance(stream, httpx2.SyncByteStream)
        response.stream = _BoundedStream(stream, bounds, watch)
        return response
