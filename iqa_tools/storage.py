"""Where an image's bytes come from: a local path, or a URL in object storage or behind HTTPS.

Workers on other hosts share no disk with the submitter, so an image is named by a location
that any host can read: ``s3://`` (also MinIO, Ceph), ``gs://``, ``az://``, ``https://`` through
fsspec and its maintained backends, or ``file://`` and plain paths, read directly (no fsspec on
the local path: zero overhead).

* Credentials and endpoints come only from each backend's usual environment and config files
  (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ``~/.aws/config``, ``GOOGLE_APPLICATION_CREDENTIALS``,
  ``AZURE_STORAGE_*``).  A URL that carries ``user:password@`` is refused, so no location, and
  therefore no message, ever holds one; a query string (a presigned URL) is shown as ``?***``.
* Failures are typed (:mod:`.errors`): :class:`ObjectMissing` and :class:`StorageUnavailable`
  fail one item; :class:`StorageAccessDenied` and :class:`StorageMisconfigured` say
  ``stops_job``.  Throttling and timeouts are retried here, once, with exponential backoff and
  jitter (the backends' own retry loops are turned off so the attempts are the ones configured).
* :func:`fetch` returns the bytes with their ``sha256:`` digest, checks them against the digest
  recorded at submit, and serves repeated reads from a local :class:`ObjectCache`.
* :func:`join_under` confines a manifest's relative names to a root URL or folder, by the same
  lexical rule as ``agentic_iqa.jobs.paths.confined_key`` (mirrored: this layer cannot import
  that one), and also on the percent-decoded name.
* Every :func:`stat`, :func:`read`, :func:`fetch` and :func:`upload`, and every redirect an
  HTTP server answers, first passes the gate of the reading in force (:mod:`.access`): a
  location it refuses is a :class:`LocationRefused`, and no request is sent.  HTTP goes through
  :mod:`.web` (one request each, redirects back here, connections only to allowed addresses).
* An object is at most ``AGENTIC_IQA_MAX_OBJECT_BYTES``: refused from its declared size, else
  counted while it streams, before anything is kept; and one object's reads (its HEAD, GET,
  redirects and retries together) end within ``AGENTIC_IQA_STORAGE_DEADLINE``.

Environment (read when used): ``AGENTIC_IQA_STORAGE_ATTEMPTS`` (5), ``AGENTIC_IQA_STORAGE_BACKOFF``
(0.2 s, the first wait), ``AGENTIC_IQA_STORAGE_BACKOFF_MAX`` (10 s), ``AGENTIC_IQA_STORAGE_TIMEOUT``
(60 s per request), ``AGENTIC_IQA_STORAGE_DEADLINE`` (120 s per object, all attempts),
``AGENTIC_IQA_MAX_OBJECT_BYTES`` (256MiB), ``AGENTIC_IQA_OBJECT_CACHE`` (a folder) and
``AGENTIC_IQA_OBJECT_CACHE_BYTES`` (2GB).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from . import access
from .errors import (
    LocationRefused,
    ObjectChanged,
    ObjectMissing,
    ObjectTooLarge,
    StorageAccessDenied,
    StorageError,
    StorageMisconfigured,
    StorageUnavailable,
)
from .locations import (  # the names other modules import from here, re-exported
    REMOTE_SCHEMES as REMOTE_SCHEMES,
)
from .locations import _check_url, _file_path, display, join_under, scheme
from .locations import is_url as is_url
from .memory import parse_bytes

T = TypeVar("T")

DEFAULT_CACHE_BYTES = 2_000_000_000
#: The largest object read (``AGENTIC_IQA_MAX_OBJECT_BYTES``): a 100-MP camera raw converted
#: to a 16-bit TIFF is about 600 MB, but the photographs IQA datasets hold are under 50 MB.
DEFAULT_MAX_OBJECT_BYTES = 256 * 1024 * 1024
#: Seconds one object's reads may take in all, retries included (``AGENTIC_IQA_STORAGE_DEADLINE``).
DEFAULT_DEADLINE = 120.0
#: Redirects followed (each through the gate) before an HTTP read gives up.
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

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


def _local_path(location: str) -> str | None:
    """The path to open directly for a plain path or a ``file://`` URL, else None."""
    name = scheme(location)
    if name is None:
        return location
    if _check_url(location) == "file":
        return _file_path(location)
    return None


