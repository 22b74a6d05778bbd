"""Build the statements the entity modules share: INSERTs that skip stored rows, SQLite's
index hints, ids looked up by prefix; and write timestamps as text.

A leaf below :mod:`.items`, :mod:`.runs`, :mod:`.steps`, :mod:`.jobs`, :mod:`.vlm_calls` and
:mod:`.exports`, so none of them imports another for these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .models import (
    ToolLog,
    VlmCall,
)


def dialect_insert(session: Session, table: Table) -> Any:
    """Return an INSERT of ``table`` in the session's dialect (``ON CONFLICT`` needs one)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"database dialect {dialect!r}: use SQLite or PostgreSQL")


def insert_missing(
    session: Session,
    model: type[ToolLog] | type[VlmCall],
    keys: Iterable[str],
    rows: list[dict[str, Any]],
) -> None:
    """Insert ``rows`` with ON CONFLICT (keys) DO NOTHING: rows already stored are left as they
    are.

    One statement executed for many parameter sets (not one VALUES list per call), so that it
    compiles once per process instead of once per step."""
    if not rows:
        return
    statement = dialect_insert(session, model.__table__)
    session.execute(statement.on_conflict_do_nothing(index_elements=list(keys)), rows)


_ID_PREFIX = re.compile(r"^[0-9a-f-]{1,36}$")

#: How many matches an ambiguous prefix lists.
MAX_MATCHES = 10


class AmbiguousId(LookupError):
    """A short id that starts more than one job's (or run's) id."""

    def __init__(self, kind: str, prefix: str, matches: list[str]) -> None:
        super().__init__(prefix)
        self.kind, self.prefix, self.matches = kind, prefix, matches

    def __str__(self) -> str:
        more = "" if len(self.matches) <= MAX_MATCHES else " and more"
        listed = ", ".join(self.matches[:MAX_MATCHES])
        return (
            f"{self.kind} id {self.prefix!r} is ambiguous: it starts {listed}{more}; "
            "give more characters"
        )


def ids_by_prefix(session: Session, column: Any, reference: str) -> list[str]:
    """Return the ids equal to ``reference``, else the ids it is a prefix of (at most one more than
    :data:`MAX_MATCHES`, enough to tell "ambiguous" and list some)."""
    exact = session.scalars(select(column).where(column == reference)).first()
    if exact is not None:
        return [exact]
    prefix = reference.lower()
    if not _ID_PREFIX.match(prefix):
        return []
    return list(
        session.scalars(
            select(column).where(column.like(f"{prefix}%")).order_by(column).limit(MAX_MATCHES + 1)
        )
    )


def _sqlite_table_hint(self: Any, table: Any, text: str | None) -> str | None:
    return text


#: SQLAlchemy's SQLite compiler drops every table hint (``get_from_hint_text`` returns None), so
#: a statement's ``with_hint(table, "INDEXED BY ix", dialect_name="sqlite")`` ran unhinted and,
#: on statistics taken while the tables were small, scanned ``runs`` once for every item (a
#: 100,000-item job's ranking did not finish in ten minutes).  Rendered, the hint reaches SQLite.
_SQLiteCompiler = sqlite.base.SQLiteCompiler
_SQLiteCompiler.get_from_hint_text = _sqlite_table_hint  # type: ignore[method-assign]


def indexed_by(dialect: str, table: str, index: str) -> str:
    """Return ``table``, read from ``index`` on SQLite (``INDEXED BY``)."""
    return f"{table} INDEXED BY {index}" if dialect == "sqlite" else table


def iso(value: datetime | None) -> str | None:
    """Return ``value`` in ISO 8601 (None stays None)."""
    return value.isoformat() if value is not None else None
