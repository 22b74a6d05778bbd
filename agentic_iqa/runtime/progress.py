"""Read where a dataset job stands: counts by state, rate, ETA, and the state a user is shown.

:func:`progress` reads a job's :class:`Progress` from SQL (its items counted, never loaded);
:func:`wait` polls it until the job ends; :func:`shown_state` and :func:`listed_state` say
"interrupted" or "stalled" where "running" would say something still works on it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from ..db.batch_requests import request_counts
from ..db.engine import read_scope
from ..db.items import counts as item_counts
from ..db.jobs import JobNotFound, get_job, has_runs, latest_job, live_leases, stalled_count
from ..db.models import Job, aware
from ..reports.unread import CANNOT_SEE_WARN_AT
from ..runconfig import RunConfig
from .heartbeat import Holder

if TYPE_CHECKING:  # the agent (pipeline, service) loads only where items run: not for status
    pass


@dataclass(frozen=True)
class BatchProgress:
    """Where a batch job's rounds are: ``round`` batches sent so far (0: none yet), the open
    ones (:class:`~agentic_iqa.db.batches.BatchView`), requests by state."""

    round: int
    open: tuple[Any, ...]
    requests: dict[str, int]


@dataclass(frozen=True)
class Progress:
    job_id: str
    name: str
    status: str
    counts: dict[str, int]
    created_at: datetime
    finished_at: datetime | None
    #: Items in flight with no progress for longer than their lease (about to be re-sent, or
    #: no worker is running): an ETA would be a lie while there are any.
    stalled: int = 0
    #: A metric job's tools (``eval submit --tools``); None for an agent job.
    tools: tuple[str, ...] | None = None
    #: Why the job stopped early (its backend refuses every request); None otherwise.
    error: str | None = None
    #: Why a process could not run the job's items as submitted (a worker without the key).
    waiting: str | None = None
    #: A local job whose process is gone: open items and no lease alive (``eval resume``).
    orphaned: bool = False
    #: A batch job (``--batch``): its rounds so far, its open batches, its requests by state.
    batch: BatchProgress | None = None
    #: Done items whose model said it cannot see the image (``jobs.items_cannot_see``), and
    #: ``backend/model`` of the job's answering role where that many warrant a warning.
    cannot_see: int = 0
    model: str | None = None

    @property
    def warnings(self) -> list[str]:
        """What the reader must know about the answers so far: that the model may not be
        receiving the images (:func:`~agentic_iqa.reports.unread.cannot_see_warning`)."""
        from ..reports.unread import cannot_see_warning

        warning = cannot_see_warning(self.cannot_see, self.counts.get("done", 0), self.model)
        return [warning] if warning else []

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(self.counts.get(s, 0) for s in ("done", "failed", "cancelled"))

    @property
    def elapsed(self) -> float:
        end = self.finished_at or datetime.now(UTC)
        return max(1e-9, (end - self.created_at).total_seconds())

    @property
    def throughput(self) -> float:
        """Items finished per second since the job was submitted."""
        return self.finished / self.elapsed

    @property
    def interrupted(self) -> bool:
        """Its run here was stopped (Ctrl-C: :func:`.local.note_interrupted`; a full disk:
        :func:`.local.note_disk_full`) and nothing went on since."""
        return bool(self.waiting and self.waiting.startswith(INTERRUPTED))

    @property
    def state(self) -> str:
        """The state a user is shown (:func:`shown_state`)."""
        return shown_state(self.status, self.waiting, self.orphaned)

    @property
    def disk_full(self) -> bool:
        """Its run here stopped on a full disk, and nothing went on since."""
        return bool(self.waiting and self.waiting.startswith(DISK_FULL))

    @property
    def eta_seconds(self) -> float | None:
        if self.stalled or self.orphaned or self.interrupted:
            return None
        remaining = self.total - self.finished
        if remaining == 0:
            return 0.0
        return remaining / self.throughput if self.throughput > 0 else None


#: How a job's ``waiting`` note begins when its run here was stopped before its end.
INTERRUPTED = "interrupted"


#: ... and when that was a full disk.
DISK_FULL = f"{INTERRUPTED}: the disk is full"


def shown_state(status: str, waiting: str | None, orphaned: bool) -> str:
    """Return the state a user is shown: the job's status, or while it runs "interrupted" (its run
    here was stopped; "interrupted (disk full)") or "stalled" (its process is gone), where
    "running" would say that something is still working on it."""
    if status != "running":
        return status
    if waiting and waiting.startswith(DISK_FULL):
        return "interrupted (disk full)"
    if waiting and waiting.startswith(INTERRUPTED):
        return INTERRUPTED
    return "stalled" if orphaned else status


def listed_state(session: Session, job: Job, counts: dict[str, int]) -> str:
    """Return :func:`shown_state` from the job's row, its ``counts`` and its runs' leases, reading
    none of its items (``eval list``: a job of a million items lists as fast as one of ten)."""
    if job.status != "running":
        return str(job.status)
    return shown_state(job.status, job.waiting, _orphaned(session, job, counts))


def _orphaned(session: Session, job: Job, counts: dict[str, int]) -> bool:
    """Return whether a running job has open items that no process works on: a local one whose
    holder is gone or whose leases all passed, or one never dispatched a minute after its submit."""
    if job.status != "running":
        return False
    open_items = counts.get("pending", 0) + counts.get("queued", 0)
    # A job whose process died before it began a single run (before it said where it runs)
    # is as orphaned as a local one, once the moment after submit is past.
    unclaimed = (
        open_items > 0
        and (datetime.now(UTC) - aware(job.created_at)).total_seconds() > UNDISPATCHED_SECONDS
        and not has_runs(session, job.id)
    )
    holder = Holder.from_json(job.lease_holder) if job.dispatch == "local" else None
    # A local job whose process is gone is stalled at once, not when its leases run out.
    return (
        (job.dispatch == "local" or unclaimed)
        and open_items > 0
        and (not live_leases(session, job.id) or (holder is not None and holder.state() == "gone"))
    )


#: A job with no run this long after it was created was never started by any process.
UNDISPATCHED_SECONDS = 60.0


@functools.lru_cache(maxsize=64)
def is_batch(config_json: str | None) -> bool:
    """Return whether a job's stored configuration sends its calls in batches (parsed once: every
    feed asks)."""
    if not config_json:
        return False
    return RunConfig.from_json(config_json).batch


def progress(engine: Engine, job_id: str | None = None) -> Progress:
    """Return counts by state from SQL; the latest job when ``job_id`` is None."""
    with read_scope(engine) as session:
        job = get_job(session, job_id) if job_id else latest_job(session)
        if job is None:
            raise JobNotFound("(latest)")
        running = job.status == "running"
        stalled = stalled_count(session, job.id) if running else 0
        counts = item_counts(session, job.id)
        orphaned = _orphaned(session, job, counts)
        tools = job.metric_tools
        batch = None
        if is_batch(job.config_json):
            from ..db import batches as batch_store

            batch = BatchProgress(
                batch_store.next_round(session, job.id) - 1,
                tuple(batch_store.batch_views(session, job.id)),
                request_counts(session, job.id),
            )
        cannot_see = int(job.items_cannot_see or 0)
        return Progress(
            job.id,
            job.name,
            job.status,
            counts,
            job.created_at,
            job.finished_at,
            stalled,
            tuple(tools) if tools else None,
            job.error,
            job.waiting if running else None,
            orphaned,
            batch,
            cannot_see,
            _answering_model(job.config_json) if cannot_see >= CANNOT_SEE_WARN_AT else None,
        )


def _answering_model(config_json: str | None) -> str | None:
    """``backend/model`` of the role that answers, from a job's stored configuration."""
    from ..reports.unread import answering_model

    return answering_model(RunConfig.from_json(config_json).describe()) if config_json else None


def wait(
    engine: Engine,
    job_id: str,
    *,
    poll: float = 1.0,
    timeout: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> Progress:
    """Block until the job is no longer running (or ``timeout`` passes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        current = progress(engine, job_id)
        if on_progress is not None:
            on_progress(current)
        if current.status != "running":
            return current
        if deadline is not None and time.monotonic() > deadline:
            return current
        time.sleep(poll)