# --- retries and errors -----------------------------------------------------------------------


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
        type(exc).__module__.startswith("aiohttp") or type(exc).__module__ == "iqa_tools.web"
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
def _deadline() -> Iterator[None]:
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


def _request_timeout(policy: RetryPolicy | None = None) -> float:
    """One request's time limit: ``AGENTIC_IQA_STORAGE_TIMEOUT``, or what is left of the
    deadline when that is less."""
    timeout = (policy or RetryPolicy.from_env()).timeout
    return max(0.05, min(timeout, _remaining()))


def _call(location: str, action: Callable[[], T], policy: RetryPolicy | None = None) -> T:
    """``action()`` with throttling and timeouts retried, and every failure turned into a
    :class:`StorageError` naming ``location``; no attempt starts, and no wait lasts, past the
    object's deadline (:func:`_deadline`)."""
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
                raise _Changed(reason) from None
            if isinstance(exc, ImportError):
                raise _missing_backend(location) from None
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


class _Changed(Exception):
    """The object changed between its stat and its read (a conditional read failed)."""


def _missing_backend(location: str) -> StorageMisconfigured:
    extra = REMOTE_SCHEMES.get(scheme(location) or "", "")
    hint = f"pip install 'agentic-iqa[{extra}]'" if extra else "pip install aiohttp"
    return StorageMisconfigured(
        f"{display(location)}: the backend for {scheme(location)}:// is not installed ({hint})",
        display(location),
    )


# --- filesystems ------------------------------------------------------------------------------

_FILESYSTEMS: dict[tuple[Any, ...], Any] = {}
_FILESYSTEMS_PID = os.getpid()
_FILESYSTEMS_LOCK = threading.Lock()
#: Variables that choose an endpoint or a credential: a change (a test, a re-configured
#: process) gets a fresh filesystem; their values are hashed, never kept.
_BACKEND_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
)


def _filesystem(protocol: str, timeout: float) -> Any:
    """One fsspec filesystem per (protocol, options) per process, reused.

    Created with ``skip_instance_cache`` so its settings are ours alone, and dropped after a
    fork: an s3fs/aiobotocore client made before a Celery prefork worker forked belongs to the
    parent's event loop (fsspec refuses it in the child), so the child makes its own.
    """
    global _FILESYSTEMS_PID
    fingerprint = hashlib.sha256(
        "\0".join(os.environ.get(v, "") for v in _BACKEND_ENV).encode()
    ).hexdigest()
    key = (protocol, timeout, fingerprint)
    with _FILESYSTEMS_LOCK:
        if os.getpid() != _FILESYSTEMS_PID:
            _FILESYSTEMS.clear()
            _FILESYSTEMS_PID = os.getpid()
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            fs = _new_filesystem(protocol, timeout)
            _FILESYSTEMS[key] = fs
        return fs


def _new_filesystem(protocol: str, timeout: float) -> Any:
    import fsspec

    options: dict[str, Any] = {"skip_instance_cache": True}
    if protocol in ("s3", "s3a"):
        # One attempt per call in botocore and s3fs: the retries are ours (_call), so
        # AGENTIC_IQA_STORAGE_ATTEMPTS is the number of requests, not a product of three loops.
        options["config_kwargs"] = {
            "retries": {"total_max_attempts": 1},
            "connect_timeout": timeout,
            "read_timeout": timeout,
        }
    elif protocol in ("http", "https"):
        import aiohttp

        options["client_kwargs"] = {"timeout": aiohttp.ClientTimeout(total=timeout)}
    fs = fsspec.filesystem(protocol, **options)
    if protocol in ("s3", "s3a"):
        fs.retries = 1
    return fs


