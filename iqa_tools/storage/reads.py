"""Read one object: its size and store digest (:func:`stat`), or its bytes (:func:`read`).

A local path is read as a file, with no fsspec in between; ``s3://``, ``gs://`` and ``az://``
go through one fsspec filesystem per backend and process; ``http(s)://`` goes through
:mod:`.web`, one request each, with each redirect put back through the gate (:func:`.access.admit`)
before it is followed.  Every request is retried and its failure typed by :mod:`.retry`, and an
object above the size cap is refused from its declared size, else counted while it streams.
The store digests seen lately are remembered, so a step that reads its image several times asks
the store once.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from ..errors import (
    ObjectChanged,
    ObjectMissing,
    ObjectTooLarge,
    StorageError,
    StorageMisconfigured,
)
from . import access
from .access import admit
from .locations import check_url, display, local_path, scheme
from .retry import (
    RetryPolicy,
    call_with_retries,
    is_not_modified,
    max_object_bytes,
    missing_backend_error,
    object_deadline,
    request_timeout,
)

#: Redirects followed (each through the gate) before an HTTP read gives up.
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


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
    """Return the fsspec filesystem for (protocol, options), one per process, reused.

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
    """Make a filesystem whose own retries are off and whose requests time out at ``timeout``."""
    import fsspec

    options: dict[str, Any] = {"skip_instance_cache": True}
    if protocol in ("s3", "s3a"):
        # One attempt per call in botocore and s3fs: the retries are ours (call_with_retries), so
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


def remote_filesystem(location: str) -> tuple[Any, str]:
    """Return the filesystem for a remote URL, and the path it takes."""
    protocol = check_url(location)
    try:
        fs = _filesystem(protocol, RetryPolicy.from_env().timeout)
    except ImportError:
        raise missing_backend_error(location) from None
    except ValueError:
        raise StorageMisconfigured(
            f"{display(location)}: no fsspec backend for {protocol}://", display(location)
        ) from None
    return fs, location


def _too_large(location: str, size: int, cap: int, *, declared: bool) -> ObjectTooLarge:
    """Return the error for an object above the cap, by its declared or its counted size."""
    shown = display(location)
    what = f"is {size} bytes" if declared else f"sent more than {cap} bytes"
    return ObjectTooLarge(
        f"{shown} {what}, above the cap of {cap} bytes per object "
        "(AGENTIC_IQA_MAX_OBJECT_BYTES); nothing of it was kept",
        shown,
    )


# --- HTTP --------------------------------------------------------------------------------------


def http_exchange(location: str, method: str, headers: Mapping[str, str] | None = None) -> Any:
    """Make one HTTP exchange for ``location`` (already admitted): redirects followed only where the
    gate admits their target, each request on the pool its host may use, within the object's
    deadline; 4xx and 5xx raised as the backends' errors are (:func:`_classify`)."""
    try:
        from . import web
    except ImportError:
        raise missing_backend_error(location) from None

    scope = access.current()
    cap = max_object_bytes()
    url, origin = location, None
    for _ in range(MAX_REDIRECTS + 1):
        if origin is not None:
            admit(url, redirected_from=origin)
        strict = not scope.policy.exempt(url, redirected_from=origin)

        def exchange(target: str = url, strict: bool = strict) -> Any:
            try:
                return web.request(
                    target,
                    method,
                    strict=strict,
                    timeout=request_timeout(),
                    cap=cap,
                    headers=headers,
                )
            except web.BodyTooLarge as large:
                raise _too_large(location, large.size, cap, declared=large.declared) from None

        reply = call_with_retries(location, exchange)
        target = reply.headers.get("location")
        if reply.status not in _REDIRECTS or not target:
            return reply
        origin, url = url, urljoin(url, target)
    raise StorageError(
        f"{display(location)}: more than {MAX_REDIRECTS} redirects", display(location)
    )


def http_digest(headers: Mapping[str, str]) -> str | None:
    """Return the ``etag:`` digest an HTTP response's headers give, or None."""
    etag = headers.get("etag", "").strip()
    return "etag:" + etag.strip('"') if etag else None


# --- stat and read ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectStat:
    """What a HEAD says: ``digest`` is ``etag:<value>`` or ``version:<id>`` where the store gives
    one (it changes when the object does), else None (a local file: hash its bytes)."""

    location: str
    size: int | None
    digest: str | None


