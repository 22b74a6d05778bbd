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
the provider's answers back.

Nothing is paid for twice:

- The batch row is committed before the provider is asked.  A row still "submitting"
  :data:`STALE_SUBMITTING` seconds later was left by a process that died around the create
  call: its batch is looked for (OpenAI: by our id in its metadata; Anthropic, which keeps no
  metadata: the oldest unrecorded batch of the same size created since the row) and adopted;
  only a batch that is not there is sent (again).  An adopted batch's results must carry the
  row's custom_ids (:func:`agentic_iqa.db.batches.line_id`): one that proves another's is
  set aside unread and the row's own is looked for again.
- The provider's SDK never retries a create (a retry after a timeout could create a second
  batch); the row stays "submitting" and is looked for as above.
- A job that is no longer running (cancelled, stopped) has its open batches cancelled at the
  provider: by ``eval cancel`` at once, else by the next tick that reaches the provider (a
  provider down, a key missing where the cancel ran, a batch created while the job was being
  cancelled).  What they answered before the cancel took hold is still read: a resume uses it.
- A request the provider refuses for good (the request is bad: HTTP 400, 401, 403, 404,
  422...) fails its run at once with the provider's reason; a transient error (429, 5xx,
  expired) sends it again in the next round, up to ``batch_max_tries`` batches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy.engine import Engine

from ..config import PipelineSettings
from ..db import batches as store
from ..db.batch_requests import (
    cancel_parked,
    claim_answered_runs,
    moving_runs,
    pending_requests,
    reopen_runs,
    running_batch_jobs,
)
from ..db.engine import read_scope, session_scope
from ..db.items import counts as item_counts
from ..db.jobs import get_job
from ..db.models import aware
from ..redact import redact
from ..runconfig import RunConfig, backend_configs
from ..vlm.base import FatalVLMError, Role, VLMError

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
    #: Batches whose creation was never recorded, found at the provider and adopted.
    recovered: list[str] = field(default_factory=list)
    #: Batches of jobs no longer running, cancelled at the provider.
    cancelled: list[str] = field(default_factory=list)
    polled: int = 0
    read: dict[str, int] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return bool(self.submitted or self.recovered or self.read or self.resumed)


#: Batch statuses after a cancel (OpenAI's, then Anthropic's, while it takes hold).
_CANCELLING = frozenset({"cancelling", "cancelled", "canceling", "canceled"})


_apis: dict[tuple[str, str], Any] = {}
_apis_lock = threading.Lock()


def api_for(config_json: str, role: str) -> Any:
    """Return the provider's batch interface for a job's role, built once per process."""
    from ..vlm import create_batch_api

    with _apis_lock:
        key = (config_json, role)
        if key not in _apis:
            # A batch row's role is one of ROLES: the batch was sent for it.
            config = backend_configs(RunConfig.from_json(config_json))[cast(Role, role)]
            _apis[key] = create_batch_api(config)
        return _apis[key]


def role_groups(config: RunConfig) -> dict[str, str]:
    """Map each role to the first role with the same backend, model and endpoint: their requests
    share a batch."""
    groups: dict[str, str] = {}
    first: dict[tuple[str, str | None, str | None], str] = {}
    for role, backend in config.roles.items():
        key = (backend.backend, backend.model, backend.base_url)
        groups[role] = first.setdefault(key, role)
    return groups