def forget_filesystems() -> None:
    """Drop the filesystems made so far (a changed credential in a long-lived process), and
    the digests seen lately."""
    with _FILESYSTEMS_LOCK:
        _FILESYSTEMS.clear()
    _SEEN.clear()


def _remote(location: str) -> tuple[Any, str]:
    """The filesystem for a remote URL and the path it takes."""
    protocol = _check_url(location)
    try:
        fs = _filesystem(protocol, RetryPolicy.from_env().timeout)
    except ImportError:
        raise _missing_backend(location) from None
    except ValueError:
        raise StorageMisconfigured(
            f"{display(location)}: no fsspec backend for {protocol}://", display(location)
        ) from None
    return fs, location


# --- the gate ---------------------------------------------------------------------------------


def _admit(location: str, *, redirected_from: str | None = None) -> None:
    """Every read of a location starts here: the reading in force (:mod:`.access`) says whether
    it may be read, before any request (:class:`LocationRefused` if not)."""
    try:
        access.current().admit(location, redirected_from=redirected_from)
    except access.AddressRefused as refused:  # a name resolved while judging it
        raise LocationRefused(
            f"{display(location)}: {refused.strerror}", display(location)
        ) from None


def _too_large(location: str, size: int, cap: int, *, declared: bool) -> ObjectTooLarge:
    shown = display(location)
    what = f"is {size} bytes" if declared else f"sent more than {cap} bytes"
    return ObjectTooLarge(
        f"{shown} {what}, above the cap of {cap} bytes per object "
        "(AGENTIC_IQA_MAX_OBJECT_BYTES); nothing of it was kept",
        shown,
    )


# --- HTTP --------------------------------------------------------------------------------------


def _http(location: str, method: str, headers: Mapping[str, str] | None = None) -> Any:
    """One HTTP exchange for ``location`` (already admitted): redirects followed only where the
    gate admits their target, each request on the pool its host may use, within the object's
    deadline; 4xx and 5xx raised as the backends' errors are (:func:`_classify`)."""
    try:
        from . import web
    except ImportError:
        raise _missing_backend(location) from None

    scope = access.current()
    cap = max_object_bytes()
    url, origin = location, None
    for _ in range(MAX_REDIRECTS + 1):
        if origin is not None:
            _admit(url, redirected_from=origin)
        strict = not scope.policy.exempt(url, redirected_from=origin)

        def exchange(target: str = url, strict: bool = strict) -> Any:
            try:
                return web.request(
                    target,
                    method,
                    strict=strict,
                    timeout=_request_timeout(),
                    cap=cap,
                    headers=headers,
                )
            except web.BodyTooLarge as large:
                raise _too_large(location, large.size, cap, declared=large.declared) from None

        reply = _call(location, exchange)
        target = reply.headers.get("location")
        if reply.status not in _REDIRECTS or not target:
            return reply
        origin, url = url, urljoin(url, target)
    raise StorageError(
        f"{display(location)}: more than {MAX_REDIRECTS} redirects", display(location)
    )


def _http_digest(headers: Mapping[str, str]) -> str | None:
    etag = headers.get("etag", "").strip()
    return "etag:" + etag.strip('"') if etag else None


def _fetch_http(
    location: str, expected: str | None, cache: ObjectCache | None
) -> tuple[bytes, str]:
    """One GET, conditional on the version cached here (``If-None-Match``: "304 Not
    Modified" and no body when it is current); the digest recorded at submit compared with
    the response's own ETag, or with the bytes' sha256 where a checksum was recorded."""
    known = (
        expected
        if expected is not None and expected.startswith("etag:")
        else (cache.latest(location) if cache is not None else None)
    )
    cached = cache.get(location, known, count=False) if cache is not None and known else None
    headers = (
        {"If-None-Match": f'"{known.partition(":")[2]}"'} if cached is not None and known else {}
    )
    reply = _http(location, "GET", headers)
    if reply.status == 304 and cached is not None:
        data, digest = cached, known
    elif reply.status == 200 and reply.body is not None:
        data, digest = reply.body, _http_digest(reply.headers)
        if cache is not None and digest is not None:
            cache.put(location, digest, data)
    else:
        raise StorageError(
            f"cannot read {display(location)}: HTTP {reply.status}", display(location)
        )
    if cache is not None and digest is not None:
        cache.counted(hit=reply.status == 304)
        _remember(ObjectStat(location, len(data), digest))
    content = sha256_digest(data)
    _check_expected(location, expected, digest, content)
    return data, content


