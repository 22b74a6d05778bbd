"""Infrastructure faults as one line: a database that does not answer, a full disk, a broker that
is down or refuses its credentials, a secret variable whose file cannot be read.

Any command can meet them, and a 500-line traceback of SQLAlchemy, psycopg or redis frames tells
a user nothing they can act on.  :class:`FaultCatchingGroup` wraps every command: such a fault
prints one redacted line saying what to do and exits 2; the traceback goes to a log file (or to
stderr with ``--debug``).  Anything else is left to propagate: a bug must stay visible.

Light on purpose: nothing here imports SQLAlchemy, redis or kombu; exceptions are recognised by
their module and their text.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
import traceback
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

#: Exit status of an infrastructure fault (as for a configuration that cannot work).
FAULT_EXIT = 2


def log_path() -> Path:
    """Return where the traceback of the last fault is written."""
    folder = os.environ.get("AGENTIC_IQA_LOG_DIR") or tempfile.gettempdir()
    return Path(folder) / f"agentic-iqa-error-{os.getuid() if hasattr(os, 'getuid') else 0}.log"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _module(exc: BaseException) -> str:
    return type(exc).__module__ or ""


#: SQLite's "disk I/O error" growing a WAL database's -shm file: no room left for it.
_SQLITE_IOERR_SHMSIZE = 4874


def disk_full(exc: BaseException) -> bool:
    """Return whether ``exc`` (or what it wraps) says a disk is full: ENOSPC, or SQLite's
    "database or disk is full" (or its failure to grow a -shm file)."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(getattr(link, "orig", None) or link).lower()
        if "disk is full" in text or "no space left on device" in text:
            return True
        if isinstance(link, sqlite3.OperationalError) and "full" in text:
            return True
        if getattr(link, "sqlite_errorcode", None) == _SQLITE_IOERR_SHMSIZE:  # "disk I/O error"
            return True
    return False


#: What brokers say when they refuse a user or password (redis, RabbitMQ).
_AUTH_WORDS = (
    "noauth",
    "wrongpass",
    "invalid password",
    "username-password",
    "authentication",
    "access_refused",
    "access refused",
    "not authorized",
)


def broker_refused_credentials(exc: BaseException) -> bool:
    """Return whether ``exc`` (or what it wraps) is a broker refusing its credentials."""
    for link in _chain(exc):
        text = str(link).lower()
        if "auth" in type(link).__name__.lower() or any(word in text for word in _AUTH_WORDS):
            return True
    return False


def describe(exc: BaseException) -> str | None:
    """Return one line saying what failed and what to do, or None when ``exc`` is no infrastructure
    fault."""
    from ..config import PipelineSettings
    from ..redact import redact

    def first_line(link: BaseException) -> str:
        text = str(getattr(link, "orig", None) or link).strip()
        return text.splitlines()[0][:200] if text else type(link).__name__

    if disk_full(exc):
        return (
            "the disk is full (writing the results database or a cache failed): free some "
            "space, then run the command again; a job it interrupted continues with "
            "`agentic-iqa eval resume`"
        )
    from iqa_tools.secret_env import SecretSettingError

    for link in _chain(exc):
        if isinstance(link, SecretSettingError):  # already one line naming what to fix
            return str(link)
        module, name = _module(link), type(link).__name__
        text = first_line(link)
        lowered = text.lower()
        if module.startswith(("redis", "kombu", "amqp", "celery")):
            try:
                broker = PipelineSettings.load().broker_url or "the broker"
            except Exception:  # the settings themselves are not at fault here
                broker = "the broker"
            if broker_refused_credentials(link):
                return (
                    f"the broker {redact(broker)} refused its credentials ({text}): fix the "
                    "user or password in AGENTIC_IQA_BROKER_URL"
                )
            return (
                f"the broker {redact(broker)} does not answer ({name}: {text}): start it, or "
                "check AGENTIC_IQA_BROKER_URL (unset it to run jobs in this process)"
            )
        if module.startswith(("sqlalchemy", "psycopg", "sqlite3")) and name in (
            "OperationalError",
            "InterfaceError",
            "DatabaseError",
            "ProgrammingError",
            "ConnectionTimeout",
            "TimeoutError",
        ):
            from ..db.engine import database_url  # SQLAlchemy is loaded: it raised this

            try:
                # Unset: the default SQLite file in the working directory is what was tried.
                url = PipelineSettings.load().database_url or database_url()
            except Exception:
                url = "the results database"
            url = redact(_hide_password(url)) or url
            if "read-only" in lowered or "readonly" in lowered:
                return (
                    f"the results database {url} is read-only ({text}): make it writable, "
                    "then run the command again"
                )
            return (
                f"the results database {url} cannot be used ({name}: {text}): check "
                "AGENTIC_IQA_DATABASE_URL and that the server is up"
            )
    return None


def _hide_password(url: str | None) -> str | None:
    if url is None:  # no URL configured: nothing to hide
        return url
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: redact() still masks any password
        return url


def report(exc: BaseException, line: str) -> None:
    """Print the one line (and where the traceback is) and keep the traceback."""
    from ..redact import redact
    from .common import debugging, err

    text = redact("".join(traceback.format_exception(exc))) or ""
    where = ""
    if debugging():
        err.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        try:
            path = log_path()
            path.write_text(text)
            where = f" (traceback: --debug, or {path})"
        except OSError:  # the full disk may be this one too
            where = " (traceback: --debug)"
    err.print(
        f"[bold red]error:[/] {_escape(redact(line) or '')}{where}", highlight=False, soft_wrap=True
    )


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class FaultCatchingGroup(TyperGroup):
    """The root command group: an infrastructure fault in any command ends as one line and
    exit 2 (:func:`describe`)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # A command's own exit (which may have been raised while handling such a fault,
            # after its own one line) and usage errors are the command's answer, not a fault.
            if isinstance(exc, (typer.Exit, typer.Abort)) or hasattr(exc, "exit_code"):
                raise
            line = describe(exc)
            if line is None:
                raise
            report(exc, line)
            raise typer.Exit(FAULT_EXIT) from None
