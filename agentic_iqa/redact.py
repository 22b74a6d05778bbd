"""Credentials never leave the process: redaction of URLs and key values in any text.

Errors, logs, stored rows and reports may quote a URL the user configured
(``http://user:KEY@host/v1``, ``redis://:password@host``) or an SDK message that echoes a key.
:func:`redact` is applied wherever text leaves (the database's error columns, log records, CLI
output, reports), so a credential never needs to be remembered as "sensitive" at the source.
"""

from __future__ import annotations

import logging
import os
import re

MASK = "***"

#: ``scheme://user:password@`` or ``scheme://token@``: everything between ``//`` and ``@``.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")
#: A URL's query string (``?key=...&x=...``), whatever its parameters are called: masked whole.
_URL_QUERY = re.compile(r"(?P<url>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s?#'\"<>]*)\?(?P<query>[^\s#'\"<>]+)")
#: ``?api_key=...``, ``&token=...``, ``password=...`` in query strings and DSNs.
_SECRET_PARAM = re.compile(
    r"(?P<name>\b(?:api[_-]?key|access[_-]?token|token|password|passwd|secret|sig|signature)=)"
    r"(?P<value>[^&\s'\"<>]+)",
    re.IGNORECASE,
)
#: ``Authorization: Bearer xyz`` / ``x-api-key: xyz`` as SDKs sometimes print them.
_AUTH_HEADER = re.compile(r"(?P<name>\b(?:bearer|x-api-key:?)\s+)(?P<value>[A-Za-z0-9._\-]{8,})",
                          re.IGNORECASE)
#: Environment variables whose values are secrets wherever they appear.
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
#: Values shorter than this are not searched for (a 3-letter "key" would mask common words).
_MIN_SECRET_LENGTH = 6


_SEEN: tuple[dict[object, object], list[str]] | None = None


def secret_values() -> list[str]:
    """Values of configured key variables (``OPENAI_API_KEY``, ``AGENTIC_IQA_*_API_KEY``, ...).

    Read at call time: a key set after import (tests, a worker's environment) is covered too.
    The environment is compared with the last one seen as a raw dict (C speed) rather than
    decoded and searched again: every stored row and log line passes through here.
    """
    global _SEEN
    raw = getattr(os.environ, "_data", None)  # CPython's undecoded copy of the environment
    if raw is not None and _SEEN is not None and _SEEN[0] == raw:
        return _SEEN[1]
    values = sorted({value for name, value in os.environ.items()
                     if _SECRET_ENV.search(name) and len(value) >= _MIN_SECRET_LENGTH},
                    key=len, reverse=True)
    if raw is not None:
        _SEEN = (dict(raw), values)
    return values


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
        result = _SECRET_PARAM.sub(lambda m: f"{m['name']}{MASK}", result)
    if _may_hold_auth_header(result):
        result = _AUTH_HEADER.sub(lambda m: f"{m['name']}{MASK}", result)
    for value in secret_values():
        result = result.replace(value, MASK)
    return result


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
