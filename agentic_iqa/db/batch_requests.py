"""Write and read the requests of a batch job's runs: parked, answered, taken over, counted.

A run that asks its model through a provider's batch parks: its requests wait here, keyed by
their place in the run (run, step, iteration, seq), so a step parked twice at the same place (a
redelivery, a resume) asks for each once, and a resumed run takes over the requests and answers
of the run it replaces.  The batches they are sent in are :mod:`.batches`'.  Every function
takes an open session and leaves the commit to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import and_, exists, func, select, update
from sqlalchemy.orm import Session

from ..vlm.batching import Answer, Wanted
from .engine import changed_rows
from .items import move
from .models import BatchRequest, Job, JobItem, Run, StepRecord, VlmBatch, utc_now

#: The states of a request still to be answered: waiting for a round, or in a batch.
_OPEN_REQUESTS = ("pending", "submitted")


def answers_for(session: Session, run_id: str, step: str, iteration: int) -> dict[int, Answer]:
    """Return what batches brought for this step of this run, by place: answers and final errors."""
    rows = session.execute(
        select(
            BatchRequest.seq,
            BatchRequest.request_key,
            BatchRequest.status,
            BatchRequest.response_json,
            BatchRequest.error,
            VlmBatch.provider_id,
        )
        .outerjoin(VlmBatch, VlmBatch.id == BatchRequest.batch_id)
        .where(
            BatchRequest.run_id == run_id,
            BatchRequest.step == step,
            BatchRequest.iteration == iteration,
            BatchRequest.status.in_(("answered", "failed")),
        )
    ).all()
    return {
        seq: Answer(
            key,
            response if status == "answered" else None,
            error if status == "failed" else None,
            provider,
        )
        for seq, key, status, response, error, provider in rows
    }


def park(
    session: Session,
    *,
    job_id: str,
    run_id: str,
    step: str,
    iteration: int,
    wanted: Sequence[Wanted],
) -> int:
    """Park the run until ``wanted`` is answered: the requests are stored (once per place), the
    step's attempt is handed back (waiting is not an attempt) and the run holds no lease.  Returns
    the requests newly stored."""
    added = 0
    for request in wanted:
        row = session.scalar(
            select(BatchRequest).where(
                BatchRequest.run_id == run_id,
                BatchRequest.step == step,
                BatchRequest.iteration == iteration,
                BatchRequest.seq == request.seq,
            )
        )
        if row is None:
            row = _adoptable(session, job_id, request.request_key)
        if row is not None and row.run_id != run_id:  # an earlier run's, given up: take it
            row.run_id, row.step, row.iteration, row.seq = run_id, step, iteration, request.seq
            continue
        if row is None:
            session.add(
                BatchRequest(
                    job_id=job_id,
                    run_id=run_id,
                    step=step,
                    iteration=iteration,
                    seq=request.seq,
                    role=request.role,
                    request_key=request.request_key,
                    request_json=request.request_json,
                    status="pending",
                    tries=0,
                )
            )
            added += 1
        elif row.request_key != request.request_key:  # another request at this place now
            row.request_key, row.request_json, row.role = (
                request.request_key,
                request.request_json,
                request.role,
            )
            row.status, row.batch_id, row.tries = "pending", None, 0
            row.response_json = row.error = row.answered_at = None
            added += 1
    record = session.scalar(
        select(StepRecord).where(
            StepRecord.run_id == run_id, StepRecord.step == step, StepRecord.iteration == iteration
        )
    )
    if record is not None:
        record.attempts = max(0, record.attempts - 1)
        record.lease_until = None
        record.error = f"waiting for {len(wanted)} answer(s) from a batch"
    session.execute(
        update(Run).where(Run.id == run_id).values(awaiting_batch=True, lease_until=None)
    )
    session.flush()
    return added


def _adoptable(session: Session, job_id: str, key: str) -> BatchRequest | None:
    """Return the same request of a run of this job that ended without using it (cancelled with its
    job, then resumed as a new run), answered, in a batch or waiting for one: a resume pays
    for nothing twice, and a dead run's request is never sent (:func:`.batches.gather`)."""
    return session.scalars(
        select(BatchRequest)
        .join(Run, Run.id == BatchRequest.run_id)
        .where(
            BatchRequest.job_id == job_id,
            BatchRequest.request_key == key,
            BatchRequest.status.in_(("answered", "submitted", "pending")),
            Run.status == "failed",
        )
        .order_by(BatchRequest.id)
        .limit(1)
    ).first()


