"""A job's item closes when its run ends: done or failed (cancelled when its job was); the
job's counts by state move with it.

Below both writers of the database (:mod:`.steps`, which ends runs, and :mod:`.jobs`), so
neither has to import the other.  The counts (``jobs.items_<state>``) change in the same
transaction as the items they count, by the number of rows each UPDATE moved, so they are
exact under any concurrency; :func:`recount` counts them from the items where they are not
known yet (NULL) or have to be checked.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from ..jobs.errors import readable
from .engine import changed_rows
from .models import ITEM_COUNTERS, ITEM_STATUSES, Job, JobItem, Run, UtcDateTime, utc_now

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
    """The values of an UPDATE of ``jobs`` that counts items which changed state:
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
    """A run of a job ended: its item is done or failed (cancelled if the job was), with the
    run's error as one readable sentence (:func:`~agentic_iqa.jobs.errors.readable`); the run
    keeps it whole."""
    if run.job_id is not None:
        close_item(
            session,
            run_id=run.id,
            job_id=run.job_id,
            succeeded=run.status == "succeeded",
            error=run.error,
        )


def close_item(
    session: Session, *, run_id: str, job_id: str, succeeded: bool, error: str | None
) -> None:
    """:func:`close_item_for_run` from what the caller knows of the run (no read of it): the
    job's row locked, the item moved, the job's counts moved by as many, and the job done
    when that was its last open item.  A handful of small statements, whatever the job's
    size."""
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
        .returning(_JOBS.c.items_pending, _JOBS.c.items_queued)
    ).first()
    if closed and job.status == "running" and not job.submitting and left is not None:
        _finish_if_nothing_open(session, job_id, left.items_pending, left.items_queued)


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
    """The running job is done when nothing of it is pending or queued and its submit has
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
