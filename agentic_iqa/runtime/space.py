"""Tell how much room the rest of a job needs in its SQLite database, from bytes measured.

The estimate is the bytes this run of the job added to the database over the items it
finished, times the items left, plus a quarter, plus the room the write-ahead log grows into
before SQLite checkpoints it, twice over (``wal_autocheckpoint`` pages, 4 MB by default; the
log is written beside the file, every page a commit changes, and a checkpoint that a reader
holds back lets it grow past that: measured, a 16 MB tmpfs resume needed more than 4.3 MB for
12 items), plus what the run holds in reserve.  Bytes are SQLite's pages in
use (``page_count - freelist_count``, times ``page_size``): what the job's rows take, not the
file's size, which counts other jobs, pages freed and the write-ahead log.  When no item
finished since the mark, :data:`ITEM_BYTES` stands in.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Engine

from .progress import progress

#: Bytes one item adds to a SQLite database: a 60-item job of the offline agent on
#: ``examples/i03_blurred.png`` (one tool each) took 937,984 bytes of pages in use, 15.6 KB an
#: item with its submitted row (``used.py``-style ``page_count - freelist_count`` after
#: ``agentic-iqa eval submit``; see docs/jobs.md), rounded up.
ITEM_BYTES = 16_000
#: What the estimate adds for pages half filled.
MARGIN = 1.25


@dataclass(frozen=True)
class SpaceMark:
    """Bytes in use in a SQLite database and a job's items finished, at one moment."""

    used: int
    finished: int
    #: Bytes the write-ahead log may take before it is checkpointed.
    log_room: int = 0


def used_bytes(engine: Engine) -> tuple[int, int] | None:
    """Return the bytes of a SQLite database's pages in use and the bytes its write-ahead log
    may grow to; None for a server database."""
    if engine.url.get_backend_name() != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return None
    with engine.connect() as connection:
        pages, free, size, checkpoint = (
            int(connection.execute(text(f"PRAGMA {name}")).scalar_one())
            for name in ("page_count", "freelist_count", "page_size", "wal_autocheckpoint")
        )
    return (pages - free) * size, checkpoint * size


def space_mark(engine: Engine, job_id: str) -> SpaceMark | None:
    """Return the bytes in use and the job's items finished now; None when it cannot be told."""
    try:
        measured = used_bytes(engine)
        if measured is None:
            return None
        return SpaceMark(measured[0], progress(engine, job_id).finished, measured[1])
    except Exception:  # the estimate is a courtesy: a database that fails here says so elsewhere
        return None


def space_needed(
    engine: Engine, job_id: str, since: SpaceMark | None = None, held: int = 0
) -> int | None:
    """Return bytes the rest of a job needs in its SQLite database: what each item finished
    since ``since`` added (else :data:`ITEM_BYTES`), times the items left, with a margin, room
    for the write-ahead log and the ``held`` bytes a run here reserves; None
    when it cannot be told (a server database, nothing left)."""
    now = space_mark(engine, job_id)
    if now is None:
        return None
    try:
        current = progress(engine, job_id)
    except Exception:
        return None
    left = current.total - current.finished
    if left <= 0:
        return None
    per_item: float = ITEM_BYTES
    if since is not None and now.finished > since.finished and now.used > since.used:
        per_item = (now.used - since.used) / (now.finished - since.finished)
    return int(per_item * left * MARGIN) + 2 * now.log_room + held


def megabytes(size: int) -> str:
    """Return ``size`` bytes as MB, rounded up: one decimal under 10 MB ("1.7 MB")."""
    if size < 10_000_000:
        return f"{-(-size // 100_000) / 10:.1f} MB"
    return f"{-(-size // 1_000_000)} MB"