# --- stat and read ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectStat:
    """What a HEAD says: ``digest`` is ``etag:<value>`` or ``version:<id>`` where the store gives
    one (it changes when the object does), else None (a local file: hash its bytes)."""

    location: str
    size: int | None
    digest: str | None


def stat(location: str, *, fresh: bool = False) -> ObjectStat:
    """Size and store digest of ``location`` without reading it.

    ``fresh``: a digest this process saw within :func:`fresh_seconds` will do (no request; the
    size is then unknown).  Raises :class:`ObjectMissing`, :class:`StorageAccessDenied` (stops
    the job), :class:`StorageUnavailable` after retried throttling or timeouts."""
    _admit(location)
    if fresh and (recent := _recent_digest(location)) is not None:
        return ObjectStat(location, None, recent)
    path = _local_path(location)
    if path is not None:
        try:
            result = os.stat(path)
        except FileNotFoundError:
            raise ObjectMissing(f"file {location} not found", location) from None
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot read {location}: {_os_reason(exc)}", location) from None
        if not os.path.isfile(path):
            raise ObjectMissing(f"{location} is not a file", location)
        return ObjectStat(location, result.st_size, None)
    with _deadline():
        if scheme(location) in access.WEB_SCHEMES:
            reply = _http(location, "HEAD")
            length = reply.headers.get("content-length", "").strip()
            info: dict[str, Any] = {
                "size": int(length) if length.isdigit() else None,
                "ETag": reply.headers.get("etag"),
            }
        else:
            fs, target = _remote(location)

            def head() -> dict[str, Any]:
                fs.invalidate_cache(target)
                return fs.info(target)

            info = _call(location, head)
    if info.get("type") == "directory":
        raise ObjectMissing(
            f"object {display(location)} not found (a folder or prefix, not an object)",
            display(location),
        )
    size = info.get("size")
    cap = max_object_bytes()
    if size is not None and int(size) > cap:
        raise _too_large(location, int(size), cap, declared=True)
    found = ObjectStat(location, int(size) if size is not None else None, _store_digest(info))
    _remember(found)
    return found


#: Store digests this process saw lately, by location: a cached copy of that version is served
#: without another HEAD for :func:`fresh_seconds` (a step reads its image several times: the
#: planner's check, each tool, the VLM's copy).
_SEEN: dict[str, tuple[float, str]] = {}
_SEEN_LIMIT = 4096


def fresh_seconds() -> float:
    """How long a store digest seen here is trusted for a cache hit
    (``AGENTIC_IQA_STORAGE_FRESH_SECONDS``, default 60; 0 asks the store every time)."""
    try:
        return max(0.0, float(os.environ.get("AGENTIC_IQA_STORAGE_FRESH_SECONDS", "60")))
    except ValueError:
        return 60.0


def _remember(found: ObjectStat) -> None:
    if found.digest is None:
        return
    if len(_SEEN) >= _SEEN_LIMIT:
        _SEEN.clear()
    _SEEN[found.location] = (time.monotonic(), found.digest)


def _recent_digest(location: str) -> str | None:
    seen = _SEEN.get(location)
    if seen is None or time.monotonic() - seen[0] > fresh_seconds():
        return None
    return seen[1]


