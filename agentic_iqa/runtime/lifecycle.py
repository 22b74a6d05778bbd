"""Move a dataset job through its life after submit: feed, end, resume, cancel.

The same code path serves both transports: items are claimed a window at a time (each gets a
stored run, :func:`feed`), and each run is walked in a local thread pool
(:func:`.local.run_local`) or by the Celery coordinator on the workers.  Never one chord over
the dataset: at most ``window`` items are in flight, so memory stays flat whatever the job's
size.  :func:`job_ended` settles a job whose last item ended; :func:`resume` reopens what did
not finish; :func:`cancel` stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from ..config import PipelineSettings
from ..db import jobs as store
from ..db.about import job_spec as stored_job_spec
from ..db.engine import read_scope, session_scope
from ..db.items import counts as item_counts
from ..db.items import fail_changed, finish_if_complete, stored_objects
from ..db.jobs import get_job
from ..jobs.spec import JobSpec
from .progress import INTERRUPTED, is_batch

if TYPE_CHECKING:  # the agent (pipeline, service) loads only where items run: not for status
    pass


def job_spec(engine: Engine, job_id: str) -> JobSpec:
    """Return the job's record (reconstructed from its columns for a job stored before specs)."""
    with read_scope(engine) as session:
        return stored_job_spec(session, job_id)


def feed(
    engine: Engine,
    job_id: str,
    window: int,
    dispatch: Callable[[str], None],
    *,
    lease_seconds: float | None = None,
    dispatch_chunk: Callable[[list[str]], None] | None = None,
    chunk_size: int = 1,
) -> int:
    """Top the job up to ``window`` items in flight; returns how many runs were dispatched.

    The job's row is locked while counting and claiming, so two feeders (two supervisors) never
    both fill the same gap.  ``lease_seconds``: the runs are supervised (workers).
    ``dispatch_chunk``: a metric job's runs are sent ``chunk_size`` at a time through it (one
    message for many), a lone one through ``dispatch``.
    """
    claim = claim_runs(engine, job_id, window, lease_seconds)
    run_ids = [run.run_id for run in claim.runs]
    # after the commit, so a worker always finds its run
    if dispatch_chunk is not None and claim.metric and chunk_size > 1:
        for part in chunks(run_ids, chunk_size):
            if len(part) > 1:
                dispatch_chunk(part)
            else:
                dispatch(part[0])
    else:
        for run_id in run_ids:
            dispatch(run_id)
    return len(run_ids)


def chunks(run_ids: Sequence[str], size: int) -> list[list[str]]:
    """Return ``run_ids`` cut into lists of at most ``size``, in order."""
    return [list(run_ids[start : start + size]) for start in range(0, len(run_ids), size)]


@dataclass(frozen=True)
class Claim:
    """What :func:`claim_runs` took: the new runs, and what their first steps need of the job."""

    runs: list[store.Claimed]
    config_json: str | None
    vlm_cache: bool
    #: A metric job's: each run one step, its tools.
    metric: bool = False


def claim_runs(engine: Engine, job_id: str, window: int, lease_seconds: float | None) -> Claim:
    """Claim runs in :func:`feed`'s transaction: the job's row locked, its items in flight read
    from its counts, the gap claimed from the index (a window's work, whatever the job's size)."""
    with session_scope(engine) as session:
        job = store.get_job(session, job_id, lock=True)
        if is_batch(job.config_json):  # every item waits in the same rounds
            window = max(window, PipelineSettings.load().batch_window)
        in_flight = item_counts(session, job_id).get("queued", 0)
        runs = store.claim_items(session, job, window - in_flight, lease_seconds=lease_seconds)
        return Claim(runs, job.config_json, job.vlm_cache, bool(job.tools))


def job_ended(engine: Engine, job_id: str) -> bool:
    """Settle what a job that ended here leaves behind (its runner's last act; the workers'
    supervisor does the same for theirs): its counts checked against its items, the
    planner's statistics refreshed, its headline for ``eval list`` computed and stored
    (:mod:`.headline`).  False, doing nothing, when the job has not ended."""
    from ..db.engine import analyze
    from ..db.items import recount
    from . import headline

    with session_scope(engine) as session:
        if get_job(session, job_id, lock=True).status == "running":
            return False
        recount(session, job_id)
        analyze(session)
    headline.store(engine, job_id)
    return True


def resume(engine: Engine, job_id: str) -> tuple[int, list[str]]:
    """Reopen failed and cancelled items; returns (reopened, unfinished run ids to restart).

    Items already done are never recomputed.  An item whose image (or reference) in an object
    store is no longer the object found at submit fails with the reason instead: its score
    would be of another image.
    """
    with session_scope(engine) as session:
        reopened, runs = store.reopen(session, job_id)
        stored = stored_objects(session, job_id)
        job = get_job(session, job_id)
        if job.waiting and job.waiting.startswith(INTERRUPTED):  # it goes on now
            job.waiting = job.waiting_at = None
    changed = _changed_objects(stored)
    if not changed:
        return reopened, runs
    with session_scope(engine) as session:
        gone = set(fail_changed(session, changed))
        finish_if_complete(session, get_job(session, job_id))
    return reopened, [run for run in runs if run not in gone]


def _changed_objects(
    stored: list[tuple[int, str | None, str | None, str | None, str | None]],
) -> dict[int, str]:
    """Return the items whose objects are not those recorded at submit, with why."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display, stat

    changed: dict[int, str] = {}
    for item_id, image, image_digest, reference, reference_digest in stored:
        for location, recorded in ((image, image_digest), (reference, reference_digest)):
            if not location or not recorded or recorded.startswith("sha256:"):
                continue  # a checksum of the bytes: the worker's read compares it
            try:
                now = stat(location).digest
            except StorageError as exc:
                if exc.stops_job:
                    raise
                changed[item_id] = f"{display(location)} cannot be read any more: {exc}"
                break
            if now != recorded:
                changed[item_id] = (
                    f"{display(location)} changed since the job was submitted ({recorded}, "
                    f"now {now}): its score would be of another image; submit a new job to "
                    "assess the new version"
                )
                break
    return changed


def cancel(engine: Engine, job_id: str) -> int:
    """Cancel the job's open items; a batch job's open batches are cancelled at the provider
    too (what they answered so far is still read, and a resume uses it)."""
    with session_scope(engine) as session:
        cancelled = store.cancel(session, job_id)
        batched = is_batch(store.get_job(session, job_id).config_json)
    if batched:
        from . import batches

        batches.cancel(engine, job_id)
    settle_if_idle(engine, job_id)
    return cancelled


def settle_if_idle(engine: Engine, job_id: str) -> bool:
    """Settle a job stopped here (cancelled) with nothing in flight, which has ended:
    :func:`job_ended`. With items in flight, whoever ends the last of them settles it (its runner,
    or the workers' supervisor)."""
    with read_scope(engine) as session:
        in_flight = item_counts(session, job_id).get("queued", 0)
    return not in_flight and job_ended(engine, job_id)
