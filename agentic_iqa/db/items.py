"""A job's item closes when its run ends: done or failed (cancelled when its job was).

Below both writers of the database (:mod:`.steps`, which ends runs, and :mod:`.jobs`), so
neither has to import the other.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..jobs.errors import readable
from .models import Job, JobItem, Run, utc_now


def close_item_for_run(session: Session, run: Run) -> None:
    """A run of a job ended: its item is done or failed (cancelled if the job was), with the
    run's error as one readable sentence (:func:`~agentic_iqa.jobs.errors.readable`); the run
    keeps it whole."""
    if run.job_id is None:
        return
    # The job's row is locked first: two runs closing the last two items at once would each
    # count the other's item as still open, and the job would never be marked done.
    job = session.get(Job, run.job_id, with_for_update=True, populate_existing=True)
    status = "done" if run.status == "succeeded" else "failed"
    if job is not None and job.status == "cancelled" and status == "failed":
        status = "cancelled"
    session.execute(
        update(JobItem).where(JobItem.run_id == run.id, JobItem.status == "queued")
        .values(status=status, error=None if status == "done" else readable(run.error),
                finished_at=utc_now())
    )
    if job is not None:
        # An item ran: whoever could not, someone could.  A run stopped here (Ctrl-C, a full
        # disk) stays stopped while its last items end: only a resume lifts that note.
        if job.waiting is not None and not job.waiting.startswith("interrupted"):
            job.waiting = job.waiting_at = None
        finish_if_complete(session, job)


def finish_if_complete(session: Session, job: Job) -> None:
    # Whether one item is still open, not how many: a count here would read every open item
    # of the job each time one closes (quadratic in the job's size).
    open_item = session.scalar(
        select(JobItem.id).where(JobItem.job_id == job.id,
                                 JobItem.status.in_(("pending", "queued"))).limit(1)
    )
    if job.status == "running" and open_item is None:
        job.status, job.finished_at = "done", utc_now()