def stat(location: str, *, fresh: bool = False) -> ObjectStat:
    """Return the size and store digest of ``location`` without reading it.

    ``fresh``: a digest this process saw within :func:`fresh_seconds` will do (no request; the
    size is then unknown).  Raises :class:`ObjectMissing`, :class:`StorageAccessDenied` (stops
    the job), :class:`StorageUnavailable` after retried throttling or timeouts."""
    admit(location)
    if fresh and (recent := recent_digest(location)) is not None:
        return ObjectStat(location, None, recent)
    path = local_path(location)
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
    with object_deadline():
        if scheme(location) in access.WEB_SCHEMES:
            reply = http_exchange(location, "HEAD")
            length = reply.headers.get("content-length", "").strip()
            info: dict[str, Any] = {
                "size": int(length) if length.isdigit() else None,
                "ETag": reply.headers.get("etag"),
            }
        else:
            fs, target = remote_filesystem(location)

            def head() -> dict[str, Any]:
                fs.invalidate_cache(target)
                return fs.info(target)

            info = call_with_retries(location, head)
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
    remember_digest(found)
    return found


#: Store digests this process saw lately, by location: a cached copy of that version is served
#: without another HEAD for :func:`fresh_seconds` (a step reads its image several times: the
#: planner's check, each tool, the VLM's copy).
_SEEN: dict[str, tuple[float, str]] = {}
_SEEN_LIMIT = 4096


def fresh_seconds() -> float:
    """Return how long a store digest seen here is trusted for a cache hit
    (``AGENTIC_IQA_STORAGE_FRESH_SECONDS``, default 60; 0 asks the store every time)."""
    try:
        return max(0.0, float(os.environ.get("AGENTIC_IQA_STORAGE_FRESH_SECONDS", "60")))
    except ValueError:
        return 60.0


def remember_digest(found: ObjectStat) -> None:
    """Remember the store digest ``found`` gives, for :func:`recent_digest`."""
    if found.digest is None:
        return
    if len(_SEEN) >= _SEEN_LIMIT:
        _SEEN.clear()
    _SEEN[found.location] = (time.monotonic(), found.digest)


def recent_digest(location: str) -> str | None:
    """Return the store digest of ``location`` seen within :func:`fresh_seconds`, or None."""
    seen = _SEEN.get(location)
    if seen is None or time.monotonic() - seen[0] > fresh_seconds():
        return None
    return seen[1]


def _store_digest(info: dict[str, Any]) -> str | None:
    """Return ``etag:`` (quotes dropped) or ``version:`` from a backend's info, whatever it
    calls them."""
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
    """Return the bytes at ``location``, with the error rules of :func:`stat`; a local path is read
    as a file, with no fsspec in between.  An object above :func:`max_object_bytes` is refused."""
    admit(location)
    path = local_path(location)
    if path is not None:
        return read_local(path, location)[0]
    with object_deadline():
        if scheme(location) in ("s3", "s3a"):
            return _s3_get(location, {})
        if scheme(location) in access.WEB_SCHEMES:
            reply = http_exchange(location, "GET")
            if reply.body is None:
                raise StorageError(
                    f"cannot read {display(location)}: HTTP {reply.status}", display(location)
                )
            return reply.body
        fs, target = remote_filesystem(location)
        return call_with_retries(location, lambda: _read_capped(fs, target, location))


