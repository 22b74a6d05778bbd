"""A batch job's rounds (``eval submit --batch``): requests gathered into provider batches,
batches polled, answers read, runs sent on.

A run of a batch job walks its steps as any run does, until a step asks for an answer that has
not come (:mod:`agentic_iqa.vlm.batching`); the run then parks with its request stored.  A
*round* gathers every waiting request of the job into batches (one per backend and model, split
at the provider's limit) once no run of the job is at work any more, or once
``batch_round_size`` requests wait, or the oldest has waited ``batch_gather_seconds``.  Open
batches are polled with a doubling wait; when one ends its answers are written to the requests
and every run with nothing left to wait for is sent on.

:func:`tick` does one pass of all that and is all the state there is: the database holds every
request, batch id and answer.  The workers' supervisor calls it (any worker of the default
queue, several at once are safe); a local job's submitting process calls it between walks of
its runs (:func:`drive_local`); a process killed anywhere loses nothing: the next tick reads
the provider's answers back.  The batch row is committed before the provider is asked, its id
in the batch's metadata, so a process killed in between finds the batch again (OpenAI; the
Anthropic API keeps no metadata, so there a batch whose creation was never recorded is sent
again after :data:`STALE_SUBMITTING` seconds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from ..config import PipelineSettings
from ..db import batches as store
from ..db import reads
from ..db.engine import read_scope, session_scope
from ..redact import redact
from ..runconfig import RunConfig, backend_configs
from ..vlm.base import FatalVLMError, VLMError

log = logging.getLogger(__name__)

#: Metadata key carrying our batch id to the provider (found again after a crash).
METADATA_KEY = "agentic_iqa_batch"
#: A batch row still "submitting" this long after it was written was left by a process that
#: died while asking the provider: it is looked for, and sent again if not found.
STALE_SUBMITTING = 120.0


@dataclass
class RoundTick:
    """What one pass did, for logs and tests."""

    submitted: list[str] = field(default_factory=list)
    polled: int = 0
    read: dict[str, int] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return bool(self.submitted or self.read or self.resumed)


_apis: dict[tuple[str, str], Any] = {}
_apis_lock = threading.Lock()


def api_for(config_json: str, role: str) -> Any:
    """The provider's batch interface for a job's role, built once per process."""
    from ..vlm.batch_api import batch_api

    with _apis_lock:
        key = (config_json, role)
        if key not in _apis:
            config = backend_configs(RunConfig.from_json(config_json))[role]
            _apis[key] = batch_api(config)
        return _apis[key]


def role_groups(config: RunConfig) -> dict[str, str]:
    """Each role to the first role with the same backend, model and endpoint: their requests
    share a batch."""
    groups: dict[str, str] = {}
    first: dict[tuple[str, str | None, str | None], str] = {}
    for role, backend in config.roles.items():
        key = (backend.backend, backend.model, backend.base_url)
        groups[role] = first.setdefault(key, role)
    return groups


def tick(engine: Engine, *, dispatch: Callable[[str], None], lease_seconds: float | None,
         job_id: str | None = None, settings: PipelineSettings | None = None) -> RoundTick:
    """One pass over the batch jobs (or ``job_id``): poll what is due, read what ended, send
    on the runs with answers, send a round's batch when it is time.  Never raises: a failure
    is recorded in the result and retried on the next pass."""
    settings = settings or PipelineSettings.load()
    result = RoundTick()
    try:
        _poll(engine, settings, result)
    except Exception as exc:
        result.errors.append(f"polling batches: {redact(str(exc))}")
    try:
        with read_scope(engine) as session:
            jobs = [job_id] if job_id else store.running_batch_jobs(session)
    except Exception as exc:
        result.errors.append(f"reading batch jobs: {redact(str(exc))}")
        return result
    for job in jobs:
        try:
            _advance_job(engine, job, settings, result, dispatch, lease_seconds)
        except Exception as exc:
            result.errors.append(f"job {job}: {redact(str(exc))}")
    return result


def _advance_job(engine: Engine, job_id: str, settings: PipelineSettings, result: RoundTick,
                 dispatch: Callable[[str], None], lease_seconds: float | None) -> None:
    with session_scope(engine) as session:
        job = reads.get_job(session, job_id, lock=True)
        if job.status != "running" or not job.config_json:
            return
        resumed = store.claim_answered_runs(session, job_id, lease_seconds)
    for run_id in resumed:  # after the commit, so whoever runs it finds it moving
        dispatch(run_id)
    result.resumed.extend(resumed)
    if resumed:
        return  # they are at work: the round waits for them to park
    with session_scope(engine) as session:
        job = reads.get_job(session, job_id, lock=True)
        if job.status != "running" or not job.config_json:
            return
        config = RunConfig.from_json(job.config_json)
        if not _round_due(session, job_id, settings):
            return
        limit = settings.batch_max_requests
        groups = role_groups(config)
        gathered = store.gather(session, job_id, groups, max_requests=limit or 50_000)
        config_json = job.config_json
    for batch in gathered:
        _send(engine, job_id, config_json, batch, settings, result)


def _round_due(session: Any, job_id: str, settings: PipelineSettings) -> bool:
    pending, oldest = store.pending_requests(session, job_id)
    if not pending:
        return False
    if settings.batch_round_size and pending >= settings.batch_round_size:
        return True
    if oldest is not None and (datetime.now(UTC) - oldest).total_seconds() \
            >= settings.batch_gather_seconds:
        return True
    unclaimed = reads.counts(session, job_id).get("pending", 0)
    return not store.open_batches(session, job_id) and not unclaimed \
        and not store.moving_runs(session, job_id)


def _lines(requests: list[tuple[str, str]]) -> list[Any]:
    from ..vlm.batch_api import BatchLine
    from ..vlm.batching import request_from_json

    return [BatchLine(custom_id, request_from_json(text)) for custom_id, text in requests]


def _send(engine: Engine, job_id: str, config_json: str, batch: store.Gathered,
          settings: PipelineSettings, result: RoundTick) -> None:
    """Hand a gathered batch to its provider and record what it says."""
    api = api_for(config_json, batch.role)
    with session_scope(engine) as session:
        store.describe_batch(session, batch.batch_id, backend=api.backend, model=api.model)
    try:
        state = api.submit(_lines(batch.requests),
                           metadata={METADATA_KEY: batch.batch_id, "agentic_iqa_job": job_id})
    except FatalVLMError as refused:  # the whole batch refused (validation): stop the job
        _refused(engine, job_id, batch.batch_id, str(refused))
        result.errors.append(f"batch of job {job_id} refused: {refused}")
        return
    except (VLMError, OSError) as exc:  # unknown whether it was created: found or re-sent later
        result.errors.append(f"sending a batch of job {job_id}: {redact(str(exc))}")
        return
    _record(engine, batch.batch_id, state, settings, polls=0, submitted=True)
    result.submitted.append(state.provider_id)
    log.info("job %s: batch %s sent (%d requests)", job_id, state.provider_id,
             len(batch.requests))


def _refused(engine: Engine, job_id: str, batch_id: str, reason: str) -> None:
    from ..db import jobs as job_store

    message = f"the provider refused a batch of this job: {reason}"
    with session_scope(engine) as session:
        store.fail_unsent(session, batch_id, message)
        job = reads.get_job(session, job_id, lock=True)
        if job.status == "running":
            job_store.cancel(session, job_id)
            store.cancel_parked(session, job_id)
            job.error = redact(message)


def _record(engine: Engine, batch_id: str, state: Any, settings: PipelineSettings, *,
            polls: int, submitted: bool = False) -> None:
    wait = min(settings.batch_poll_max, settings.batch_poll_initial * 2 ** min(polls, 30))
    with session_scope(engine) as session:
        store.record_state(
            session, batch_id, provider_id=state.provider_id, status=state.status,
            ended=state.ended, counts=dict(state.counts), expires_at=state.expires_at,
            error=state.error, submitted=submitted,
            next_poll_at=None if state.ended else datetime.now(UTC) + timedelta(seconds=wait))


def _poll(engine: Engine, settings: PipelineSettings, result: RoundTick) -> None:
    with session_scope(engine) as session:
        due = [(batch.id, batch.job_id, batch.role, batch.provider_id, batch.polls)
               for batch in store.claim_polls(session, backoff=settings.batch_poll_initial,
                                              maximum=settings.batch_poll_max,
                                              stale_submitting=STALE_SUBMITTING)]
        configs = {job_id: reads.get_job(session, job_id).config_json
                   for _, job_id, _, _, _ in due}
    for batch_id, job_id, role, provider_id, polls in due:
        try:
            _poll_one(engine, settings, result, batch_id, job_id, configs[job_id] or "", role,
                      provider_id, polls)
        except Exception as exc:  # this batch's turn comes again at its next poll
            result.errors.append(f"polling batch {provider_id or batch_id}: "
                                 f"{redact(str(exc))}")


def _poll_one(engine: Engine, settings: PipelineSettings, result: RoundTick, batch_id: str,
              job_id: str, config_json: str, role: str, provider_id: str | None,
              polls: int) -> None:
    api = api_for(config_json, role)
    result.polled += 1
    if provider_id is None:  # left "submitting" by a process that died while asking
        found = api.find(METADATA_KEY, batch_id)
        if found is None:
            with read_scope(engine) as session:
                requests = _requests_of(session, batch_id)
            found = api.submit(_lines(requests),
                               metadata={METADATA_KEY: batch_id, "agentic_iqa_job": job_id})
            result.submitted.append(found.provider_id)
        _record(engine, batch_id, found, settings, polls=polls, submitted=True)
        return
    state = api.retrieve(provider_id)
    if state.ended and state.error and not state.counts.get("succeeded"):
        _refused(engine, job_id, batch_id, state.error)
        result.errors.append(f"batch {provider_id} of job {job_id} failed: {state.error}")
        return
    if not state.ended:
        _record(engine, batch_id, state, settings, polls=polls)
        return
    from ..vlm.batching import request_from_json, response_json

    with read_scope(engine) as session:
        asked = {custom_id: request_from_json(text)
                 for custom_id, text in _requests_of(session, batch_id)}
    rows = [(answer.custom_id, answer.kind,
             response_json(answer.response) if answer.response is not None else None,
             answer.error) for answer in api.results(provider_id, asked)]
    _record(engine, batch_id, state, settings, polls=polls)
    with session_scope(engine) as session:
        outcome = store.write_results(session, batch_id, rows,
                                      max_tries=settings.batch_max_tries)
    for kind, count in outcome.items():
        result.read[kind] = result.read.get(kind, 0) + count
    log.info("batch %s ended: %s", provider_id, outcome)


def _requests_of(session: Any, batch_id: str) -> list[tuple[str, str]]:
    from sqlalchemy import select

    from ..db.models import BatchRequest

    rows = session.scalars(select(BatchRequest).where(
        BatchRequest.batch_id == batch_id, BatchRequest.status == "submitted")
        .order_by(BatchRequest.id))
    return [(row.custom_id, row.request_json) for row in rows]


def cancel(engine: Engine, job_id: str) -> list[str]:
    """Cancel the job's open batches at their providers (their answers so far are still read,
    and a resume uses them); returns the provider ids asked to cancel."""
    with session_scope(engine) as session:
        store.cancel_parked(session, job_id)
        job = reads.get_job(session, job_id)
        config_json = job.config_json or ""
        open_ = [(batch.id, batch.role, batch.provider_id, batch.polls)
                 for batch in store.open_batches(session, job_id)
                 if batch.provider_id and not batch.ended]
    cancelled = []
    settings = PipelineSettings.load()
    for batch_id, role, provider_id, polls in open_:
        state = api_for(config_json, role).cancel(provider_id)
        _record(engine, batch_id, state, settings, polls=polls)
        cancelled.append(provider_id)
    return cancelled


def check_supported(config: RunConfig) -> None:
    """Refuse a batch job its backends cannot run (builtin, a server with no batch endpoint):
    :class:`~agentic_iqa.vlm.base.VLMConfigurationError` with one line."""
    from ..vlm.base import VLMConfigurationError
    from ..vlm.batch_api import batch_api

    if config.metric_tools:
        raise VLMConfigurationError("--batch is for jobs that ask a model; a metric job "
                                    "(--tools) calls none: drop --batch")
    roles = backend_configs(config)
    remote = {role: backend for role, backend in roles.items() if backend.backend != "builtin"}
    if not remote:
        raise VLMConfigurationError(
            "--batch sends the model calls to a provider's batch interface, and every role runs "
            "on the builtin backend (local and free): choose an openai or anthropic model "
            "(--model), or drop --batch")
    for role, group in role_groups(config).items():
        if role == group and role in remote:
            api = batch_api(remote[role])
            try:
                api.check_supported()
            finally:
                api.close()


def drive_local(engine: Engine, job_id: str, walk: Callable[[list[str]], None], *,
                lease_seconds: float, settings: PipelineSettings | None = None,
                feed: Callable[[Callable[[str], None]], int],
                sleep: Callable[[float], None] = time.sleep) -> None:
    """A local batch job's rounds in this process: walk new runs and runs with answers until
    they park or end, then :func:`tick`; sleep until the next poll when nothing moved.  Ends
    when the job has no open item (or was cancelled)."""
    settings = settings or PipelineSettings.load()
    while True:
        runs: list[str] = []
        feed(runs.append)
        if runs:
            walk(runs)
        done = tick(engine, dispatch=runs.append, lease_seconds=lease_seconds, job_id=job_id,
                    settings=settings)
        for error in done.errors:
            log.warning("%s", error)
        resumed = [run for run in done.resumed]
        if resumed:
            walk(resumed)
            continue
        with read_scope(engine) as session:
            job = reads.get_job(session, job_id)
            counts = reads.counts(session, job_id)
            waiting = store.open_batches(session, job_id)
            pending, _ = store.pending_requests(session, job_id)
            parked = store.reopen_runs(session, job_id)
        if job.status != "running" or not (counts.get("pending", 0) + counts.get("queued", 0)):
            return
        if done.moved or runs:
            continue
        if not waiting and not pending and not parked:
            return  # nothing to wait for: the items are closed by their runs
        sleep(_until_next_poll(waiting, settings))


def _until_next_poll(waiting: list[Any], settings: PipelineSettings) -> float:
    now = datetime.now(UTC)
    due = [batch.next_poll_at for batch in waiting if batch.next_poll_at is not None]
    if not due:
        return min(1.0, settings.batch_poll_initial)
    soonest = min(moment if moment.tzinfo else moment.replace(tzinfo=UTC) for moment in due)
    return min(settings.batch_poll_max, max(0.05, (soonest - now).total_seconds()))