def tick(
    engine: Engine,
    *,
    dispatch: Callable[[str], None],
    lease_seconds: float | None,
    job_id: str | None = None,
    settings: PipelineSettings | None = None,
) -> RoundTick:
    """Make one pass over the batch jobs (or ``job_id``): poll what is due, read what ended, send
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
            jobs = [job_id] if job_id else running_batch_jobs(session)
    except Exception as exc:
        result.errors.append(f"reading batch jobs: {redact(str(exc))}")
        return result
    for job in jobs:
        try:
            _advance_job(engine, job, settings, result, dispatch, lease_seconds)
        except Exception as exc:
            result.errors.append(f"job {job}: {redact(str(exc))}")
    return result


def _advance_job(
    engine: Engine,
    job_id: str,
    settings: PipelineSettings,
    result: RoundTick,
    dispatch: Callable[[str], None],
    lease_seconds: float | None,
) -> None:
    with session_scope(engine) as session:
        job = get_job(session, job_id, lock=True)
        if job.status != "running" or not job.config_json:
            return
        resumed = claim_answered_runs(session, job_id, lease_seconds)
    for run_id in resumed:  # after the commit, so whoever runs it finds it moving
        dispatch(run_id)
    result.resumed.extend(resumed)
    if resumed:
        return  # they are at work: the round waits for them to park
    with session_scope(engine) as session:
        job = get_job(session, job_id, lock=True)
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
    pending, oldest = pending_requests(session, job_id)
    if not pending:
        return False
    if settings.batch_round_size and pending >= settings.batch_round_size:
        return True
    if (
        oldest is not None
        and (datetime.now(UTC) - oldest).total_seconds() >= settings.batch_gather_seconds
    ):
        return True
    unclaimed = item_counts(session, job_id).get("pending", 0)
    return (
        not store.open_batches(session, job_id)
        and not unclaimed
        and not moving_runs(session, job_id)
    )


def _lines(requests: list[tuple[str, str]]) -> list[Any]:
    from ..vlm.batch_api import BatchLine
    from ..vlm.batching import request_from_json

    return [BatchLine(custom_id, request_from_json(text)) for custom_id, text in requests]


def _send(
    engine: Engine,
    job_id: str,
    config_json: str,
    batch: store.Gathered,
    settings: PipelineSettings,
    result: RoundTick,
) -> None:
    """Hand a gathered batch to its provider and record what it says."""
    api = api_for(config_json, batch.role)
    with session_scope(engine) as session:
        store.describe_batch(session, batch.batch_id, backend=api.backend, model=api.model)
    try:
        state = api.submit(
            _lines(batch.requests),
            metadata={METADATA_KEY: batch.batch_id, "agentic_iqa_job": job_id},
        )
    except FatalVLMError as refused:  # the whole batch refused (validation): stop the job
        _refused(engine, job_id, batch.batch_id, str(refused))
        result.errors.append(f"batch of job {job_id} refused: {refused}")
        return
    except (VLMError, OSError) as exc:  # unknown whether it was created: found or re-sent later
        result.errors.append(f"sending a batch of job {job_id}: {redact(str(exc))}")
        return
    _record(engine, batch.batch_id, state, settings, polls=0, submitted=True)
    result.submitted.append(state.provider_id)
    log.info("job %s: batch %s sent (%d requests)", job_id, state.provider_id, len(batch.requests))
    with read_scope(engine) as session:
        stopped = get_job(session, job_id).status != "running"
    if stopped:  # cancelled while the batch was being created: ``cancel`` could not see it
        try:
            _cancel_one(engine, settings, result, batch.batch_id, api, state.provider_id, 0)
        except (VLMError, OSError) as exc:  # the next tick cancels it
            result.errors.append(f"cancelling batch {state.provider_id}: {redact(str(exc))}")


def _refused(engine: Engine, job_id: str, batch_id: str, reason: str) -> None:
    from ..db import jobs as job_store

    message = f"the provider refused a batch of this job: {reason}"
    with session_scope(engine) as session:
        store.fail_unsent(session, batch_id, message)
        job = get_job(session, job_id, lock=True)
        if job.status == "running":
            job_store.cancel(session, job_id)
            cancel_parked(session, job_id)
            job.error = redact(message)


def _record(
    engine: Engine,
    batch_id: str,
    state: Any,
    settings: PipelineSettings,
    *,
    polls: int,
    submitted: bool = False,
) -> None:
    wait = min(settings.batch_poll_max, settings.batch_poll_initial * 2 ** min(polls, 30))
    with session_scope(engine) as session:
        store.record_state(
            session,
            batch_id,
            provider_id=state.provider_id,
            status=state.status,
            ended=state.ended,
            counts=dict(state.counts),
            expires_at=state.expires_at,
            error=state.error,
            submitted=submitted,
            next_poll_at=None if state.ended else datetime.now(UTC) + timedelta(seconds=wait),
        )


def _poll(engine: Engine, settings: PipelineSettings, result: RoundTick) -> None:
    with session_scope(engine) as session:
        due = [
            (batch.id, batch.job_id, batch.role, batch.provider_id, batch.polls)
            for batch in store.claim_polls(
                session,
                backoff=settings.batch_poll_initial,
                maximum=settings.batch_poll_max,
                stale_submitting=STALE_SUBMITTING,
            )
        ]
        jobs = {job_id: get_job(session, job_id) for _, job_id, _, _, _ in due}
        facts = {
            job_id: (job.config_json or "", job.status == "running") for job_id, job in jobs.items()
        }
    for batch_id, job_id, role, provider_id, polls in due:
        config_json, running = facts[job_id]
        try:
            _poll_one(
                engine,
                settings,
                result,
                batch_id,
                job_id,
                config_json,
                running,
                role,
                provider_id,
                polls,
            )
        except Exception as exc:  # this batch's turn comes again at its next poll
            result.errors.append(f"polling batch {provider_id or batch_id}: {redact(str(exc))}")


def _poll_one(
    engine: Engine,
    settings: PipelineSettings,
    result: RoundTick,
    batch_id: str,
    job_id: str,
    config_json: str,
    running: bool,
    role: str,
    provider_id: str | None,
    polls: int,
) -> None:
    api = api_for(config_json, role)
    result.polled += 1
    if provider_id is None:  # left "submitting" by a process that died while asking
        _recover(engine, settings, result, batch_id, job_id, running, api, polls)
        return
    state = api.retrieve(provider_id)
    if not running and not state.ended and state.status not in _CANCELLING:
        state = _cancel_one(engine, settings, result, batch_id, api, provider_id, polls)
    if state.ended and state.error and not state.counts.get("succeeded"):
        _refused(engine, job_id, batch_id, state.error)
        result.errors.append(f"batch {provider_id} of job {job_id} failed: {state.error}")
        return
    if not state.ended:
        _record(engine, batch_id, state, settings, polls=polls)
        return
    rows = _read(engine, api, batch_id, provider_id)
    if rows is None:  # adopted after a crash, and another's: look for the row's own again
        with session_scope(engine) as session:
            store.disown(
                session,
                batch_id,
                f"batch {provider_id} (found by its time and size "
                "after a crash) holds none of this batch's requests",
            )
        result.errors.append(f"batch {provider_id} was not this job's; looking again")
        return
    _record(engine, batch_id, state, settings, polls=polls)
    with session_scope(engine) as session:
        outcome = store.write_results(session, batch_id, rows, max_tries=settings.batch_max_tries)
    for kind, count in outcome.items():
        result.read[kind] = result.read.get(kind, 0) + count
    log.info("batch %s ended: %s", provider_id, outcome)


def _read(
    engine: Engine, api: Any, batch_id: str, provider_id: str
) -> list[tuple[str, str, str | None, str | None]] | None:
    """Return an ended batch's results as rows for :func:`agentic_iqa.db.batches.write_results`;
    None when they name requests of another batch (one adopted after a crash by its time and
    size that proved another's: another deployment's on the same account, say).  A batch
    sent before custom ids named their batch (``q<id>``) is read by those ids."""
    import re

    from ..vlm.batching import request_from_json, response_json

    with read_scope(engine) as session:
        requests = store.submitted_requests(session, batch_id)
    asked = {store.line_id(batch_id, row_id): request_from_json(text) for row_id, text in requests}
    answers = list(api.results(provider_id, asked))
    prefix = store.line_prefix(batch_id)
    foreign = [answer.custom_id for answer in answers if not answer.custom_id.startswith(prefix)]
    renamed: dict[str, str] = {}
    if foreign and all(re.fullmatch(r"q\d+", custom_id) for custom_id in foreign):
        legacy = {f"q{row_id}": store.line_id(batch_id, row_id) for row_id, _ in requests}
        renamed = legacy
        answers = list(api.results(provider_id, {old: asked[new] for old, new in legacy.items()}))
    elif foreign:
        return None
    return [
        (
            renamed.get(answer.custom_id, answer.custom_id),
            "refused" if answer.permanent else answer.kind,
            response_json(answer.response) if answer.response is not None else None,
            answer.error,
        )
        for answer in answers
    ]


def _recover(
    engine: Engine,
    settings: PipelineSettings,
    result: RoundTick,
    batch_id: str,
    job_id: str,
    running: bool,
    api: Any,
    polls: int,
) -> None:
    """Recover a batch row left "submitting": adopt its batch if the provider has it, else send it
    (its job still running) or give its requests back (the job stopped)."""
    from ..db.models import VlmBatch

    with read_scope(engine) as session:
        row = session.get(VlmBatch, batch_id)
        assert row is not None  # batch rows are never deleted
        created = aware(row.created_at)
        count = row.request_count
        taken = store.taken_provider_ids(session, created - timedelta(minutes=10))
    found = api.recover(
        {METADATA_KEY: batch_id, "agentic_iqa_job": job_id},
        created_after=created,
        request_count=count,
        taken=taken,
    )
    if found is not None:
        result.recovered.append(found.provider_id)
        log.warning(
            "job %s: batch %s was created but never recorded (a process died); adopted",
            job_id,
            found.provider_id,
        )
        _record(engine, batch_id, found, settings, polls=polls, submitted=True)
        return
    if not running:
        with session_scope(engine) as session:
            store.release(session, batch_id, "never reached the provider; its job stopped")
        return
    with read_scope(engine) as session:
        requests = [
            (store.line_id(batch_id, row_id), text)
            for row_id, text in store.submitted_requests(session, batch_id)
        ]
    found = api.submit(
        _lines(requests), metadata={METADATA_KEY: batch_id, "agentic_iqa_job": job_id}
    )
    result.submitted.append(found.provider_id)
    _record(engine, batch_id, found, settings, polls=polls, submitted=True)


def _cancel_one(
    engine: Engine,
    settings: PipelineSettings,
    result: RoundTick,
    batch_id: str,
    api: Any,
    provider_id: str,
    polls: int,
) -> Any:
    state = api.cancel(provider_id)
    _record(engine, batch_id, state, settings, polls=polls)
    result.cancelled.append(provider_id)
    log.info("batch %s cancelled at the provider (its job is not running)", provider_id)
    return state


@dataclass
class Cancelled:
    """What :func:`cancel` did at the providers."""

    #: Provider ids of the batches cancelled now.
    cancelled: list[str] = field(default_factory=list)
    #: Provider ids of batches a cancel had already reached (a tick of the job's own process
    #: got there first).
    cancelling: list[str] = field(default_factory=list)
    #: Why a batch was not cancelled now (its provider unreachable, no key in this process,
    #: its creation under way): the next tick cancels it (a worker's supervisor within its
    #: interval; for a local job, ``eval resume`` or ``eval cancel`` again).
    deferred: list[str] = field(default_factory=list)


def cancel(engine: Engine, job_id: str) -> Cancelled:
    """Cancel the job's open batches at their providers (their answers so far are still read,
    and a resume uses them).  Call it once the job is no longer running: a batch that cannot
    be cancelled now is polled at once by the next tick, which cancels it.  Never raises for
    a provider's refusal or absence."""
    with session_scope(engine) as session:
        cancel_parked(session, job_id)
        store.poll_now(session, job_id)
        job = get_job(session, job_id)
        config_json = job.config_json or ""
        open_ = [
            (batch.id, batch.role, batch.provider_id, batch.polls)
            for batch in store.open_batches(session, job_id)
            if not batch.ended
        ]
    done = Cancelled()
    settings = PipelineSettings.load()
    ticked = RoundTick()
    for batch_id, role, provider_id, polls in open_:
        if provider_id is None:
            done.deferred.append(
                f"a batch whose creation is not recorded yet (row "
                f"{batch_id[:8]}): cancelled once it is, or found"
            )
            continue
        try:
            api = api_for(config_json, role)
            state = api.retrieve(provider_id)
            # Cancelled already (by the job's own runner, which saw it cancelled first): said
            # as cancelled all the same, so the user is told what became of it.
            if state.status in _CANCELLING or (state.ended and state.counts.get("canceled")):
                done.cancelling.append(provider_id)
                continue
            if state.ended:
                continue
            _cancel_one(engine, settings, ticked, batch_id, api, provider_id, polls)
        except (VLMError, OSError, ValueError) as exc:
            done.deferred.append(f"{provider_id}: {redact(str(exc))}")
            with session_scope(engine) as session:
                store.poll_now(session, job_id)
            continue
        done.cancelled.append(provider_id)
    return done