def read_local(path: str, location: str | None = None) -> tuple[bytes, str | None]:
    """Return a local file's bytes, confined and checked when read, with their ``sha256:``
    digest where one was recorded at submit (else None: nothing hashed for nothing).

    The file is opened first, then the real path of what was opened (its descriptor's,
    :func:`opened_path`) is checked against ``--root`` of the reading in force, so a symlink
    swapped in after submit leads nowhere outside it (:meth:`.AccessPolicy.check_opened`), and
    only a regular file is read (never a FIFO or a device).  The bytes read are hashed and
    compared with the digest recorded at submit (:func:`.access.expected_digest`): a file that
    changed since is :class:`ObjectChanged`, never scored.  ``location``: the name messages
    use (a ``file://`` URL), and the key of the recorded digest.
    """
    shown = location or path
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise ObjectMissing(f"file {shown} not found", shown) from None
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read {shown}: {_os_reason(exc)}", shown) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat_module.S_ISDIR(mode):
            raise ObjectMissing(f"{shown} is not a file", shown)
        if not stat_module.S_ISREG(mode):
            raise StorageError(f"cannot read {shown}: not a regular file", shown)
        access.current().policy.check_opened(shown, opened_path(descriptor, path))
        with os.fdopen(descriptor, "rb", closefd=True) as handle:
            descriptor = -1
            data = handle.read()
    except OSError as exc:
        raise StorageError(f"cannot read {shown}: {_os_reason(exc)}", shown) from None
    finally:
        if descriptor >= 0:
            os.close(descriptor)
    expected = access.expected_digest(shown) or access.expected_digest(path)
    if expected is None or not expected.startswith("sha256:"):
        return data, None
    found = "sha256:" + hashlib.sha256(data).hexdigest()
    if found != expected:
        raise ObjectChanged(
            f"the file {shown} changed since the job was submitted: recorded "
            f"{short_digest(expected)}, now {short_digest(found)}; it was not scored",
            shown,
        )
    return data, found


def opened_path(descriptor: int, path: str) -> str:
    """Return the real path of the file open on ``descriptor``: Linux's ``/proc/self/fd``,
    macOS's ``F_GETPATH``; elsewhere ``path`` resolved (not race-free there)."""
    proc = f"/proc/self/fd/{descriptor}"
    if os.path.islink(proc):
        return os.path.realpath(proc)
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return os.path.realpath(path)
    getpath = getattr(fcntl, "F_GETPATH", None)
    if getpath is None:
        return os.path.realpath(path)
    raw = fcntl.fcntl(descriptor, getpath, bytes(1024))
    return os.fsdecode(raw.split(b"\0", 1)[0])


def short_digest(digest: str) -> str:
    """Return a digest as messages show it: a ``sha256:`` cut to 12 hex digits."""
    if digest.startswith("sha256:") and len(digest) > 19:
        return digest[:19] + "…"
    return digest


def _read_capped(fs: Any, target: str, location: str) -> bytes:
    """Read an object through fsspec in blocks, giving up once it passes the cap."""
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
    """Return the system's reason for ``exc``, else its type's name."""
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or type(
        exc
    ).__name__


def read_matching(location: str, digest: str | None) -> bytes:
    """Read exactly the version ``digest`` names, where the store can promise it (S3:
    ``If-Match`` on the ETag, ``VersionId``); raise :class:`ConditionFailed` when it no longer
    is."""
    if scheme(location) not in ("s3", "s3a") or digest is None:
        return read(location)
    return _s3_get(location, s3_condition(digest, header="IfMatch"))


def _s3_get(location: str, condition: dict[str, str]) -> bytes:
    """Get an S3 object in one GET (s3fs's ``cat_file`` would HEAD it first for its size)."""
    data, _ = s3_get_versioned(location, condition)
    return data  # type: ignore[return-value]


def s3_get_versioned(location: str, condition: dict[str, str]) -> tuple[bytes | None, str | None]:
    """Get an S3 object in one GET: its bytes and the store digest of exactly those bytes (the
    response's own ETag or version id), or ``(None, None)`` when an ``IfNoneMatch`` in
    ``condition`` held (HTTP 304: the copy the caller has is current).  The body is refused
    from its ``Content-Length`` above the cap, else counted as it streams, and the whole
    request ends within the object's deadline."""
    fs, target = remote_filesystem(location)
    bucket, key, _ = fs.split_path(target)
    cap = max_object_bytes()

    async def get() -> tuple[bytes | None, str | None]:
        try:
            response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **condition)
        except Exception as exc:
            if is_not_modified(exc):
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

    with object_deadline():  # botocore's read timeout bounds each attempt; the deadline, them all
        return call_with_retries(location, lambda: sync(fs.loop, get))


def s3_condition(digest: str | None, *, header: str) -> dict[str, str]:
    """Return ``IfMatch`` / ``IfNoneMatch`` (``header``) on an ``etag:`` digest, ``VersionId`` on a
    ``version:`` one (only for ``IfMatch``: a version id names exactly one version)."""
    if digest is None:
        return {}
    kind, _, value = digest.partition(":")
    if kind == "etag":
        return {header: value if value.startswith("W/") else f'"{value}"'}
    if kind == "version" and header == "IfMatch":
        return {"VersionId": value}
    return {}
