"""HTTP(S) requests for :mod:`.reads`: one request each, no redirect followed, bodies capped.

fsspec's HTTP filesystem follows redirects on its own, reads a body whole and connects to any
address a name resolves to, so a manifest's URL could lead a worker anywhere and fill its memory.
Here each call is one request: a redirect comes back to the caller (:mod:`.reads`), which puts
the new location through the same gate (:mod:`.access`) before asking for it; every connection
is made to an address :func:`.access.judge_addresses` accepted *when the name was resolved for
that connection* (a custom aiohttp resolver), so a name that resolves elsewhere the second time
(DNS rebinding) changes nothing (an address written as a literal is never resolved: the gate
judged it before the request); a body is counted while it streams and given up past its cap,
whatever the server declared.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from .access import judge_addresses

CHUNK = 1 << 16


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: the status, the headers (names in lower case), and the body when it was
    asked for and the status is a success (else None)."""

    status: int
    headers: Mapping[str, str]
    body: bytes | None = None


class StatusError(Exception):
    """An HTTP status that is not an answer with a body (4xx, 5xx), for :mod:`.reads` to
    classify as its backends' errors are."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class BodyTooLarge(Exception):
    """The body is, or says it is, above the cap: ``size`` the bytes declared or counted."""

    def __init__(self, size: int, cap: int, declared: bool) -> None:
        super().__init__(f"{size} bytes {'declared' if declared else 'or more'}, cap {cap}")
        self.size = size
        self.cap = cap
        self.declared = declared


def request(
    url: str,
    method: str,
    *,
    strict: bool,
    timeout: float,
    cap: int,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """``method`` (GET or HEAD) on ``url``: one request, finished (body included) within
    ``timeout`` seconds.  ``strict``: connect only to public addresses (a host nobody named);
    else any but a cloud metadata service's.  Each kind has its own connection pool, so a
    connection opened for a named private host is never reused for another URL."""
    loop = _loop()
    future = asyncio.run_coroutine_threadsafe(
        _request(url, method, strict, timeout, cap, dict(headers or {})), loop
    )
    try:
        return future.result(timeout + 5)
    except TimeoutError:
        future.cancel()
        raise


async def _request(
    url: str, method: str, strict: bool, timeout: float, cap: int, headers: dict[str, str]
) -> Reply:
    session = await _session(strict)
    limit = aiohttp.ClientTimeout(total=timeout)
    try:
        async with asyncio.timeout(timeout):
            async with session.request(
                method, url, headers=headers, allow_redirects=False, timeout=limit
            ) as response:
                found = {name.lower(): value for name, value in response.headers.items()}
                if response.status >= 400:
                    raise StatusError(response.status)
                if method == "HEAD" or response.status != 200:
                    return Reply(response.status, found)
                return Reply(response.status, found, await _body(response, found, cap))
    except aiohttp.ClientConnectorError as exc:
        refused = _refusal(exc)
        if refused is not None:
            raise refused from None
        raise


async def _body(response: Any, headers: Mapping[str, str], cap: int) -> bytes:
    """The body, refused from its ``Content-Length`` when that is above ``cap``, else counted
    as it arrives (a server that declares less, or nothing, is cut off at the cap)."""
    declared = headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge(int(declared), cap, declared=True)
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_chunked(CHUNK):
        total += len(chunk)
        if total > cap:
            raise BodyTooLarge(total, cap, declared=False)
        chunks.append(chunk)
    return b"".join(chunks)


def _refusal(exc: BaseException) -> OSError | None:
    """The address refusal a resolver raised, from under aiohttp's connection error."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        if getattr(seen, "refused_address", False):
            return seen  # type: ignore[return-value]
        seen = getattr(seen, "os_error", None) or seen.__cause__
    return None


# --- one event loop and two connection pools per process ---------------------------------

_STATE: dict[str, Any] = {"pid": None, "loop": None, "sessions": {}}
_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for HTTP, in a daemon thread; a forked child starts its own
    (the parent's loop and sockets are not the child's)."""
    with _LOCK:
        if _STATE["pid"] != os.getpid() or _STATE["loop"] is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="iqa-http", daemon=True).start()
            if _STATE["pid"] is None:
                atexit.register(_close)
            _STATE.update(pid=os.getpid(), loop=loop, sessions={})
        return _STATE["loop"]


def _close() -> None:
    """Close this process's pools at exit (their sockets, without aiohttp's warnings)."""
    loop, sessions = _STATE["loop"], _STATE["sessions"]
    if loop is None or _STATE["pid"] != os.getpid() or not sessions:
        return

    async def close() -> None:
        for session in list(sessions.values()):
            await session.close()

    try:
        asyncio.run_coroutine_threadsafe(close(), loop).result(5)
    except Exception:  # exiting anyway
        return


async def _session(strict: bool) -> aiohttp.ClientSession:
    """The pool for ``strict`` (created on first use, in the loop, as aiohttp requires); no
    proxy from the environment, no cookies kept between unrelated URLs."""
    sessions: dict[bool, aiohttp.ClientSession] = _STATE["sessions"]
    session = sessions.get(strict)
    if session is None or session.closed:
        connector = aiohttp.TCPConnector(resolver=_CheckedResolver(strict), ttl_dns_cache=10)
        session = aiohttp.ClientSession(
            connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
        )
        sessions[strict] = session
    return session


class _CheckedResolver(AbstractResolver):
    """aiohttp's threaded resolver, whose answers pass :func:`.access.judge_addresses` before
    any connection is made to them."""

    def __init__(self, strict: bool) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self.strict = strict

    async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[ResolveResult]:
        import socket

        results = await self._inner.resolve(host, port, family or socket.AF_UNSPEC)
        judge_addresses(host, [result["host"] for result in results], exempt=not self.strict)
        return results

    async def close(self) -> None:
        await self._inner.close()
