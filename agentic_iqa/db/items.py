"""Write and read a job's items: stored at submit, closed as their runs end, counted by state.

An item closes when its run ends: done or failed (cancelled when its job was); the job's
counts by state move with it.  Below the writers of runs (:mod:`.runs`, which ends them) and of
jobs (:mod:`.jobs`), so neither has to import the other.  The counts (``jobs.items_<state>``)
change in the same transaction as the items they count, by the number of rows each UPDATE moved,
so they are exact under any concurrency; :func:`recount` counts them from the items where they
are not known yet (NULL) or have to be checked.  Items are inserted in chunks as the manifest
streams (:func:`add_items`), so a job of a million items never needs them all in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from typing import Any, cast

from sqlalchemy import bindparam, func, or_, select, text, update
from sqlalchemy.orm import Session

from ..reports.errors import readable
from ..reports.unread import CANNOT_SEE
from .engine import GROWING_TABLES, analyze, changed_rows
from .models import (
    ITEM_COUNTERS,
    ITEM_STATUSES,
    Job,
    JobItem,
    Run,
    UtcDateTime,
    utc_now,
)
from .queries import MAX_MATCHES, indexed_by

_JOBS = Job.__table__

_ITEMS = JobItem.__table__

#: The job's row, locked first by whoever moves its items (PostgreSQL; SQLite's BEGIN
#: IMMEDIATE already serialises writers): a count taken under it sees every move before it.
_LOCK_JOB = (
    select(_JOBS.c.status, _JOBS.c.waiting, _JOBS.c.submitting)
    .where(_JOBS.c.id == bindparam("b_job"))
    .with_for_update()
)

_CLOSE_ITEM = (
    update(_ITEMS)
    .where(_ITEMS.c.run_id == bindparam("b_run"), _ITEMS.c.status == "queued")
    .values(
        status=bindparam("b_status"),
        error=bindparam("b_error"),
        finished_at=bindparam("b_now", type_=UtcDateTime()),
    )
)

_CLOSE_DONE_ITEMS = (
    update(_ITEMS)
    .where(_ITEMS.c.run_id.in_(bindparam("b_runs", expanding=True)), _ITEMS.c.status == "queued")
    .values(status="done", error=None, finished_at=bindparam("b_now", type_=UtcDateTime()))
)

_OPEN_ITEM = (
    select(_ITEMS.c.id)
    .where(_ITEMS.c.job_id == bindparam("b_job"), _ITEMS.c.status.in_(("pending", "queued")))
    .limit(1)
)

_COUNTED = select(*(_JOBS.c[column] for column in ITEM_COUNTERS.values())).where(
    _JOBS.c.id == bindparam("b_job")
)

#: A run stopped here (Ctrl-C, a full disk) keeps its note while its last items end.
_STOPPED_HERE = "interrupted"


def moved(moves: Mapping[tuple[str | None, str | None], int]) -> dict[str, object]:
    """Return the values of an UPDATE of ``jobs`` that counts items which changed state:
    ``moves[(source, target)]`` of them (None: from nowhere, or to nowhere).  A count not known
    yet (NULL) stays NULL."""
    deltas: dict[str, int] = {}
    for (source, target), count in moves.items():
        if not count or source == target:
            continue
        if source is not None:
            deltas[source] = deltas.get(source, 0) - count
        if target is not None:
            deltas[target] = deltas.get(target, 0) + count
    return {
        ITEM_COUNTERS[state]: _JOBS.c[ITEM_COUNTERS[state]] + delta
        for state, delta in deltas.items()
        if delta
    }


def move(session: Session, job_id: str, moves: Mapping[tuple[str | None, str | None], int]) -> None:
    """Count the job's items that changed state (:func:`moved`), in the caller's transaction."""
    values = moved(moves)
    if values:
        session.execute(update(_JOBS).where(_JOBS.c.id == job_id).values(values))


def close_item_for_run(session: Session, run: Run) -> None:
    """Close the item of a run of a job that ended: done or failed (cancelled if the job was), with
    the run's error as one readable sentence (:func:`~agentic_iqa.reports.errors.readable`); the run
    keeps it whole."""
    if run.job_id is not None:
        close_item(
            session,
            run_id=run.id,
            job_id=run.job_id,
            succeeded=run.status == "succeeded",
            error=run.error,
            cannot_see=run.unread == CANNOT_SEE,
        )


def close_item(
    session: Session,
    *,
    run_id: str,
    job_id: str,
    succeeded: bool,
    error: str | None,
    cannot_see: bool = False,
) -> None:
    """Close an item as :func:`close_item_for_run` does, from what the caller knows of the run (no
    read of it): the job's row locked, the item moved, the job's counts moved by as many, and the
    job done when that was its last open item.  A handful of small statements, whatever the job's
    size.  ``cannot_see``: the run's model said it cannot see the image (``runs.unread``); the
    item, done, is counted in ``jobs.items_cannot_see`` by the same UPDATE, so ``eval status``
    reads one number (a bounded query over the runs would still walk a job's runs when few say
    so), exact under any concurrency, and never lowered: a done item is never reopened."""
    session.flush()  # an ORM caller's pending changes (a resume's) come first
    job = session.execute(_LOCK_JOB, {"b_job": job_id}).first()
    status = "done" if succeeded else "failed"
    if job is not None and job.status == "cancelled" and status == "failed":
        status = "cancelled"
    closed = changed_rows(
        session.execute(
            _CLOSE_ITEM,
            {
                "b_run": run_id,
                "b_status": status,
                "b_error": None if status == "done" else readable(error),
                "b_now": utc_now(),
            },
        )
    )
    if job is None:
        return
    values = moved({("queued", status): closed})
    if cannot_see and status == "done" and closed:
        values["items_cannot_see"] = _JOBS.c.items_cannot_see + closed
    _count_closed(session, job_id, job, closed, values)


def close_done_items(session: Session, *, job_id: str, run_ids: list[str]) -> None:
    """Close the items of ``run_ids``, runs of ``job_id`` that succeeded (their model saw the
    image), as done: one UPDATE for them all and one of the job's counts, as :func:`close_item`
    does for one (the job's row locked first, the job done when they were its last)."""
    if not run_ids:
        return
    session.flush()
    job = session.execute(_LOCK_JOB, {"b_job": job_id}).first()
    closed = changed_rows(
        session.execute(_CLOSE_DONE_ITEMS, {"b_runs": run_ids, "b_now": utc_now()})
    )
    if job is not None:
        _count_closed(session, job_id, job, closed, moved({("queued", "done"): closed}))


def _count_closed(
    session: Session, job_id: str, job: Any, closed: int, values: dict[str, object]
) -> None:
    """Move the job's counts by ``values`` for ``closed`` items just closed (its row ``job``,
    locked), lift its waiting note, and mark it done when nothing is left open."""
    # An item ran: whoever could not, someone could.  A run stopped here (Ctrl-C, a full disk)
    # stays stopped while its last items end: only a resume lifts that note.
    if job.waiting is not None and not job.waiting.startswith(_STOPPED_HERE):
        values.update(waiting=None, waiting_at=None)
    if not values:
        return
    left = session.execute(
        update(_JOBS)
        .where(_JOBS.c.id == job_id)
        .values(values)
        .returning(_JOBS.c.items_pending, _JOBS.c.items_queued, _JOBS.c.items_done)
    ).first()
    if closed and left is not None and left.items_done is not None:
        refresh_statistics_as_grown(session, left.items_done - closed, left.items_done)
    if closed and job.status == "running" and not job.submitting and left is not None:
        _finish_if_nothing_open(session, job_id, left.items_pending, left.items_queued)


#: A running job's tables get fresh planner statistics each time its done items pass one of
#: these (1,000 then each doubling): :func:`refresh_statistics_as_grown`.
FIRST_STATISTICS_AT = 1000


def statistics_milestone(done: int) -> int:
    """Return how many doublings past :data:`FIRST_STATISTICS_AT` ``done`` items are (-1
    before it)."""
    return (done // FIRST_STATISTICS_AT).bit_length() - 1


def refresh_statistics_as_grown(session: Session, before: int, after: int) -> bool:
    """Refresh the planner's statistics of the tables a running job fills when its done items
    went from ``before`` to ``after`` past a milestone; return whether it did.

    Without them a PostgreSQL whose autovacuum is off (or behind) plans the chunk's look-ups
    in ``step_records`` as scans of a table it believes empty: each chunk read every step
    recorded so far, and a 100,000-item job's database CPU grew from 0.5 to 2.2 ms an item.
    ANALYZE samples (30,000 rows on PostgreSQL, ``SQLITE_ANALYSIS_LIMIT`` on SQLite), so
    the few refreshes of a job of millions cost milliseconds each."""
    if statistics_milestone(after) <= statistics_milestone(before):
        return False
    analyze(session, GROWING_TABLES)
    return True


def _finish_if_nothing_open(
    session: Session, job_id: str, pending: int | None, queued: int | None
) -> bool:
    """Mark the running job done when its counts say nothing is open and an item says so too
    (one row of the index: a count that drifted would be counted again, not trusted)."""
    if pending is None or queued is None:
        counted = recount(session, job_id)
        pending, queued = counted.get("pending", 0), counted.get("queued", 0)
    if pending + queued > 0:
        return False
    if session.scalar(_OPEN_ITEM, {"b_job": job_id}) is not None:
        recount(session, job_id)
        return False
    return bool(
        changed_rows(
            session.execute(
                update(_JOBS)
                .where(_JOBS.c.id == job_id, _JOBS.c.status == "running")
                .values(status="done", finished_at=utc_now())
            )
        )
    )


def finish_if_complete(session: Session, job: Job) -> None:
    """Mark the running job done when nothing of it is pending or queued and its submit has
    stored its last row: from its counts (counted first if not known yet), checked against
    one row of the index, never a count over its items."""
    session.flush()
    if job.status != "running" or job.submitting:
        return
    counted = session.execute(_COUNTED, {"b_job": job.id}).first()
    pending, queued = (None, None) if counted is None else (counted[0], counted[1])
    if _finish_if_nothing_open(session, job.id, pending, queued):
        session.refresh(job, ["status", "finished_at"])


def recount(session: Session, job_id: str) -> dict[str, int]:
    """Count the job's items by state and store the counts (the job's row locked first, so no
    move is lost between the count and the write); returns them.  One pass over the job's
    entries of the (job_id, status, id) index: at submit's end, at a job's end, and wherever
    the counts are not known yet."""
    session.flush()
    session.execute(_LOCK_JOB, {"b_job": job_id})
    found = {
        status: int(count)
        for status, count in session.execute(
            select(_ITEMS.c.status, func.count())
            .where(_ITEMS.c.job_id == job_id)
            .group_by(_ITEMS.c.status)
        )
    }
    session.execute(
        update(_JOBS)
        .where(_JOBS.c.id == job_id)
        .values({ITEM_COUNTERS[status]: found.get(status, 0) for status in ITEM_STATUSES})
    )
    return {status: count for status, count in found.items() if count}


#: The columns an item is stored with at submit (the rest start empty), in this order.
ITEM_COLUMNS = (
    "job_id",
    "line",
    "item_key",
    "image",
    "reference",
    "query",
    "mos",
    "answer_truth",
    "meta_json",
    "status",
    "error",
    "image_digest",
    "reference_digest",
    "finished_at",
)


def add_items(session: Session, job_id: str, rows: Iterable[dict[str, Any]]) -> int:
    """Insert item rows (column dicts: :data:`ITEM_COLUMNS` but ``job_id``, with a
    ``status``) in the session's transaction as one statement: PostgreSQL's ``COPY``
    (psycopg's copy on the raw connection), else one ``executemany`` of an INSERT prepared once
    (SQLite); a million items are a hundred statements, not a round trip or an ORM object
    each.  The job's counts by state go up in the same transaction.  Returns how many."""
    connection = session.connection()
    dialect = connection.dialect
    driver = connection.connection.driver_connection
    states: dict[str, int] = {}
    values = _item_values(job_id, rows, dialect, states)
    names = ", ".join(ITEM_COLUMNS)
    if dialect.name == "postgresql":
        assert driver is not None  # the session's connection is open
        with driver.cursor() as cursor, cursor.copy(f"COPY job_items ({names}) FROM STDIN") as copy:
            for row in values:
                copy.write_row(row)
    else:
        batch = list(values)
        if batch:
            marks = ", ".join("?" * len(ITEM_COLUMNS))
            connection.exec_driver_sql(f"INSERT INTO job_items ({names}) VALUES ({marks})", batch)
    if states:  # the job's counts by state, where they are kept (NULL stays NULL: not yet)
        counter = {
            ITEM_COUNTERS[state]: getattr(Job, ITEM_COUNTERS[state]) + added
            for state, added in states.items()
        }
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(counter)
            .execution_options(synchronize_session=False)
        )
    return sum(states.values())


def _item_values(
    job_id: str, rows: Iterable[dict[str, Any]], dialect: Any, states: dict[str, int]
) -> Iterator[tuple[Any, ...]]:
    """Yield each row as the tuple of :data:`ITEM_COLUMNS` the driver takes, through the columns'
    own types where they convert (a UTC time as SQLite stores it), as an ORM insert would have
    written them; ``states`` counts them by status.  A row with every column is read in one
    C call (a million rows: seconds saved)."""
    from operator import itemgetter

    table = JobItem.__table__
    names = ITEM_COLUMNS[1:]
    converted = [
        (index, process)
        for index, name in enumerate(ITEM_COLUMNS)
        if (process := table.c[name].type.bind_processor(dialect)) is not None
    ]
    cells = itemgetter(*names)
    for row in rows:
        states[row["status"]] = states.get(row["status"], 0) + 1
        try:
            values = (job_id, *cells(row))
        except KeyError:  # a row that leaves columns out: they are empty
            values = (job_id, *(row.get(name) for name in names))
        if converted:
            listed = list(values)
            for index, process in converted:
                if listed[index] is not None:
                    listed[index] = process(listed[index])
            values = tuple(listed)
        yield values


def close_orphaned_items(session: Session) -> int:
    """Close the items still 'queued' whose run already ended (their closing was lost)."""
    running_jobs = select(Job.id).where(Job.status == "running")
    runs = session.scalars(  # by (job, status): the index, not a scan of every item ever
        select(Run)
        .join(JobItem, JobItem.run_id == Run.id)
        .where(
            JobItem.job_id.in_(running_jobs),
            JobItem.status == "queued",
            Run.status.in_(("succeeded", "failed")),
        )
        .limit(500)
    ).all()
    for run in runs:
        close_item_for_run(session, run)
    return len(runs)


def stored_objects(
    session: Session, job_id: str
) -> list[tuple[int, str | None, str | None, str | None, str | None]]:
    """Return the open items with an image or reference in an object store: (id, image, its digest
    at submit, reference, its digest)."""
    return [
        cast("tuple[int, str | None, str | None, str | None, str | None]", tuple(row))
        for row in session.execute(
            select(
                JobItem.id,
                JobItem.image,
                JobItem.image_digest,
                JobItem.reference,
                JobItem.reference_digest,
            ).where(
                JobItem.job_id == job_id,
                JobItem.status.in_(("pending", "queued")),
                JobItem.image_digest.is_not(None) | JobItem.reference_digest.is_not(None),
            )
        )
    ]


def fail_changed(session: Session, failures: dict[int, str]) -> list[str]:
    """Fail the items whose objects changed since submit, with the reason (their runs in flight
    too); returns those runs."""
    runs: list[str] = []
    now = utc_now()
    moves: dict[str, dict[tuple[str | None, str | None], int]] = {}
    for item_id, reason in failures.items():
        item = session.get(JobItem, item_id)
        if item is None:
            continue
        by_job = moves.setdefault(item.job_id, {})
        by_job[(item.status, "failed")] = by_job.get((item.status, "failed"), 0) + 1
        if item.run_id is not None:
            session.execute(
                update(Run)
                .where(Run.id == item.run_id, Run.status.in_(("pending", "running")))
                .values(status="failed", error=reason, finished_at=now, lease_until=None)
            )
            runs.append(item.run_id)
        item.status, item.error, item.finished_at = "failed", reason, now
    session.flush()
    for job_id, counted in moves.items():
        move(session, job_id, counted)
    return runs


def counts(session: Session, job_id: str) -> dict[str, int]:
    """Count the job's items by state (the states it has items in): the counts kept on its row as
    items move (:mod:`.items`), five numbers whatever its size; counted from the items only
    for a job whose counts are not known yet."""
    row = session.execute(_COUNTED, {"b_job": job_id}).first()
    if row is None or any(count is None for count in row):
        return count_items(session, job_id)
    return {status: int(count) for status, count in zip(ITEM_STATUSES, row, strict=True) if count}


def count_items(session: Session, job_id: str) -> dict[str, int]:
    """Count the job's items by state, from the items (one pass over its index entries)."""
    rows = session.execute(
        select(JobItem.status, func.count())
        .where(JobItem.job_id == job_id)
        .group_by(JobItem.status)
    ).all()
    return {status: int(count) for status, count in rows}


def failed_items(session: Session, job_id: str, limit: int = 50) -> list[JobItem]:
    """Return the job's failed items (the first ``limit``, in manifest order: bad rows that keep
    their own id are stored after the others), with their reasons."""
    return list(
        session.scalars(
            select(JobItem)
            .where(JobItem.job_id == job_id, JobItem.status == "failed")
            .order_by(JobItem.line, JobItem.id)
            .limit(limit)
        )
    )


def item_run_id(session: Session, job_id: str, item: str) -> str:
    """Return the run of a job's item, named by its id in the manifest, its line number or its
    image's file name (or path); a :class:`LookupError` says what matched instead."""
    named = [
        JobItem.item_key == item,
        JobItem.image == item,
        JobItem.image.endswith(f"/{item}", autoescape=True),
    ]
    if item.isdigit():
        named.append(JobItem.line == int(item))
    rows = session.execute(
        select(JobItem.item_key, JobItem.line, JobItem.image, JobItem.run_id)
        .where(JobItem.job_id == job_id, or_(*named))
        .order_by(JobItem.line)
        .limit(MAX_MATCHES + 1)
    ).all()
    exact = [row for row in rows if row.item_key == item]  # an id beats a line or a file name
    rows = exact or rows
    if not rows:
        raise LookupError(
            f"job {job_id[:8]} has no item {item!r} (an item id, a line number "
            "or an image file name)"
        )
    if len(rows) > 1:
        listed = ", ".join(f"{row.item_key} (line {row.line})" for row in rows[:MAX_MATCHES])
        raise LookupError(f"item {item!r} of job {job_id[:8]} is ambiguous: {listed}")
    row = rows[0]
    if row.run_id is None:
        raise LookupError(
            f"item {row.item_key} (line {row.line}) of job {job_id[:8]} has no "
            "run (a bad row, or not started yet)"
        )
    return row.run_id


#: The index a job's items in one state are found by.
ITEMS_BY_STATUS = "ix_job_items_job_id_status_id"


@cache
def _never_ran(dialect: str) -> Any:
    """Count a job's failed items that never ran, among its failed ones (SQLite, left to
    itself, walks every item without a run of every job by ``ix_job_items_run_id``: a second a
    million)."""
    return text(
        f"SELECT count(*) FROM {indexed_by(dialect, 'job_items', ITEMS_BY_STATUS)} "
        "WHERE job_items.job_id = :job AND job_items.status = 'failed' "
        "AND job_items.run_id IS NULL"
    )


def items_run(session: Session, job_id: str) -> int:
    """Count the items whose run has ended (done or failed after running): the divisor of cost per
    item. Bad rows never ran and cost nothing.  From the job's counts, less its failed items
    without a run (read among its failed ones alone)."""
    counted = counts(session, job_id)
    never_ran = int(
        session.scalar(_never_ran(session.get_bind().dialect.name), {"job": job_id}) or 0
    )
    return counted.get("done", 0) + counted.get("failed", 0) - never_ran