def check_supported(config: RunConfig) -> None:
    """Refuse a batch job its backends cannot run (builtin, a server with no batch endpoint):
    :class:`~agentic_iqa.vlm.base.VLMConfigurationError` with one line."""
    from ..vlm import create_batch_api
    from ..vlm.base import VLMConfigurationError

    if config.metric_tools:
        raise VLMConfigurationError(
            "--batch is for jobs that ask a model; a metric job (--tools) calls none: drop --batch"
        )
    roles = backend_configs(config)
    remote = {role: backend for role, backend in roles.items() if backend.backend != "builtin"}
    if not remote:
        raise VLMConfigurationError(
            "--batch sends the model calls to a provider's batch interface, and every role runs "
            "on the builtin backend (local and free): choose an openai or anthropic model "
            "(--model), or drop --batch"
        )
    for role, group in role_groups(config).items():
        if role == group and role in remote:
            api = create_batch_api(remote[role])
            try:
                api.check_supported()
            finally:
                api.close()


def drive_local(
    engine: Engine,
    job_id: str,
    walk: Callable[[list[str]], None],
    *,
    lease_seconds: float,
    settings: PipelineSettings | None = None,
    feed: Callable[[Callable[[str], None]], int],
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Drive a local batch job's rounds in this process: walk new runs and runs with answers until
    they park or end, then :func:`tick`; sleep until the next poll when nothing moved.  Ends
    when the job has no open item (or was cancelled)."""
    settings = settings or PipelineSettings.load()
    while True:
        runs: list[str] = []
        feed(runs.append)
        if runs:
            walk(runs)
        done = tick(
            engine,
            dispatch=runs.append,
            lease_seconds=lease_seconds,
            job_id=job_id,
            settings=settings,
        )
        for error in done.errors:
            log.warning("%s", error)
        resumed = [run for run in done.resumed]
        if resumed:
            walk(resumed)
            continue
        with read_scope(engine) as session:
            job = get_job(session, job_id)
            counts = item_counts(session, job_id)
            waiting = store.open_batches(session, job_id)
            pending, _ = pending_requests(session, job_id)
            parked = reopen_runs(session, job_id)
        if job.status == "cancelled":  # a last pass cancels what ``eval cancel`` could not
            tick(
                engine,
                dispatch=lambda _run: None,
                lease_seconds=lease_seconds,
                job_id=job_id,
                settings=settings,
            )
        if job.status != "running":
            return
        if not (counts.get("pending", 0) + counts.get("queued", 0)):
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
    soonest = min(aware(moment) for moment in due)
    return min(settings.batch_poll_max, max(0.05, (soonest - now).total_seconds()))