def _store_digest(info: dict[str, Any]) -> str | None:
    """``etag:`` (quotes dropped) or ``version:`` from a backend's info, whatever it calls them."""
    for field in ("ETag", "etag", "Etag"):
        value = info.get(field)
        if value:
            return "etag:" + str(value).strip('"')
    for field in ("VersionId", "version_id", "generation"):
        value = info.get(field)
        if value:
            return f"version:{value}"
    return None


def read(location: str) -> bytes:
    """The bytes at ``location``, with the error rules of :func:`stat`; a local path is read as
    a file, with no fsspec in between.  An object above :func:`max_object_bytes` is refused."""
    _admit(location)
    path = _local_path(location)
    if path is not None:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            raise ObjectMissing(f"file {location} not found", location) from None
        except IsADirectoryError:
            raise ObjectMissing(f"{location} is not a file", location) from None
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot read {location}: {_os_reason(exc)}", location) from None
    with _deadline():
        if scheme(location) in ("s3", "s3a"):
            return _s3_get(location, {})
        if scheme(location) in access.WEB_SCHEMES:
            reply = _http(location, "GET")
            if reply.body is None:
                raise StorageError(
                    f"cannot read {display(location)}: HTTP {reply.status}", display(location)
                )
            return reply.body
        fs, target = _remote(location)
        return _call(location, lambda: _read_capped(fs, target, location))


def _read_capped(fs: Any, target: str, location: str) -> bytes:
    """An object read through fsspec in blocks, given up once it passes the cap."""
    cap = max_object_bytes()
    chunks: list[bytes] = []
    total = 0
    with fs.open(target, "rb") as handle:
        size = getattr(handle, "size", None)
        if isinstance(size, int) and size > cap:
            raise _too_large(location, size, cap, declared=True)
        while chunk := handle.read(1 << 20):
            total += len(chunk)
            if total > cap:
                raise _too_large(location, total, cap, declared=False)
            chunks.append(chunk)
    return b"".join(chunks)


def _os_reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or type(
        exc
    ).__name__


def _read_matching(location: str, digest: str | None) -> bytes:
    """The bytes of exactly the version ``digest`` names, where the store can promise it (S3:
    ``If-Match`` on the ETag, ``VersionId``); raises :class:`_Changed` when it no longer is."""
    if scheme(location) not in ("s3", "s3a") or digest is None:
        return read(location)
    return _s3_get(location, _s3_condition(digest, header="IfMatch"))


def _s3_get(location: str, condition: dict[str, str]) -> bytes:
    """One GET of an S3 object (s3fs's ``cat_file`` would HEAD it first for its size)."""
    data, _ = _s3_get_versioned(location, condition)
    return data  # type: ignore[return-value]


def _s3_get_versioned(location: str, condition: dict[str, str]) -> tuple[bytes | None, str | None]:
    """One GET of an S3 object: its bytes and the store digest of exactly those bytes (the
    response's own ETag or version id), or ``(None, None)`` when an ``IfNoneMatch`` in
    ``condition`` held (HTTP 304: the copy the caller has is current).  The body is refused
    from its ``Content-Length`` above the cap, else counted as it streams, and the whole
    request ends within the object's deadline."""
    fs, target = _remote(location)
    bucket, key, _ = fs.split_path(target)
    cap = max_object_bytes()

    async def get() -> tuple[bytes | None, str | None]:
        try:
            response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **condition)
        except Exception as exc:
            if _not_modified(exc):
                return None, None
            raise
        body = response["Body"]
        try:
            size = response.get("ContentLength")
            if isinstance(size, int) and size > cap:
                raise _too_large(location, size, cap, declared=True)
            chunks: list[bytes] = []
            total = 0
            while chunk := await body.read(1 << 20):
                total += len(chunk)
                if total > cap:
                    raise _too_large(location, total, cap, declared=False)
                chunks.append(chunk)
            return b"".join(chunks), _store_digest(response)
        finally:
            body.close()

    from fsspec.asyn import sync

    with _deadline():  # botocore's read timeout bounds each attempt; the deadline, them all
        return _call(location, lambda: sync(fs.loop, get))


