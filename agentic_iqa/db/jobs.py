"""Write and read a dataset job: created, fed a window of items at a time, cancelled, reopened,
stopped; its leases; found by id or prefix, described, listed.

Everything here works in batches and by SQL counts, so a job of a million items never needs
them all in memory: its items (:mod:`.items`) are claimed a window at a time, and its rows and
report columns read a page at a time (:mod:`.exports`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, select, true, update
from sqlalchemy.orm import Session

from ..redact import redact
from ..state import AgenticIQAState
from .engine import changed_rows
from .items import close_item_for_run, counts, finish_if_complete, move, recount
from .models import (
    ITEM_COUNTERS,
    JOB_MODES,
    Job,
    JobItem,
    Run,
    UtcDateTime,
    utc_now,
)
from .queries import AmbiguousId, ids_by_prefix
from .runs import create_runs, lease_deadline

if TYPE_CHECKING:
    pass


class JobNotFound(KeyError):
    """No job with this id (or unique prefix) in the database."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no job with id {self.job_id!r} in the database"


class NoJobs(JobNotFound):
    """The latest job was asked for, and the database holds none."""

    def __init__(self) -> None:
        super().__init__("(latest)")

    def __str__(self) -> str:
        return "no job in the database yet: submit one with `agentic-iqa eval submit MANIFEST`"


def get_job(session: Session, job_id: str, *, lock: bool = False) -> Job:
    """Return the job; ``lock`` holds its row until commit (PostgreSQL), so feeders take turns."""
    job = session.get(Job, job_id, with_for_update=lock or None, populate_existing=lock)
    if job is None:
        raise JobNotFound(job_id)
    return job


def latest_job(session: Session) -> Job | None:
    """Return the job submitted last, or None."""
    return session.scalars(select(Job).order_by(Job.created_at.desc()).limit(1)).first()


def resolve_job_id(session: Session, reference: str | None) -> str:
    """Return the job a full id, a unique prefix of one (the 8 characters progress bars show), or
    None (the latest job) means; :class:`JobNotFound` or :class:`AmbiguousId` otherwise."""
    if reference is None:
        job = latest_job(session)
        if job is None:
            raise NoJobs()
        return job.id
    matches = ids_by_prefix(session, Job.id, reference.strip())
    if not matches:
        raise JobNotFound(reference)
    if len(matches) > 1:
        raise AmbiguousId("job", reference, matches)
    return matches[0]


def job_ids(
    session: Session,
    *,
    group: str | None = None,
    status: str | None = None,
    limit: int | None = None,
) -> list[str]:
    """List the jobs newest first (``eval list``, ``eval compare --group``): of one sweep, in one
    state."""
    statement = select(Job.id).order_by(Job.created_at.desc(), Job.id)
    if group is not None:
        statement = statement.where(Job.job_group == group)
    if status is not None:
        statement = statement.where(Job.status == status)
    if limit is not None:
        statement = statement.limit(limit)
    return list(session.scalars(statement))


_JOB_STATUS = select(Job.__table__.c.status).where(Job.__table__.c.id == bindparam("b_job"))


def job_cancelled(session: Session, job_id: str) -> bool:
    """Tell whether the job was cancelled (asked after every step of its runs: a Core read)."""
    return session.scalar(_JOB_STATUS, {"b_job": job_id}) == "cancelled"


def jobs_to_feed(session: Session) -> list[str]:
    """Return the running jobs that the workers feed and that still have items waiting."""
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "running", Job.dispatch == "workers")
            .where(
                select(JobItem.id)
                .where(JobItem.job_id == Job.id, JobItem.status == "pending")
                .exists()
            )
        )
    )


def jobs_to_settle(session: Session, *, since: datetime, limit: int = 5) -> list[str]:
    """Return the jobs the workers ran that ended since ``since`` with nothing in flight and no
    headline stored yet (:func:`agentic_iqa.runtime.lifecycle.job_ended` has not run for them)."""
    return list(
        session.scalars(
            select(Job.id)
            .where(
                Job.status.in_(("done", "cancelled")),
                Job.dispatch == "workers",
                Job.headline_json.is_(None),
                Job.items_queued == 0,
                Job.finished_at >= since,
            )
            .order_by(Job.finished_at)
            .limit(limit)
        )
    )


