"""Writing a dataset job: created, items in, claimed a window at a time, cancelled, reopened,
stopped; its leases, and items whose closing was lost (the reads are in :mod:`.reads`).

Everything here works in batches and by SQL counts, so a job of 10,000 items never needs them
all in memory: items are inserted in chunks as the manifest streams, claimed a window at a time,
and exported with ``yield_per``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from ..redact import redact
from .items import close_item_for_run, finish_if_complete
from .models import JOB_MODES, Job, JobItem, Run, utc_now
from .reads import counts, get_job
from .steps import create_run, lease_deadline

INSERT_BATCH = 500
TERMINAL_ITEM = ("done", "failed", "cancelled")


def create_job(session: Session, *, name: str, manifest: str, default_query: str,
               root: str | None = None, max_replan_iterations: int = 2,
               vlm_cache: bool = True, tools: Sequence[str] | None = None,
               config_json: str | None = None, mode: str | None = None,
               dataset_json: str | None = None, spec_json: str | None = None,
               group: str | None = None) -> str:
    """A running job; ``tools``: a metric job, whose runs only run these tools;
    ``config_json``: the configuration its items run with (:mod:`agentic_iqa.runconfig`);
    ``mode``: agent, vlm or tools (a metric job's is tools); ``dataset_json``: the public
    dataset it was read from; ``spec_json``: the job whole (:mod:`agentic_iqa.jobs.spec`);
    ``group``: the sweep it belongs to."""
    mode = mode or ("tools" if tools else "agent")
    if mode not in JOB_MODES or (mode == "tools") != bool(tools):
        raise ValueError(f"mode {mode!r} with tools {tools!r}: the modes are {JOB_MODES}, "
                         "and tools mode is exactly a job with tools")
    job = Job(name=name, manifest=manifest, default_query=default_query, root=root,
              max_replan_iterations=max_replan_iterations, status="running",
              vlm_cache=vlm_cache, tools=",".join(tools) if tools else None,
              config_json=config_json, mode=mode, dataset_json=dataset_json,
              spec_json=spec_json, job_group=group)
    session.add(job)
    session.flush()
    return job.id


def set_dispatch(session: Session, job_id: str, dispatch: str, *,
                 holder: str | None = None) -> None:
    """Who feeds the job from now on: ``workers`` (the supervisor) or ``local``; ``holder``:
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
    """The job's live leases (:class:`Leases`), read in one statement and its job's row."""
    live, until = session.execute(
        select(func.count(), func.max(Run.lease_until))
        .where(Run.job_id == job_id, Run.status.in_(("pending", "running")),
               Run.lease_until.is_not(None), Run.lease_until >= utc_now())).one()
    return Leases(int(live or 0), until, get_job(session, job_id).lease_holder)


def extend_leases(session: Session, job_id: str, seconds: float) -> int:
    """Push the leases of the job's open runs ``seconds`` ahead (the local runner's sign of
    life); returns how many."""
    return int(session.execute(
        update(Run).where(Run.job_id == job_id, Run.status.in_(("pending", "running")))
        .values(lease_until=lease_deadline(seconds))).rowcount or 0)


def finish_complete_jobs(session: Session) -> int:
    """Running jobs with nothing pending or queued are done (a lost or raced closing)."""
    open_items = select(JobItem.id).where(JobItem.job_id == Job.id,
                                          JobItem.status.in_(("pending", "queued")))
    jobs = session.scalars(select(Job).where(Job.status == "running", ~open_items.exists())
                           .with_for_update(skip_locked=True)).all()
    for job in jobs:
        job.status, job.finished_at = "done", utc_now()
    return len(jobs)


def close_orphaned_items(session: Session) -> int:
    """Items still 'queued' whose run already ended (its closing was lost): close them now."""
    running_jobs = select(Job.id).where(Job.status == "running")
    runs = session.scalars(  # by (job, status): the index, not a scan of every item ever
        select(Run).join(JobItem, JobItem.run_id == Run.id)
        .where(JobItem.job_id.in_(running_jobs), JobItem.status == "queued",
               Run.status.in_(("succeeded", "failed")))
        .limit(500)
    ).all()
    for run in runs:
        close_item_for_run(session, run)
    return len(runs)


def add_items(session: Session, job_id: str, rows: Iterable[dict[str, Any]]) -> int:
    """Insert item rows (column dicts) in batches; returns how many."""
    batch: list[dict[str, Any]] = []
    total = 0
    for row in rows:
        batch.append({"job_id": job_id, **row})
        if len(batch) >= INSERT_BATCH:
            session.execute(insert(JobItem), batch)
            total += len(batch)
            batch.clear()
    if batch:
        session.execute(insert(JobItem), batch)
        total += len(batch)
    return total


def claim(session: Session, job: Job, limit: int, *, lease_seconds: float | None = None
          ) -> list[str]:
    """Give up to ``limit`` pending items a run each and mark them queued; returns run ids.

    ``lease_seconds``: the runs go to workers and are supervised from now on.
    """
    if limit <= 0 or job.status != "running":
        return []
    items = session.scalars(
        select(JobItem).where(JobItem.job_id == job.id, JobItem.status == "pending")
        .order_by(JobItem.id).limit(limit).with_for_update(skip_locked=True)
    ).all()
    run_ids = []
    for item in items:
        run_id = create_run(session, query=item.query or job.default_query,
                            image_path=str(item.image), reference_path=item.reference,
                            max_replan_iterations=job.max_replan_iterations, job_id=job.id,
                            lease_seconds=lease_seconds, metric_tools=job.metric_tools,
                            mode="vlm" if job.mode == "vlm" else "agent")
        item.run_id, item.status, item.queued_at = run_id, "queued", utc_now()
        run_ids.append(run_id)
    return run_ids


def cancel(session: Session, job_id: str) -> int:
    """Stop a job: waiting items are cancelled; runs already on workers end as cancelled."""
    job = get_job(session, job_id)
    if job.status != "running":
        return 0
    job.status, job.finished_at = "cancelled", utc_now()
    result = session.execute(
        update(JobItem).where(JobItem.job_id == job_id, JobItem.status == "pending")
        .values(status="cancelled", finished_at=utc_now())
    )
    return int(result.rowcount or 0)


def note_waiting(session: Session, job_id: str, reason: str) -> None:
    """A process could not run the job's items as submitted: say why (``eval status``)."""
    session.execute(update(Job).where(Job.id == job_id)
                    .values(waiting=redact(reason), waiting_at=utc_now()))


def stop_on_fatal_error(session: Session, job_id: str, error: Exception, reason: str) -> bool:
    """A run of the job failed on a fatal backend error: stop the job, if the policy says so
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
        alike = int(session.scalar(select(func.count()).select_from(JobItem).join(
            Run, Run.id == JobItem.run_id).where(
            JobItem.job_id == job_id, Run.status == "failed",
            Run.error.contains(f"HTTP {status}"))) or 0)
    if not stops_job(status, done=done, failed_alike=alike):
        return False
    message = redact(stop_message(reason))
    cancel(session, job_id)
    job.error = message
    session.execute(update(JobItem).where(JobItem.job_id == job_id, JobItem.status == "cancelled",
                                          JobItem.error.is_(None)).values(error=message))
    return True


def stored_objects(session: Session, job_id: str) -> list[tuple[int, str | None, str | None,
                                                                  str | None, str | None]]:
    """Open items with an image or reference in an object store: (id, image, its digest at
    submit, reference, its digest)."""
    return [tuple(row) for row in session.execute(  # type: ignore[misc]
        select(JobItem.id, JobItem.image, JobItem.image_digest, JobItem.reference,
               JobItem.reference_digest)
        .where(JobItem.job_id == job_id, JobItem.status.in_(("pending", "queued")),
               JobItem.image_digest.is_not(None) | JobItem.reference_digest.is_not(None)))]


def fail_changed(session: Session, failures: dict[int, str]) -> list[str]:
    """Items whose objects changed since submit fail with the reason (their runs in flight
    too); returns those runs."""
    runs: list[str] = []
    now = utc_now()
    for item_id, reason in failures.items():
        item = session.get(JobItem, item_id)
        if item is None:
            continue
        if item.run_id is not None:
            session.execute(update(Run).where(Run.id == item.run_id,
                                              Run.status.in_(("pending", "running")))
                            .values(status="failed", error=reason, finished_at=now,
                                    lease_until=None))
            runs.append(item.run_id)
        item.status, item.error, item.finished_at = "failed", reason, now
    session.flush()
    return runs


def reopen(session: Session, job_id: str) -> tuple[int, list[str]]:
    """Resume: failed and cancelled items that did run go back to pending (a new run each);
    queued items keep their run, which is handed back for re-coordination.  Items that never
    ran because the row itself is bad stay failed: rerunning cannot fix a missing file.
    Returns (items reopened, run ids to re-coordinate)."""
    job = get_job(session, job_id)
    job.status, job.finished_at, job.error = "running", None, None
    reopened = session.execute(
        update(JobItem).where(
            JobItem.job_id == job_id,
            ((JobItem.status == "failed") & JobItem.run_id.is_not(None))
            | (JobItem.status == "cancelled"),
        ).values(status="pending", run_id=None, error=None, queued_at=None, finished_at=None)
    )
    queued = session.scalars(
        select(JobItem.run_id).join(Run, Run.id == JobItem.run_id)
        .where(JobItem.job_id == job_id, JobItem.status == "queued",
               Run.status.in_(("pending", "running")))
    ).all()
    # A queued item whose run already ended (its closing was lost) is closed now.
    for run in session.scalars(
        select(Run).join(JobItem, JobItem.run_id == Run.id)
        .where(JobItem.job_id == job_id, JobItem.status == "queued",
               Run.status.in_(("succeeded", "failed")))
    ):
        close_item_for_run(session, run)
    finish_if_complete(session, job)
    return int(reopened.rowcount or 0), [r for r in queued if r]