def _not_modified(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        found = _code_and_status(seen)
        if found is not None:
            return found[1] == 304 or found[0] in ("304", "NotModified")
        seen = seen.__cause__ or seen.__context__
    return False


def _s3_condition(digest: str | None, *, header: str) -> dict[str, str]:
    """``IfMatch`` / ``IfNoneMatch`` (``header``) on an ``etag:`` digest, ``VersionId`` on a
    ``version:`` one (only for ``IfMatch``: a version id names exactly one version)."""
    if digest is None:
        return {}
    kind, _, value = digest.partition(":")
    if kind == "etag":
        return {header: value if value.startswith("W/") else f'"{value}"'}
    if kind == "version" and header == "IfMatch":
        return {"VersionId": value}
    return {}


# --- outputs --------------------------------------------------------------------------------


def upload(source: str | os.PathLike[str], location: str) -> None:
    """Put the local file ``source`` at the URL ``location`` (one object, replaced whole: a
    reader sees the old object or the new one), with the retry and error rules of reads."""
    _admit(location)
    fs, target = _remote(location)
    _call(location, lambda: fs.put_file(os.fspath(source), target))


@contextmanager
def output_file(location: str | os.PathLike[str]) -> Iterator[Path]:
    """Where to write an output meant for ``location``: the path itself on this machine; for
    a store's URL a temporary file, uploaded when the block ends without an error (so a
    report or an export lands where the user asked, even from a machine whose disk no one
    else sees)."""
    text = os.fspath(location)
    local = _local_path(text)
    if local is not None:
        yield Path(local)
        return
    _admit(text)
    _remote(text)  # an unusable URL fails before anything is computed
    with tempfile.TemporaryDirectory(prefix="agentic-iqa-out-") as scratch:
        staged = Path(scratch) / (PurePosixPath(urlsplit(text).path).name or "output")
        yield staged
        upload(staged, text)


@contextmanager
def output_folder(location: str | os.PathLike[str]) -> Iterator[Path]:
    """:func:`output_file` for a folder: each file written under it is uploaded under the URL
    ``location`` (``--figures s3://bucket/paper/``)."""
    text = os.fspath(location)
    local = _local_path(text)
    if local is not None:
        yield Path(local)
        return
    _admit(text)
    _remote(text)
    with tempfile.TemporaryDirectory(prefix="agentic-iqa-out-") as scratch:
        yield Path(scratch)
        for path in sorted(Path(scratch).rglob("*")):
            if path.is_file():
                upload(path, join_under(text, path.relative_to(scratch).as_posix()))


# --- cache and fetch --------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``AGENTIC_IQA_OBJECT_CACHE``, else ``$XDG_CACHE_HOME`` or ``~/.cache`` (this process's own
    ``HOME``), then ``agentic-iqa/objects``."""
    configured = os.environ.get("AGENTIC_IQA_OBJECT_CACHE", "").strip()
    if configured:
        return Path(configured).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentic-iqa" / "objects"


def default_cache_bytes() -> int:
    raw = os.environ.get("AGENTIC_IQA_OBJECT_CACHE_BYTES", "").strip()
    try:
        return parse_bytes(raw) if raw else DEFAULT_CACHE_BYTES
    except ValueError as exc:
        raise StorageMisconfigured(f"AGENTIC_IQA_OBJECT_CACHE_BYTES: {exc}") from None


class ObjectCache:
    """Remote objects kept on local disk so each worker downloads each one once.

    An entry's name is a hash of (location, store digest): an ETag identifies an object's
    bytes only together with where it lives (two HTTP servers may both say ``"5f3c-1a"``), and
    a changed object gets a new ETag, so a stale entry is never served, only evicted.  Several
    processes share the folder safely: an entry is written to a temporary file and renamed
    into place, a read bumps its time, and eviction (least recently used first, once the total
    passes ``max_bytes``) tolerates files another process removed.  ``hits`` and ``misses``
    count this object's look-ups.
    """

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_bytes = max_bytes if max_bytes is not None else default_cache_bytes()
        self.hits = 0
        self.misses = 0
        self._total: int | None = None
        self._lock = threading.Lock()

    @staticmethod
    def key(location: str, digest: str) -> str:
        return hashlib.sha256(f"{location}\n{digest}".encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def get(self, location: str, digest: str, *, count: bool = True) -> bytes | None:
        """The cached bytes of this version of the object, or None (counted, unless ``count``
        is False: the caller counts once it knows whether the copy was used)."""
        path = self._path(self.key(location, digest))
        try:
            data = path.read_bytes()
            os.utime(path)
        except OSError:
            data = None
        if count:
            self.counted(hit=data is not None)
        return data

    def counted(self, *, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def _latest_path(self, location: str) -> Path:
        key = hashlib.sha256(f"{location}\nlatest".encode()).hexdigest()
        return self._path(key).with_suffix(".latest")

    def latest(self, location: str) -> str | None:
        """The store digest of the version of ``location`` cached last (any process), so a
        worker can ask the store "has it changed?" and download only if it has."""
        try:
            return self._latest_path(location).read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def put(self, location: str, digest: str, data: bytes) -> None:
        """Keep ``data``; an object larger than the whole bound is not kept.  A full disk or a
        read-only folder costs only the cache, never the read."""
        if len(data) > self.max_bytes:
            return
        path = self._path(self.key(location, digest))
        try:
            self._write(path, data)
            self._write(self._latest_path(location), digest.encode())
        except OSError:
            return
        with self._lock:
            if self._total is not None:
                self._total += len(data)
        if self._total is None or self._total > self.max_bytes:
            self.evict()

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        """Written whole or not at all, whatever another process reads meanwhile."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def evict(self) -> None:
        """Remove least recently used entries until the folder is within ``max_bytes``, and
        temporary files a killed process left behind (older than an hour)."""
        entries: list[tuple[float, int, Path]] = []
        now = time.time()
        for path in self.directory.glob("*/*"):
            try:
                info = path.stat()
            except OSError:
                continue
            if path.name.startswith(".tmp-"):
                if now - info.st_mtime > 3600:
                    path.unlink(missing_ok=True)
                continue
            entries.append((info.st_mtime, info.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries, key=lambda entry: entry[0]):
            if total <= self.max_bytes:
                break
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                continue
            total -= size
        with self._lock:
            self._total = total


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fetch(
    location: str, *, expected: str | None = None, cache: ObjectCache | None = None
) -> tuple[bytes, str]:
    """The bytes at ``location`` and their ``sha256:`` digest (computed on the bytes, so a
    remote object and a local copy compare equal).

    For a URL: one HEAD gives the store digest, the cache is asked for that version, and only a
    miss reads the object (on S3 conditionally on the same ETag, so the bytes cached are the
    version stated).  ``expected``, the digest recorded at submit (a store digest or a
    ``sha256:``), raises :class:`ObjectChanged` when the object is no longer that one; without
    it, the digest the reading in force recorded for ``location`` (a worker's item) is used.
    """
    _admit(location)
    if expected is None:
        expected = access.expected_digest(location)
    with _deadline():
        return _fetch(location, expected, cache)


def _fetch(location: str, expected: str | None, cache: ObjectCache | None) -> tuple[bytes, str]:
    data: bytes | None
    if _local_path(location) is not None:
        data = read(location)
        digest = sha256_digest(data)
        _check_expected(location, expected, None, digest)
        return data, digest
    recent = _recent_digest(location)
    scope = access.current()
    if (
        recent is not None
        and expected is not None
        and not expected.startswith("sha256:")
        and (expected != recent or location not in scope.verified)
    ):
        recent = None  # the store says, once per reading, whether it is still that version
    if cache is not None and recent is not None:  # seen moments ago: no HEAD
        data = cache.get(location, recent)
        if data is None and scheme(location) in ("s3", "s3a"):
            try:  # a GET of exactly that version, or _Changed
                data = _read_matching(location, recent)
            except _Changed:
                data = None
            else:
                cache.put(location, recent, data)
        if data is not None:
            content = sha256_digest(data)
            _check_expected(location, expected, recent, content)
            return data, content
    if cache is not None and scheme(location) in ("s3", "s3a"):
        found = _fetch_s3(location, expected, cache)
    elif scheme(location) in access.WEB_SCHEMES:
        found = _fetch_http(location, expected, cache)
    else:
        found = _fetch_generic(location, expected, cache, recent)
    if expected is not None:
        scope.verified.add(location)
    return found


def _fetch_generic(
    location: str, expected: str | None, cache: ObjectCache | None, recent: str | None
) -> tuple[bytes, str]:
    """gs://, az:// and S3 without a cache: a HEAD for the store digest, then the bytes of
    that version (checked again after the read where the store cannot promise it)."""
    for _ in range(3):
        info = stat(location)
        _check_expected(location, expected, info.digest, None)
        if cache is not None and info.digest is not None and info.digest != recent:
            data = cache.get(location, info.digest)
            if data is not None:
                digest = sha256_digest(data)
                _check_expected(location, expected, info.digest, digest)
                return data, digest
        try:
            data = _read_matching(location, info.digest)
        except _Changed:
            continue
        if (
            info.digest is not None
            and scheme(location) not in ("s3", "s3a")
            and stat(location).digest != info.digest
        ):
            continue
        if cache is not None and info.digest is not None:
            cache.put(location, info.digest, data)
        digest = sha256_digest(data)
        _check_expected(location, expected, info.digest, digest)
        return data, digest
    raise StorageUnavailable(
        f"{display(location)} kept changing while it was read (3 tries)", display(location)
    )


def _fetch_s3(location: str, expected: str | None, cache: ObjectCache) -> tuple[bytes, str]:
    """One GET, conditional both ways: ``If-Match`` the version recorded at submit (``expected``;
    HTTP 412 when it changed) and ``If-None-Match`` the version cached here (HTTP 304 and no
    body when it is current).  A HEAD before each read would double the requests, and a store
    that has thousands of objects to serve counts requests, not bytes."""
    recorded = expected if expected is not None and not expected.startswith("sha256:") else None
    known = recorded or cache.latest(location)
    cached = cache.get(location, known, count=False) if known is not None else None
    condition = _s3_condition(recorded, header="IfMatch")
    if cached is not None:
        condition.update(_s3_condition(known, header="IfNoneMatch"))
    try:
        data, digest = _s3_get_versioned(location, condition)
    except _Changed:
        shown = display(location)
        try:
            now = stat(location).digest or "no digest of that kind"
        except StorageError:
            now = "another version"
        raise ObjectChanged(
            f"the object {shown} changed since the job was submitted: recorded "
            f"{expected}, now {now}",
            shown,
        ) from None
    cache.counted(hit=data is None)
    if data is None:  # 304: the cached copy is the current version
        assert cached is not None
        data, digest = cached, known
    elif digest is not None:
        cache.put(location, digest, data)
    if digest is not None:
        _remember(ObjectStat(location, len(data), digest))
    content = sha256_digest(data)
    _check_expected(location, expected, digest, content)
    return data, content


def _check_expected(
    location: str, expected: str | None, store: str | None, content: str | None
) -> None:
    """Raise :class:`ObjectChanged` when ``expected`` is known not to hold.  A store digest is
    compared with the HEAD's, a ``sha256:`` with the bytes once they are read."""
    if expected is None:
        return
    if expected.startswith("sha256:"):
        if content is None or content == expected:
            return
        found = content
    elif store == expected:
        return
    else:
        found = store or "no digest of that kind"
    shown = display(location)
    raise ObjectChanged(
        f"the object {shown} changed since the job was submitted: recorded {expected}, now {found}",
        shown,
    )