def has_runs(session: Session, job_id: str) -> bool:
    """Tell whether the job has had a run: none means no process ever began one of its items
    (one row of an index, not a count of a million)."""
    return session.scalar(select(Run.id).where(Run.job_id == job_id).limit(1)) is not None


def live_leases(session: Session, job_id: str) -> int:
    """Count the runs of the job in flight whose lease is still running: someone is working on
    them."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Run)
            .where(
                Run.job_id == job_id,
                Run.status.in_(("pending", "running")),
                Run.lease_until.is_not(None),
                Run.lease_until >= utc_now(),
            )
        )
        or 0
    )


def stalled_count(session: Session, job_id: str) -> int:
    """Count the items in flight whose run's lease has passed: nothing has happened to them
    lately."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(JobItem)
            .join(Run, Run.id == JobItem.run_id)
            .where(
                JobItem.job_id == job_id,
                JobItem.status == "queued",
                Run.status.in_(("pending", "running")),
                Run.lease_until.is_not(None),
                Run.lease_until < utc_now(),
            )
        )
        or 0
    )


_ITEMS = JobItem.__table__


#: A claimed item: its run, queued (one statement for a window of items).
_QUEUE_ITEM = (
    update(_ITEMS)
    .where(_ITEMS.c.id == bindparam("b_id"))
    .values(
        run_id=bindparam("b_run"),
        status="queued",
        queued_at=bindparam("b_now", type_=UtcDateTime()),
    )
)


def create_job(
    session: Session,
    *,
    name: str,
    manifest: str,
    default_query: str,
    root: str | None = None,
    max_replan_iterations: int = 2,
    vlm_cache: bool = True,
    tools: Sequence[str] | None = None,
    config_json: str | None = None,
    mode: str | None = None,
    dataset_json: str | None = None,
    spec_json: str | None = None,
    group: str | None = None,
) -> str:
    """Create a running job; ``tools``: a metric job, whose runs only run these tools;
    ``config_json``: the configuration its items run with (:mod:`agentic_iqa.runconfig`);
    ``mode``: agent, vlm or tools (a metric job's is tools); ``dataset_json``: the public
    dataset it was read from; ``spec_json``: the job whole (:mod:`agentic_iqa.jobs.spec`);
    ``group``: the sweep it belongs to."""
    mode = mode or ("tools" if tools else "agent")
    if mode not in JOB_MODES or (mode == "tools") != bool(tools):
        raise ValueError(
            f"mode {mode!r} with tools {tools!r}: the modes are {JOB_MODES}, "
            "and tools mode is exactly a job with tools"
        )
    job = Job(
        name=name,
        manifest=manifest,
        default_query=default_query,
        root=root,
        max_replan_iterations=max_replan_iterations,
        status="running",
        vlm_cache=vlm_cache,
        tools=",".join(tools) if tools else None,
        config_json=config_json,
        mode=mode,
        dataset_json=dataset_json,
        spec_json=spec_json,
        job_group=group,
        **{column: 0 for column in ITEM_COUNTERS.values()},
    )  # counted from its first item
    # Its items come after every item stored so far: walks through them, and its first claim,
    # start there (the last entry of the primary key: one probe).
    job.items_after = job.claim_after = session.scalar(select(func.max(JobItem.id))) or 0
    session.add(job)
    session.flush()
    return job.id


def set_dispatch(
    session: Session, job_id: str, dispatch: str, *, holder: str | None = None
) -> None:
    """Say who feeds the job from now on: ``workers`` (the supervisor) or ``local``; ``holder``:
    the local process that renews its leases (:class:`~agentic_iqa.runtime.heartbeat.Holder`
    as JSON), so that a resume can tell whether it is still there."""
    job = get_job(session, job_id)
    job.dispatch, job.lease_holder = dispatch, holder


@dataclass(frozen=True)
class Leases:
    """The live leases of a job's runs in flight: how many, when the last runs out, and the
    local process recorded as renewing them (None: the workers, or a job stored before)."""

    live: int
    until: datetime | None
    holder: str | None