def cancel_parked(session: Session, job_id: str) -> int:
    """End a cancelled job's waiting runs as cancelled (their requests may still be answered,
    and a resumed run takes those answers over: :func:`park`)."""
    parked = list(
        session.scalars(
            select(Run.id).where(
                Run.job_id == job_id,
                Run.awaiting_batch.is_(True),
                Run.status.in_(("pending", "running")),
            )
        )
    )
    if not parked:
        return 0
    now = utc_now()
    session.execute(
        update(Run)
        .where(Run.id.in_(parked))
        .values(
            status="failed",
            error="cancelled with its job",
            awaiting_batch=False,
            lease_until=None,
            finished_at=now,
        )
    )
    closed = changed_rows(
        session.execute(
            update(JobItem)
            .where(JobItem.run_id.in_(parked), JobItem.status == "queued")
            .values(status="cancelled", finished_at=now)
        )
    )
    move(session, job_id, {("queued", "cancelled"): int(closed or 0)})
    return len(parked)


def is_batch_job(session: Session, job_id: str) -> bool:
    """Tell whether the job runs its VLM calls through provider batches."""
    from ..runconfig import RunConfig

    text = session.scalar(select(Job.config_json).where(Job.id == job_id))
    if not text:
        return False
    return RunConfig.from_json(text).batch


def running_batch_jobs(session: Session) -> list[str]:
    """Return the running jobs with requests waiting or batches open, and jobs (of any status) whose
    batches still have answers to read: a cancelled job's batch is read to the end, so a
    resume pays for nothing twice."""
    waiting = select(BatchRequest.job_id).where(BatchRequest.status.in_(_OPEN_REQUESTS)).distinct()
    parked = (
        select(Run.job_id)
        .where(Run.awaiting_batch.is_(True), Run.status.in_(("pending", "running")))
        .distinct()
    )
    unread = select(VlmBatch.job_id).where(VlmBatch.read.is_(False)).distinct()
    return list(
        session.scalars(
            select(Job.id)
            .where(
                (Job.status == "running") & (Job.id.in_(waiting) | Job.id.in_(parked))
                | Job.id.in_(unread)
            )
            .order_by(Job.created_at)
        )
    )


def moving_runs(session: Session, job_id: str) -> int:
    """Count the runs of the job at work, not waiting for a batch: a round waits for them to
    park."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Run)
            .where(
                Run.job_id == job_id,
                Run.status.in_(("pending", "running")),
                Run.awaiting_batch.is_(False),
            )
        )
        or 0
    )


def pending_requests(session: Session, job_id: str) -> tuple[int, datetime | None]:
    """Count the requests waiting for a round, and say since when the oldest waits."""
    count, oldest = session.execute(
        select(func.count(), func.min(BatchRequest.created_at))
        .join(Run, Run.id == BatchRequest.run_id)
        .where(
            BatchRequest.job_id == job_id,
            BatchRequest.status == "pending",
            Run.status.in_(("pending", "running")),
        )
    ).one()
    if oldest is not None and oldest.tzinfo is None:
        from datetime import UTC

        oldest = oldest.replace(tzinfo=UTC)
    return int(count or 0), oldest


def claim_answered_runs(
    session: Session, job_id: str, lease_seconds: float | None, limit: int = 10_000
) -> list[str]:
    """Claim the parked runs of a running job with nothing left to wait for, marked as moving again
    (with a lease when supervised): whoever claims one sends it on, once."""
    open_request = exists().where(
        and_(BatchRequest.run_id == Run.id, BatchRequest.status.in_(_OPEN_REQUESTS))
    )
    runs = list(
        session.scalars(
            select(Run)
            .where(
                Run.job_id == job_id,
                Run.awaiting_batch.is_(True),
                Run.status.in_(("pending", "running")),
                ~open_request,
            )
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    deadline = None if lease_seconds is None else utc_now() + timedelta(seconds=lease_seconds)
    for run in runs:
        run.awaiting_batch = False
        run.lease_until = deadline
    session.flush()
    return [run.id for run in runs]


def reopen_runs(session: Session, job_id: str) -> int:
    """Count the parked runs a resume leaves waiting: parked runs whose requests are all in (or
    failed) go on; requests of batches that ended unread are read by the rounds.  Returns parked
    runs left waiting."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Run)
            .where(
                Run.job_id == job_id,
                Run.awaiting_batch.is_(True),
                Run.status.in_(("pending", "running")),
            )
        )
        or 0
    )


def request_counts(session: Session, job_id: str) -> dict[str, int]:
    """Count the job's batch requests by state."""
    rows = session.execute(
        select(BatchRequest.status, func.count())
        .where(BatchRequest.job_id == job_id)
        .group_by(BatchRequest.status)
    ).all()
    return {status: int(count) for status, count in rows}
