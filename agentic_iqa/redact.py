"""Credentials never leave the process: redaction of URLs and key values in any text.

Errors, logs, stored rows and reports may quote a URL the user configured
(``http://user:KEY@host/v1``, ``redis://:password@host``) or an SDK message that echoes a key.
:func:`redact` is applied wherever text leaves (the database's error columns, log records, CLI
output, reports), so a credential never needs to be remembered as "sensitive" at the source.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import threading
from typing import overload

MASK = "***"

#: ``scheme://user:password@`` or ``scheme://token@``: everything between ``//`` and ``@``.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")
#: A URL's query string (``?key=...&x=...``), whatever its parameters are called: masked whole.
_URL_QUERY = re.compile(
    r"(?P<url>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s?#'\"<>]*)\?(?P<query>[^\s#'\"<>]+)"
)
#: ``?key=...``, ``&sig=...`` in a request path or URL an error echoes, whatever the name: the
#: value is masked, the name kept (it tells which parameter was wrong).
_QUERY_PARAM = re.compile(r"(?P<name>[?&][A-Za-z0-9_.\-\[\]%]+=)(?P<value>[^&\s'\"<>#,;)}\]]+)")
#: ``api_key=...``, ``password=...`` outside a query string (DSNs, keyword dumps).
_SECRET_PARAM = re.compile(
    r"(?P<name>\b(?:api[_-]?key|access[_-]?token|token|password|passwd|secret|sig|signature)=)"
    r"(?P<value>[^&\s'\"<>]+)",
    re.IGNORECASE,
)
#: An ``Authorization``/``Proxy-Authorization`` header as a server or SDK echoes it, in any
#: quoting (``Authorization: Basic xyz``, ``'authorization': 'Token xyz'``, ``authorization=``):
#: whatever scheme, everything up to the end of the quoted value or line.
_AUTHORIZATION = re.compile(
    r"(?P<name>\b(?:proxy-)?authorization\\?['\"]?\s*[:=]\s*\\?['\"]?)"
    r"(?:(?P<scheme>[A-Za-z][A-Za-z0-9\-]*)\s+)?(?P<value>[^'\"\r\n\\]+)",
    re.IGNORECASE,
)
#: ``Authorization: Bearer xyz`` / ``x-api-key: xyz`` as SDKs sometimes print them.
_AUTH_HEADER = re.compile(
    r"(?P<name>\b(?:bearer|x-api-key:?)\s+)(?P<value>[A-Za-z0-9._\-]{8,})", re.IGNORECASE
)
#: ``Digest username="u", response="..."``: every parameter masked (they hold quotes).
_DIGEST = re.compile(
    r"(?P<name>\bdigest\s+)(?P<value>(?:[A-Za-z\-]+=(?:\"[^\"\r\n]*\"|[^,\s'\"]+)"
    r"[ \t]*,?[ \t]*)+)",
    re.IGNORECASE,
)
#: ``Basic <base64>`` with no header name in front: masked when it decodes to ``user:password``.
_BASIC = re.compile(r"(?P<name>\bbasic\s+)(?P<value>[A-Za-z0-9+/]{4,}={0,2})", re.IGNORECASE)
#: Environment variables whose values are secrets wherever they appear.
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
#: Values shorter than this are not searched for (a 3-letter "key" would mask common words).
_MIN_SECRET_LENGTH = 6


_SEEN: tuple[dict[object, object], list[str]] | None = None
#: Credentials this process was configured with outside key variables (a base URL's query
#: values and password), with their base64 forms: masked wherever they appear.
_REGISTERED: set[str] = set()
_REGISTERED_LOCK = threading.Lock()


def register_secret(value: str | None) -> None:
    """Mask ``value`` (and its base64 form, as a ``Basic`` header carries it) from now on.

    For credentials that live in configuration rather than in a key variable: the query
    values and password of a base URL, read when a client is created.
    """
    if not value or len(value) < _MIN_SECRET_LENGTH:
        return
    encoded = base64.b64encode(value.encode()).decode().rstrip("=")
    with _REGISTERED_LOCK:
        _REGISTERED.update({value, encoded} if len(encoded) >= _MIN_SECRET_LENGTH else {value})


def secret_values() -> list[str]:
    """Values of configured key variables (``OPENAI_API_KEY``, ``AGENTIC_IQA_*_API_KEY``, ...),
    and the contents of the files their ``_FILE`` forms name (``OPENAI_API_KEY_FILE``,
    ``AGENTIC_IQA_REDIS_PASSWORD_FILE``).

    Read at call time: a key set after import (tests, a worker's environment) is covered too.
    The environment is compared with the last one seen as a raw dict (C speed) rather than
    decoded and searched again: every stored row and log line passes through here.
    """
    global _SEEN
    raw = getattr(os.environ, "_data", None)  # CPython's undecoded copy of the environment
    if raw is not None and _SEEN is not None and _SEEN[0] == raw:
        return _SEEN[1]
    found = {
        value
        for name, value in os.environ.items()
        if _SECRET_ENV.search(name) and len(value) >= _MIN_SECRET_LENGTH
    }
    found.update(
        value
        for name, path in os.environ.items()
        if name.endswith("_FILE") and _SECRET_ENV.search(name[: -len("_FILE")])
        if len(value := _file_secret(path)) >= _MIN_SECRET_LENGTH
    )
    values = sorted(found, key=len, reverse=True)
    if raw is not None:
        _SEEN = (dict(raw), values)
    if not _REGISTERED:
        return values
    with _REGISTERED_LOCK:
        return sorted(set(values) | _REGISTERED, key=len, reverse=True)


def _file_secret(path: str) -> str:
    """The secret in the file a ``*_KEY_FILE`` or ``*_PASSWORD_FILE`` variable names ("" when
    it cannot be read: :mod:`iqa_tools.secret_env` says so where the value is used)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(64 * 1024).rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        return ""


@overload
def redact(text: str) -> str: ...
@overload
def redact(text: None) -> None: ...
def redact(text: str | None) -> str | None:
    """``text`` with URL credentials, secret query parameters and key values masked."""
    if not text:
        return text
    result = text
    # Each pattern only where the literal text it needs is present: every stored state and
    # step output passes through here, and the scans cost far more than these C-speed tests.
    if "://" in result and "@" in result:
        result = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", result)
    if "://" in result and "?" in result:  # by structure: any URL's query, whatever its names
        result = _URL_QUERY.sub(lambda m: f"{m['url']}?{MASK}", result)
    if "=" in result:
        if "?" in result:  # an echoed request path: /v1/chat?key=... has no scheme in front
            result = _QUERY_PARAM.sub(lambda m: f"{m['name']}{MASK}", result)
        result = _SECRET_PARAM.sub(lambda m: f"{m['name']}{MASK}", result)
    lowered = result.lower() if result.isascii() else None
    if lowered is None or "digest" in lowered:
        result = _DIGEST.sub(lambda m: f"{m['name']}{MASK}", result)
    if lowered is None or "authorization" in lowered:
        result = _AUTHORIZATION.sub(_mask_authorization, result)
    if lowered is None or "basic" in lowered:
        result = _BASIC.sub(_mask_basic, result)
    if _may_hold_auth_header(result):
        result = _AUTH_HEADER.sub(lambda m: f"{m['name']}{MASK}", result)
    for value in secret_values():
        result = result.replace(value, MASK)
    return result


#: A URL with a query string, found in any text (an export's cell, a stored location).
_URL_WITH_QUERY = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s?#'\"<>]*\?[^\s#'\"<>]+")
#: Query parameters that sign or authorise a URL: AWS (``X-Amz-Signature``, ``-Credential``,
#: ``-Security-Token``), Google (``X-Goog-Signature``, ``Signature``), Azure SAS (``sig``),
#: CloudFront (``Signature``, ``Policy``, ``Key-Pair-Id``), and ``token=``, ``key=``, ``code=``.
_SIGNING_PARAMETER = re.compile(
    r"sig|token|secret|pass|credential|key|auth|policy|^code$", re.IGNORECASE
)


def redact_url_secrets(text: str) -> str:
    """``text`` with every URL's signing parameters masked (``X-Amz-Signature=***``), the rest
    of the query kept (an expiry, a version id tell the reader which object it was), and any
    user or password masked.  For exports: the stored location keeps what it needs to be read."""
    if "://" not in text:
        return text
    if "@" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    if "?" not in text:
        return text
    return _URL_WITH_QUERY.sub(_mask_signing, text)


def _mask_signing(match: re.Match[str]) -> str:
    url, _, query = match[0].partition("?")
    parts = []
    for part in query.split("&"):
        name, equals, value = part.partition("=")
        masked = equals and value and _SIGNING_PARAMETER.search(name.replace("%2D", "-"))
        parts.append(f"{name}={MASK}" if masked else part)
    return f"{url}?{'&'.join(parts)}"


def _mask_authorization(match: re.Match[str]) -> str:
    """The header's name and scheme kept, its credential masked (already masked: unchanged)."""
    scheme = f"{match['scheme']} " if match["scheme"] else ""
    return f"{match['name']}{scheme}{MASK}"


def _mask_basic(match: re.Match[str]) -> str:
    """``Basic <base64>`` masked when the base64 decodes to ``user:password``; prose such as
    "basic quality" is left alone."""
    try:
        decoded = base64.b64decode(match["value"] + "=" * (-len(match["value"]) % 4), validate=True)
    except (binascii.Error, ValueError):
        return match[0]
    return f"{match['name']}{MASK}" if b":" in decoded else match[0]


def _may_hold_auth_header(text: str) -> bool:
    """False only when :data:`_AUTH_HEADER` cannot match.  Non-ASCII text always says yes:
    the pattern's IGNORECASE also matches letters such as the dotless ``ı`` for ``i``, which
    ``str.lower`` would not bring to the ASCII words looked for."""
    if not text.isascii():
        return True
    lowered = text.lower()
    return "bearer" in lowered or "x-api-key" in lowered


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message (and the traceback) of every record.

    Attached to handlers (not loggers), so records from any library pass through it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is left for the handler to report
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(text)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add :class:`RedactingFilter` to every handler of ``logger`` (default: the root logger)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