def leases(session: Session, job_id: str) -> Leases:
    """Return the job's live leases (:class:`Leases`), read in one statement and its job's row."""
    live, until = session.execute(
        select(func.count(), func.max(Run.lease_until)).where(
            Run.job_id == job_id,
            Run.status.in_(("pending", "running")),
            Run.lease_until.is_not(None),
            Run.lease_until >= utc_now(),
        )
    ).one()
    return Leases(int(live or 0), until, get_job(session, job_id).lease_holder)


def extend_leases(session: Session, job_id: str, seconds: float) -> int:
    """Push the leases of the job's open runs ``seconds`` ahead (the local runner's sign of
    life); returns how many."""
    return int(
        changed_rows(
            session.execute(
                update(Run)
                .where(Run.job_id == job_id, Run.status.in_(("pending", "running")))
                .values(lease_until=lease_deadline(seconds))
            )
        )
        or 0
    )


def finish_complete_jobs(session: Session) -> int:
    """Mark running jobs with nothing pending or queued done (a lost or raced closing)."""
    open_items = select(JobItem.id).where(
        JobItem.job_id == Job.id, JobItem.status.in_(("pending", "queued"))
    )
    jobs = session.scalars(
        select(Job)
        .where(Job.status == "running", ~open_items.exists(), Job.submitting.is_(False))
        .with_for_update(skip_locked=True)
    ).all()
    for job in jobs:
        job.status, job.finished_at = "done", utc_now()
        recount(session, job.id)  # whatever was lost on the way, its counts are right now
    return len(jobs)


@dataclass(frozen=True)
class Claimed:
    """A claimed item's new run: its id, its initial state, and the digests its item's
    objects had at submit (by location), which is all its first step needs to begin."""

    run_id: str
    state: AgenticIQAState
    digests: dict[str, str]


def claim_items(
    session: Session, job: Job, limit: int, *, lease_seconds: float | None = None
) -> list[Claimed]:
    """Give up to ``limit`` pending items a run each and mark them queued, in one
    transaction of a few statements; returns the new runs (:class:`Claimed`).

    ``lease_seconds``: the runs go to workers and are supervised from now on.
    """
    if limit <= 0 or job.status != "running":
        return []
    # The next pending items in id order, above the last one claimed: a window of the index,
    # never the items already run (PostgreSQL skips rows another feeder has locked).
    items = _pending(session, job.id, job.claim_after, limit)
    below = job.items_pending is None or job.items_pending > len(items)
    if len(items) < limit and job.claim_after > job.items_after and below:
        items = _pending(session, job.id, job.items_after, limit)  # reopened (a resume)
    if not items:
        return []
    runs = create_runs(
        session,
        [(item.query or job.default_query, str(item.image), item.reference) for item in items],
        max_replan_iterations=job.max_replan_iterations,
        job_id=job.id,
        lease_seconds=lease_seconds,
        metric_tools=job.metric_tools,
        mode="vlm" if job.mode == "vlm" else "agent",
    )
    now = utc_now()
    session.execute(
        _QUEUE_ITEM,
        [
            {"b_id": item.id, "b_run": run_id, "b_now": now}
            for item, (run_id, _state) in zip(items, runs, strict=True)
        ],
    )
    move(session, job.id, {("pending", "queued"): len(runs)})
    last = max(item.id for item in items)
    session.execute(
        update(Job.__table__)
        .where(Job.__table__.c.id == job.id, Job.__table__.c.claim_after < last)
        .values(claim_after=last)
    )
    return [
        Claimed(
            run_id,
            state,
            {
                location: digest
                for location, digest in (
                    (item.image, item.image_digest),
                    (item.reference, item.reference_digest),
                )
                if location and digest
            },
        )
        for item, (run_id, state) in zip(items, runs, strict=True)
    ]


