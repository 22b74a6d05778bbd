"""Fetch an object's bytes with their ``sha256:`` digest, from the cache where it is current.

:func:`fetch` is the read the tools and the VLM use: for a URL one HEAD (or one conditional GET)
gives the store digest, the :class:`.cache.ObjectCache` is asked for that version, and only a
miss reads the object.  The digest recorded at submit is checked against what is read, so a job
never scores an object that changed under it (:class:`ObjectChanged`).
"""

from __future__ import annotations

import hashlib

from ..errors import ObjectChanged, StorageError, StorageUnavailable
from . import access
from .access import admit
from .cache import ObjectCache
from .locations import display, local_path, scheme
from .reads import (
    ObjectStat,
    http_digest,
    http_exchange,
    read_local,
    read_matching,
    recent_digest,
    remember_digest,
    s3_condition,
    s3_get_versioned,
    short_digest,
    stat,
)
from .retry import ConditionFailed, object_deadline


def sha256_digest(data: bytes) -> str:
    """Return the ``sha256:`` digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fetch(
    location: str, *, expected: str | None = None, cache: ObjectCache | None = None
) -> tuple[bytes, str]:
    """Return the bytes at ``location`` and their ``sha256:`` digest (computed on the bytes, so a
    remote object and a local copy compare equal).

    For a URL: one HEAD gives the store digest, the cache is asked for that version, and only a
    miss reads the object (on S3 conditionally on the same ETag, so the bytes cached are the
    version stated).  ``expected``, the digest recorded at submit (a store digest or a
    ``sha256:``), raises :class:`ObjectChanged` when the object is no longer that one; without
    it, the digest the reading in force recorded for ``location`` (a worker's item) is used.
    """
    admit(location)
    if expected is None:
        expected = access.expected_digest(location)
    with object_deadline():
        return _fetch(location, expected, cache)


def _fetch(location: str, expected: str | None, cache: ObjectCache | None) -> tuple[bytes, str]:
    """Fetch ``location`` (already admitted) by the way its scheme allows."""
    data: bytes | None
    path = local_path(location)
    if path is not None:  # confined when opened, and the reading's digest checked there
        data, checked = read_local(path, location)
        digest = checked or sha256_digest(data)
        _check_expected(location, expected, None, digest)
        return data, digest
    recent = recent_digest(location)
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
            try:  # a GET of exactly that version, or ConditionFailed
                data = read_matching(location, recent)
            except ConditionFailed:
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
    """Fetch from gs://, az:// and S3 without a cache: a HEAD for the store digest, then the bytes
    of that version (checked again after the read where the store cannot promise it)."""
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
            data = read_matching(location, info.digest)
        except ConditionFailed:
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
    """Fetch from S3 in one GET, conditional both ways: ``If-Match`` the version recorded at submit
    (``expected``; HTTP 412 when it changed) and ``If-None-Match`` the version cached here (HTTP 304
    and no body when it is current).  A HEAD before each read would double the requests, and a store
    that has thousands of objects to serve counts requests, not bytes."""
    recorded = expected if expected is not None and not expected.startswith("sha256:") else None
    known = recorded or cache.latest(location)
    cached = cache.get(location, known, count=False) if known is not None else None
    condition = s3_condition(recorded, header="IfMatch")
    if cached is not None:
        condition.update(s3_condition(known, header="IfNoneMatch"))
    try:
        data, digest = s3_get_versioned(location, condition)
    except ConditionFailed:
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
    cache.count_lookup(hit=data is None)
    if data is None:  # 304: the cached copy is the current version
        assert cached is not None
        data, digest = cached, known
    elif digest is not None:
        cache.put(location, digest, data)
    if digest is not None:
        remember_digest(ObjectStat(location, len(data), digest))
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
        f"the object {shown} changed since the job was submitted: recorded "
        f"{short_digest(expected)}, now {short_digest(found)}",
        shown,
    )


def _fetch_http(
    location: str, expected: str | None, cache: ObjectCache | None
) -> tuple[bytes, str]:
    """Fetch over HTTP in one GET, conditional on the version cached here (``If-None-Match``: "304
    Not Modified" and no body when it is current); the digest recorded at submit compared with the
    response's own ETag, or with the bytes' sha256 where a checksum was recorded."""
    known = (
        expected
        if expected is not None and expected.startswith("etag:")
        else (cache.latest(location) if cache is not None else None)
    )
    cached = cache.get(location, known, count=False) if cache is not None and known else None
    headers = (
        {"If-None-Match": f'"{known.partition(":")[2]}"'} if cached is not None and known else {}
    )
    reply = http_exchange(location, "GET", headers)
    if reply.status == 304 and cached is not None:
        data, digest = cached, known
    elif reply.status == 200 and reply.body is not None:
        data, digest = reply.body, http_digest(reply.headers)
        if cache is not None and digest is not None:
            cache.put(location, digest, data)
    else:
        raise StorageError(
            f"cannot read {display(location)}: HTTP {reply.status}", display(location)
        )
    if cache is not None and digest is not None:
        cache.count_lookup(hit=reply.status == 304)
        remember_digest(ObjectStat(location, len(data), digest))
    content = sha256_digest(data)
    _check_expected(location, expected, digest, content)
    return data, content
