"""Retry one storage request and turn what fails into a typed error.

Throttling and timeouts are retried with exponential backoff and full jitter (the backends' own
retry loops are turned off, so the attempts are the ones configured); every other failure
becomes one of :mod:`iqa_tools.errors`' storage errors, classified from the backend's error
code or the exception's type.  One object's reads share a deadline (:func:`object_deadline`)
and a size cap (:func:`max_object_bytes`), both read from the environment when used.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from ..errors import (
    LocationRefused,
    ObjectMissing,
    StorageAccessDenied,
    StorageError,
    StorageMisconfigured,
    StorageUnavailable,
)
from ..memory import parse_bytes
from . import access
from .locations import REMOTE_SCHEMES, display, scheme

T = TypeVar("T")

#: The largest object read (``AGENTIC_IQA_MAX_OBJECT_BYTES``): a 100-MP camera raw converted
#: to a 16-bit TIFF is about 600 MB, but the photographs IQA datasets hold are under 50 MB.
DEFAULT_MAX_OBJECT_BYTES = 256 * 1024 * 1024
#: Seconds one object's reads may take in all, retries included (``AGENTIC_IQA_STORAGE_DEADLINE``).
DEFAULT_DEADLINE = 120.0

#: Backend error codes (S3 and friends), by what they mean for the job.
_DENIED_CODES = {
    "accessdenied",
    "invalidaccesskeyid",
    "signaturedoesnotmatch",
    "expiredtoken",
    "invalidtoken",
    "tokenrefreshrequired",
    "allaccessdisabled",
    "accountproblem",
    "unauthorized",
    "forbidden",
    "authorizationpermissionmismatch",
    "authenticationfailed",
    "401",
    "403",
}
_MISSING_CODES = {
    "nosuchkey",
    "nosuchbucket",
    "nosuchversion",
    "notfound",
    "404",
    "410",
    "blobnotfound",
    "containernotfound",
}
_TRANSIENT_CODES = {
    "slowdown",
    "throttling",
    "throttlingexception",
    "requestlimitexceeded",
    "toomanyrequests",
    "requesttimeout",
    "requesttimeoutexception",
    "serviceunavailable",
    "internalerror",
    "serverbusy",
    "operationtimedout",
    "408",
    "429",
    "500",
    "502",
    "503",
    "504",
}


@dataclass(frozen=True)
class RetryPolicy:
    """How throttling and timeouts are retried: ``attempts`` in all, waits drawn at random up
    to ``backoff * 2**n`` seconds (full jitter, so workers do not retry in step), at most
    ``backoff_max``; ``timeout`` bounds each request."""

    attempts: int = 5
    backoff: float = 0.2
    backoff_max: float = 10.0
    timeout: float = 60.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """The policy from ``AGENTIC_IQA_STORAGE_*``, read now (a worker's environment)."""

        def number(variable: str, default: float) -> float:
            raw = os.environ.get(variable, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise StorageMisconfigured(f"{variable}={raw!r} is not a number") from None
            if value < 0:
                raise StorageMisconfigured(f"{variable}={raw!r} must not be negative")
            return value

        return cls(
            attempts=max(1, int(number("AGENTIC_IQA_STORAGE_ATTEMPTS", cls.attempts))),
            backoff=number("AGENTIC_IQA_STORAGE_BACKOFF", cls.backoff),
            backoff_max=number("AGENTIC_IQA_STORAGE_BACKOFF_MAX", cls.backoff_max),
            timeout=number("AGENTIC_IQA_STORAGE_TIMEOUT", cls.timeout) or cls.timeout,
        )


class _Transient(Exception):
    """A throttled or timed-out request, retried; ``what`` says which, for the final message."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _code_and_status(exc: BaseException) -> tuple[str, int | None] | None:
    """The backend's error code and HTTP status, for botocore and aiohttp errors (duck-typed:
    neither is a dependency of this layer)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        code = str(response["Error"].get("Code") or "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code, status if isinstance(status, int) else None
    status = getattr(exc, "status", None)
    if isinstance(status, int) and (
        type(exc).__module__.startswith("aiohttp")
        or type(exc).__module__ == "iqa_tools.storage.web"
    ):
        return str(status), status
    return None


def _classify(exc: BaseException) -> tuple[str, str]:
    """(``denied`` | ``missing`` | ``transient`` | ``changed`` | ``other``, a short reason
    without the backend's own text), from the exception and what it wraps."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8 and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for item in chain:
        found = _code_and_status(item)
        if found is not None:
            code, status = found
            label = f"{code} (HTTP {status})" if status and str(status) != code else code
            for kind, codes in (
                ("denied", _DENIED_CODES),
                ("missing", _MISSING_CODES),
                ("transient", _TRANSIENT_CODES),
            ):
                if code.lower() in codes or str(status) in codes:
                    return kind, label
            if code == "PreconditionFailed" or status == 412:
                return "changed", label
        kind_name = type(item).__name__
        if kind_name in (
            "NoCredentialsError",
            "PartialCredentialsError",
            "CredentialRetrievalError",
            "NoAuthTokenError",
        ):
            return "denied", "no usable credential was found"
        if (
            isinstance(item, TimeoutError | socket.timeout | asyncio.TimeoutError)
            or "Timeout" in kind_name
        ):
            return "transient", "the request timed out"
        if isinstance(item, ConnectionError) or kind_name in (
            "EndpointConnectionError",
            "ClientConnectorError",
            "ServerDisconnectedError",
            "ClientOSError",
            "ClientPayloadError",
            "ConnectionClosedError",
            "IncompleteRead",
            "ResponseParserError",
        ):
            return "transient", f"the connection failed ({kind_name})"
    if isinstance(exc, FileNotFoundError):
        return "missing", "not found"
    if isinstance(exc, PermissionError):
        return "denied", "permission denied"
    if isinstance(exc, IsADirectoryError):
        return "missing", "a folder or prefix, not an object"
    if isinstance(exc, OSError) and exc.errno == errno.EBUSY:
        return "transient", "the store is busy (throttled)"
    return "other", type(exc).__name__


def max_object_bytes() -> int:
    """``AGENTIC_IQA_MAX_OBJECT_BYTES`` (256MiB): the largest object read, read now."""
    raw = os.environ.get("AGENTIC_IQA_MAX_OBJECT_BYTES", "").strip()
    try:
        return max(1, parse_bytes(raw)) if raw else DEFAULT_MAX_OBJECT_BYTES
    except ValueError as exc:
        raise StorageMisconfigured(f"AGENTIC_IQA_MAX_OBJECT_BYTES: {exc}") from None


def deadline_seconds() -> float:
    """``AGENTIC_IQA_STORAGE_DEADLINE`` (120 s): one object's reads in all, read now."""
    raw = os.environ.get("AGENTIC_IQA_STORAGE_DEADLINE", "").strip()
    try:
        value = float(raw) if raw else DEFAULT_DEADLINE
    except ValueError:
        raise StorageMisconfigured(
            f"AGENTIC_IQA_STORAGE_DEADLINE={raw!r} is not a number"
        ) from None
    return value if value > 0 else DEFAULT_DEADLINE


#: When the object being read must be done (time.monotonic), set by the outermost read.
_DEADLINE: ContextVar[float | None] = ContextVar("iqa_tools_storage_deadline", default=None)


@contextmanager
def object_deadline() -> Iterator[None]:
    """One deadline for everything done to read one object (a fetch's HEAD and GET, each
    redirect, every retry): the outermost operation starts it, nested ones share it."""
    if _DEADLINE.get() is not None:
        yield
        return
    token = _DEADLINE.set(time.monotonic() + deadline_seconds())
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _remaining() -> float:
    """Seconds left before the deadline (the whole deadline outside any read)."""
    ends = _DEADLINE.get()
    return deadline_seconds() if ends is None else ends - time.monotonic()


def request_timeout(policy: RetryPolicy | None = None) -> float:
    """One request's time limit: ``AGENTIC_IQA_STORAGE_TIMEOUT``, or what is left of the
    deadline when that is less."""
    timeout = (policy or RetryPolicy.from_env()).timeout
    return max(0.05, min(timeout, _remaining()))


def call_with_retries(
    location: str, action: Callable[[], T], policy: RetryPolicy | None = None
) -> T:
    """``action()`` with throttling and timeouts retried, and every failure turned into a
    :class:`StorageError` naming ``location``; no attempt starts, and no wait lasts, past the
    object's deadline (:func:`object_deadline`)."""
    policy = policy or RetryPolicy.from_env()
    shown = display(location)

    def attempt() -> T:
        try:
            return action()
        except StorageError:
            raise
        except Exception as exc:
            kind, reason = _classify(exc)
            if kind == "transient":
                raise _Transient(reason) from exc
            if kind == "missing":
                raise ObjectMissing(f"object {shown} not found ({reason})", shown) from None
            if kind == "denied" and scheme(location) in access.WEB_SCHEMES:
                # No credential is ever sent to a web server: its refusal is this URL's own
                # (a private file, an expired presigned link), not one every item would meet.
                raise StorageError(
                    f"access to {shown} was refused ({reason}): the server will not give this "
                    "file without a credential, and none is sent to a web address; make it "
                    "public, or give a presigned URL",
                    shown,
                ) from None
            if kind == "denied":
                raise StorageAccessDenied(
                    f"access to {shown} was refused ({reason}): check the credential the "
                    "backend reads from its environment or config file (for S3: AWS_PROFILE, "
                    "AWS_ACCESS_KEY_ID, ~/.aws/credentials) and its rights on this bucket",
                    shown,
                ) from None
            if kind == "changed":
                raise ConditionFailed(reason) from None
            if isinstance(exc, ImportError):
                raise missing_backend_error(location) from None
            if isinstance(exc, access.AddressRefused):
                raise LocationRefused(f"{shown}: {exc.strerror}", shown) from None
            raise StorageError(f"cannot read {shown}: {reason}", shown) from None

    backoff = wait_random_exponential(multiplier=policy.backoff, max=policy.backoff_max)
    stop_attempts = stop_after_attempt(policy.attempts)

    def stop(state: Any) -> bool:
        return bool(stop_attempts(state)) or _remaining() <= 0.05

    def wait(state: Any) -> float:
        return max(0.0, min(backoff(state), _remaining() - 0.05))

    if _remaining() <= 0.05:
        raise StorageUnavailable(
            f"{shown} could not be read within its deadline of "
            f"{deadline_seconds():g} s (AGENTIC_IQA_STORAGE_DEADLINE)",
            shown,
        )
    retrying = Retrying(
        stop=stop, wait=wait, retry=retry_if_exception_type(_Transient), reraise=False
    )
    try:
        return retrying(attempt)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        what = last.what if isinstance(last, _Transient) else "it failed"
        count = exc.last_attempt.attempt_number
        if count < policy.attempts:
            raise StorageUnavailable(
                f"{shown} could not be read: {what}, {count} attempt(s) within its deadline of "
                f"{deadline_seconds():g} s (AGENTIC_IQA_STORAGE_DEADLINE)",
                shown,
            ) from None
        raise StorageUnavailable(
            f"{shown} could not be read: {what}, {policy.attempts} attempt(s) in all "
            "(AGENTIC_IQA_STORAGE_ATTEMPTS, AGENTIC_IQA_STORAGE_TIMEOUT)",
            shown,
        ) from None


class ConditionFailed(Exception):
    """The object changed between its stat and its read (a conditional read failed)."""


def missing_backend_error(location: str) -> StorageMisconfigured:
    """Return the error for a URL whose fsspec backend is not installed, naming the extra."""
    extra = REMOTE_SCHEMES.get(scheme(location) or "", "")
    hint = f"pip install 'agentic-iqa[{extra}]'" if extra else "pip install aiohttp"
    return StorageMisconfigured(
        f"{display(location)}: the backend for {scheme(location)}:// is not installed ({hint})",
        display(location),
    )


def is_not_modified(exc: BaseException) -> bool:
    """Tell whether ``exc`` (or what it wraps) is a store's "304 Not Modified"."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        found = _code_and_status(seen)
        if found is not None:
            return found[1] == 304 or found[0] in ("304", "NotModified")
        seen = seen.__cause__ or seen.__context__
    return False