def _pending(session: Session, job_id: str, after: int, limit: int) -> list[Any]:
    """Return up to ``limit`` of the job's pending items with an id above ``after``, in id order,
    locked (the columns a claim needs)."""
    return list(
        session.execute(
            select(
                _ITEMS.c.id,
                _ITEMS.c.query,
                _ITEMS.c.image,
                _ITEMS.c.reference,
                _ITEMS.c.image_digest,
                _ITEMS.c.reference_digest,
            )
            .where(_ITEMS.c.job_id == job_id, _ITEMS.c.status == "pending", _ITEMS.c.id > after)
            .order_by(_ITEMS.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        ).all()
    )


def cancel(session: Session, job_id: str) -> int:
    """Stop a job: waiting items are cancelled; runs already on workers end as cancelled."""
    job = get_job(session, job_id)
    if job.status != "running":
        return 0
    job.status, job.finished_at = "cancelled", utc_now()
    result = session.execute(
        update(JobItem)
        .where(JobItem.job_id == job_id, JobItem.status == "pending")
        .values(status="cancelled", finished_at=utc_now())
    )
    cancelled = int(changed_rows(result) or 0)
    move(session, job_id, {("pending", "cancelled"): cancelled})
    return cancelled


def store_headline(session: Session, job_id: str, document: str) -> bool:
    """Keep what ``eval list`` shows of an ended job (:mod:`agentic_iqa.runtime.headline`);
    False when the job is running again (a resume: its figures would be of another job)."""
    return bool(
        changed_rows(
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.status != "running")
                .values(headline_json=document)
            )
        )
    )


def note_waiting(session: Session, job_id: str, reason: str) -> None:
    """Say why a process could not run the job's items as submitted (``eval status``)."""
    session.execute(
        update(Job).where(Job.id == job_id).values(waiting=redact(reason), waiting_at=utc_now())
    )


def stop_on_fatal_error(session: Session, job_id: str, error: Exception, reason: str) -> bool:
    """Stop the job after a run of it failed on a fatal backend error, if the policy says so
    (:func:`agentic_iqa.jobs.policy.stops_job`), with one message; returns whether it did.
    Items not started are cancelled, runs in flight end as cancelled; ``eval resume`` reopens
    them once the cause is fixed."""
    from ..jobs.policy import stop_message, stops_job

    job = get_job(session, job_id, lock=True)
    if job.status != "running":
        return False
    status = getattr(error, "status", None)
    done = counts(session, job_id).get("done", 0)
    alike = 0
    if status is not None:
        alike = int(
            session.scalar(
                select(func.count())
                .select_from(JobItem)
                .join(Run, Run.id == JobItem.run_id)
                .where(
                    JobItem.job_id == job_id,
                    Run.status == "failed",
                    Run.error.contains(f"HTTP {status}"),
                )
            )
            or 0
        )
    if not stops_job(status, done=done, failed_alike=alike):
        return False
    message = redact(stop_message(reason))
    cancel(session, job_id)
    job.error = message
    session.execute(
        update(JobItem)
        .where(JobItem.job_id == job_id, JobItem.status == "cancelled", JobItem.error.is_(None))
        .values(error=message)
    )
    return True


def reopen(session: Session, job_id: str) -> tuple[int, list[str]]:
    """Resume: failed and cancelled items that did run go back to pending (a new run each);
    queued items keep their run, which is handed back for re-coordination.  Items that never
    ran because the row itself is bad stay failed: rerunning cannot fix a missing file.
    Returns (items reopened, run ids to re-coordinate)."""
    job = get_job(session, job_id)
    job.status, job.finished_at, job.error = "running", None, None
    job.headline_json = None  # its figures change: computed again when it ends
    job.claim_after = job.items_after  # items below the last one claimed are pending again
    reopened = 0
    for status, which in (("failed", JobItem.run_id.is_not(None)), ("cancelled", true())):
        again = int(
            changed_rows(
                session.execute(
                    update(JobItem)
                    .where(JobItem.job_id == job_id, JobItem.status == status, which)
                    .values(
                        status="pending", run_id=None, error=None, queued_at=None, finished_at=None
                    )
                )
            )
            or 0
        )
        move(session, job_id, {(status, "pending"): again})
        reopened += again
    queued = session.scalars(
        select(JobItem.run_id)
        .join(Run, Run.id == JobItem.run_id)
        .where(
            JobItem.job_id == job_id,
            JobItem.status == "queued",
            Run.status.in_(("pending", "running")),
        )
    ).all()
    # A queued item whose run already ended (its closing was lost) is closed now.
    for run in session.scalars(
        select(Run)
        .join(JobItem, JobItem.run_id == Run.id)
        .where(
            JobItem.job_id == job_id,
            JobItem.status == "queued",
            Run.status.in_(("succeeded", "failed")),
        )
    ):
        close_item_for_run(session, run)
    finish_if_complete(session, job)
    return reopened, [r for r in queued if r]
