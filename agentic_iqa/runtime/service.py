"""Runs that persist: the same steps as the in-process agent, with every step in the database.

This layer sits between the domain (pipeline.py: pure step decisions and step functions) and the
transports: the embedded runner calls it in a loop, the Celery tasks (workers/) call it once per
message.  Each step is idempotent, keyed by (run, step, iteration): a step already recorded as
succeeded is skipped, so a redelivered message neither duplicates rows nor recomputes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from iqa_tools.storage.access import AccessPolicy, reading

from ..agents.team import Agents
from ..db import jobs, steps
from ..db.batch_requests import answers_for, park
from ..db.endings import ends_alone
from ..db.engine import session_scope
from ..db.jobs import job_cancelled
from ..db.models import utc_now
from ..db.runs import RunContext, extend_lease, fail_run, finish_run, load_state, run_context
from ..db.runs import create_run as create_run_row
from ..db.vlm_calls import store_vlm_calls, vlm_keys_asked
from ..pipeline import abandoned, next_step, run_step
from ..runconfig import CannotHonour, RunConfig
from ..state import AgenticIQAState, merge_state
from ..vlm.base import FatalVLMError, TransientVLMError
from ..vlm.batching import AwaitingBatch, BatchScope, batch_scope
from ..vlm.usage import CallCollector, collecting
from .heartbeat import HEARTBEATS

#: A step's reading (:func:`iqa_tools.storage.access.reading`'s arguments): the job's access policy
#: (None: the ambient one) and the digests recorded at submit, by location.
ReadingSpec = tuple[AccessPolicy | None, dict[str, str]]

#: The steps' logger, also the embedded walks' (``--debug`` turns it up).
log = logging.getLogger(__name__)

#: Jobs a fatal error stopped in this process (a key refused), or that its runner saw
#: cancelled (``eval cancel`` from another process): the runs it claimed for them, whose first
#: step was begun from the claim with no read of the job (:func:`.embedded.first_steps`),
#: read the job before they start, and end as cancelled without asking the model again.
STOPPED_HERE: set[str] = set()


#: A step's own time limit: given the step's name, a context around its work that raises
#: (an exception with a ``reason`` sentence) once the step has run too long.
TimeLimit = Callable[[str], AbstractContextManager[object]]

#: What runs a run's steps: the agents themselves (tests, an in-process caller that decides),
#: or a function giving them for the run's stored job configuration (the CLI and workers:
#: :func:`agentic_iqa.agents.team.agents_for`), which raises :class:`~.runconfig.CannotHonour`
#: where this process cannot run the job as it was submitted.
AgentsSource = Agents | Callable[[RunConfig | None], Agents]


def resolve_agents(source: AgentsSource, config: RunConfig | None) -> Agents:
    return source if isinstance(source, Agents) else source(config)


@dataclass(frozen=True)
class Begun:
    """A step begun in the transaction that decided on it (the step before it, or the
    coordinator, in the same process): what its own first transaction would otherwise read
    back from the database."""

    state: AgenticIQAState
    attempt: int
    job_id: str | None
    use_vlm_cache: bool
    asked: frozenset[str]
    #: The agents that run it: the job's configuration, honoured (checked before it began).
    agents: Agents
    #: What its reads go through (:mod:`iqa_tools.storage.access`): the job's policy, and the
    #: digests its item's objects had at submit.  No default: whoever begins a step says it.
    reading: ReadingSpec
    #: False: the step has no record yet (a local run's first step, known from its claim):
    #: its first attempt is recorded in the transaction that stores its outcome, one
    #: transaction for the whole step; a record someone else made meanwhile (a take-over)
    #: makes this attempt stale, as a fenced one would be.
    recorded: bool = True


@dataclass(frozen=True)
class NextStep:
    step: str
    iteration: int
    #: Set when the caller asked to go on with this step in its own process (``chain``): the
    #: step was begun in the transaction that decided on it; pass it to :func:`execute_step`.
    begun: Begun | None = None


@dataclass(frozen=True)
class Deferred:
    """A run's one step, done, whose outcome waits to be written with others' in one
    transaction (:func:`.embedded.end_deferred`): a chunk of a metric job's items."""

    run_id: str
    step: str
    iteration: int
    begun: Begun
    new_state: AgenticIQAState
    update: dict[str, Any]
    worker: str | None
    queue: str | None
    begun_at: datetime


#: What :func:`execute_step` did: ran the step, or skipped a duplicate or stale delivery.
StepOutcome = Literal["ran", "skipped"]
RAN: StepOutcome = "ran"
SKIPPED: StepOutcome = "skipped"

#: Whether the caller goes on with this upcoming step in its own process, given the run's
#: state: the queue it runs the step for (recorded on the step), or None when the step is to
#: be sent.
Chain = Callable[[NextStep, AgenticIQAState], str | None]


@dataclass(frozen=True)
class StepResult:
    outcome: StepOutcome
    #: When the step ran: what runs next, decided in the step's own transaction from the state
    #: it just wrote (no second transaction, no reload); None when the run is over.
    upcoming: NextStep | None = None


def create_run(
    engine: Engine,
    query: str,
    image_path: str,
    reference_path: str | None = None,
    *,
    max_replan_iterations: int = 2,
    backend: str | None = None,
    job_id: str | None = None,
    lease_seconds: float | None = None,
    config_json: str | None = None,
) -> str:
    """Return a stored run; with ``lease_seconds`` it is supervised (for runs handed to workers);
    ``config_json``: what shapes it, where it belongs to no job (the workers honour it)."""
    with session_scope(engine) as session:
        return create_run_row(
            session,
            query=query,
            image_path=image_path,
            reference_path=reference_path,
            max_replan_iterations=max_replan_iterations,
            backend=backend,
            job_id=job_id,
            lease_seconds=lease_seconds,
            config_json=config_json,
        )


def load(engine: Engine, run_id: str) -> AgenticIQAState:
    with session_scope(engine) as session:
        return load_state(session, run_id)


def advance(
    engine: Engine,
    run_id: str,
    *,
    lease_seconds: float | None = None,
    chain: Chain | None = None,
    worker: str | None = None,
    agents: AgentsSource | None = None,
) -> NextStep | None:
    """Return the step to run next for ``run_id``; when there is none, the run is closed.

    With ``lease_seconds`` the run's lease is renewed: its next step is about to be sent.
    With ``chain`` saying the caller runs that step itself (with ``agents``), it is begun here
    (when it is a first attempt and the job's configuration can be honoured here; otherwise
    it begins the usual way).
    """
    with session_scope(engine) as session:
        run = run_context(session, run_id)
        if run.status in {"succeeded", "failed"}:
            return None
        upcoming = _decide(session, run_id, run.state, lease_seconds, run.job_id)
        queue = None if upcoming is None or chain is None else chain(upcoming, run.state)
        if upcoming is None or queue is None or agents is None:
            return upcoming
        try:
            resolved = resolve_agents(agents, run.config)
        except CannotHonour:
            return upcoming  # its own delivery says why, and waits
        attempt = steps.first_attempt(
            session,
            run_id,
            upcoming.step,
            upcoming.iteration,
            worker=worker,
            queue=queue,
            lease_seconds=lease_seconds,
            run_started=run.status == "running",
        )
        if attempt is None:
            return upcoming
        return replace(
            upcoming,
            begun=Begun(
                run.state,
                attempt.attempts,
                run.job_id,
                run.vlm_cache,
                frozenset(vlm_keys_asked(session, run_id)),
                resolved,
                reading_of(run),
            ),
        )


def _decide(
    session: Session,
    run_id: str,
    state: AgenticIQAState,
    lease_seconds: float | None,
    job_id: str | None,
) -> NextStep | None:
    """Return the next step of a running run whose current, stored ``state`` is known; closes it
    when none.

    ``job_id``: the run's job (None: no job).
    """
    if job_id is not None and job_cancelled(session, job_id):
        fail_run(session, run_id, error="cancelled with its job")
        return None
    step = next_step(state)
    if step is None:
        finish_run(session, run_id, state=state, state_saved=True)
        return None
    if lease_seconds is not None:
        extend_lease(session, run_id, lease_seconds)
    return NextStep(step, state.get("iteration_count", 0))


def execute_step(
    engine: Engine,
    agents: AgentsSource,
    run_id: str,
    step: str,
    iteration: int,
    *,
    worker: str | None = None,
    queue: str | None = None,
    lease_seconds: float | None = None,
    max_attempts: int | None = None,
    begun: Begun | None = None,
    chain: Chain | None = None,
    own_attempt: int | None = None,
    time_limit: TimeLimit | None = None,
    endings: list[Deferred] | None = None,
) -> StepResult:
    """Run one step of one run, persist it and decide the next one (:class:`StepResult`);
    :data:`SKIPPED` when the step was already done or is no longer the run's next step (a
    duplicate or stale delivery).

    With ``lease_seconds`` (workers) the step holds a lease renewed by a heartbeat; a step
    still running elsewhere under a live lease raises :class:`steps.StepBusy`.  A
    :class:`TransientVLMError` is re-raised after the attempt is recorded, for the caller to
    retry; any other error fails the step and the run, with the reason.

    ``chain`` says whether the caller goes on with the upcoming step in this process; if so,
    that step is begun in the transaction that completes this one (one transaction per step
    instead of two) and comes back as ``upcoming.begun``, to be passed here as ``begun``.

    ``agents`` may be a function of the run's job configuration: where this process cannot
    honour it, :class:`~.runconfig.CannotHonour` is raised before anything is written.

    A database error after the step began carries the attempt (``exc.step_attempt``): a retry
    passing it as ``own_attempt`` takes its own dead attempt over at once instead of waiting
    for its lease (a dropped connection heals in seconds, not a lease).

    ``time_limit``: the step's own time limit, around its work alone (a worker's: a tool step
    gets the tool limit whichever task runs it); what it raises fails the step and the run with
    its sentence, as any error does, and never interrupts the writing of an outcome.

    ``endings``: where a metric run's one step, begun with no record, ends the run, its outcome
    is added there instead of written, for the caller to write with others'
    (:func:`.embedded.end_deferred`).
    """
    if begun is None:
        begun_here = _begin(
            engine,
            agents,
            run_id,
            step,
            iteration,
            worker=worker,
            queue=queue,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            own_attempt=own_attempt,
        )
        if isinstance(begun_here, StepResult):
            return begun_here
        begun = begun_here
    state, attempt = begun.state, begun.attempt
    started = time.perf_counter()
    begun_at = utc_now()
    # The step's VLM calls (tokens, latency, cache hits) are stored with its outcome, failed
    # attempts included: their calls were paid for.
    collector = CallCollector(use_cache=begun.use_vlm_cache, seen=set(begun.asked))
    scope = _batch_scope(engine, begun, run_id, step, iteration)
    try:
        with (
            HEARTBEATS.hold(engine, run_id, step, iteration, lease_seconds, attempt),
            collecting(collector),
            batch_scope(scope),
            reading(*begun.reading),
            time_limit(step) if time_limit is not None else nullcontext(),
        ):
            update = run_step(step, state, begun.agents)
    except AwaitingBatch as waiting:  # the run waits for a round (nothing was paid for)
        try:
            with session_scope(engine) as session:
                _record(session, begun, run_id, step, iteration, worker, queue, begun_at)
                park(
                    session,
                    job_id=begun.job_id or "",
                    run_id=run_id,
                    step=step,
                    iteration=iteration,
                    wanted=waiting.wanted,
                )
        except steps.StaleAttempt as stale:
            return _discarded(engine, stale, run_id, step, iteration, attempt, collector)
        return StepResult(RAN)
    except TransientVLMError as exc:
        try:
            with session_scope(engine) as session:
                _record(session, begun, run_id, step, iteration, worker, queue, begun_at)
                steps.fail_step(
                    session, run_id, step, iteration, error=f"transient: {exc}", attempt=attempt
                )
                store_vlm_calls(session, run_id, step, iteration, attempt, collector.records)
        except steps.StaleAttempt as stale:
            return _discarded(engine, stale, run_id, step, iteration, attempt, collector)
        raise
    except Exception as exc:  # a step that cannot finish ends the run, with the reason
        # A bad key, an unknown model, a store refusing the credential: every item would fail
        # alike, so the job stops with this one line (no traceback).
        fatal = isinstance(exc, FatalVLMError) or getattr(exc, "stops_job", False)
        reason = failure_reason(step, exc, fatal=fatal)
        # One line; the traceback only when this process logs at DEBUG (--debug, a worker's
        # --loglevel DEBUG), never in the item's error.
        log.error(
            "run %s: %s#%d failed: %s",
            run_id,
            step,
            iteration,
            reason,
            exc_info=not fatal and log.isEnabledFor(logging.DEBUG),
        )
        try:
            with session_scope(engine) as session:
                _record(session, begun, run_id, step, iteration, worker, queue, begun_at)
                steps.fail_step(session, run_id, step, iteration, error=reason, attempt=attempt)
                store_vlm_calls(session, run_id, step, iteration, attempt, collector.records)
                fail_run(session, run_id, error=reason)
                stopped = (
                    fatal
                    and begun.job_id is not None
                    and jobs.stop_on_fatal_error(session, begun.job_id, exc, reason)
                )
            if stopped:
                STOPPED_HERE.add(begun.job_id or "")
        except steps.StaleAttempt as stale:
            return _discarded(engine, stale, run_id, step, iteration, attempt, collector)
        return StepResult(RAN)
    key = step if step == "replan" else f"{step}#{iteration}"
    update = {
        **update,
        "step_seconds": {**state.get("step_seconds", {}), key: time.perf_counter() - started},
    }
    new_state = merge_state(state, update)
    try:
        return store_outcome(
            engine,
            run_id,
            step,
            iteration,
            begun,
            new_state,
            update,
            collector,
            worker=worker,
            queue=queue,
            lease_seconds=lease_seconds,
            chain=chain,
            begun_at=begun_at,
            endings=endings,
        )
    except steps.StaleAttempt as stale:
        return _discarded(engine, stale, run_id, step, iteration, attempt, collector)
    except DBAPIError as lost:  # the outcome was not written: whose attempt it was, for a retry
        lost.step_attempt = attempt  # type: ignore[attr-defined]
        raise


def failure_reason(step: str, exc: BaseException, *, fatal: bool = False) -> str:
    """Return why ``step`` failed, as one line: an error that carries its own sentence (a time
    limit: ``exc.reason``) says it; a fatal backend error its message; anything else its type and
    message, or its type alone when it has no message (never "X: X()")."""
    own = getattr(exc, "reason", None)
    if isinstance(own, str) and own:
        return own
    message = " ".join(str(exc).split())
    if fatal and message:
        return f"{step} failed: {message}"
    kind = type(exc).__name__
    if isinstance(exc, MemoryError):
        return (
            f"{step} ran out of memory: give the process more memory, or lower the tool "
            "budget (AGENTIC_IQA_TOOL_MEMORY, worker --max-memory) so that too large an "
            "image is refused before it is read"
        )
    if "SoftTimeLimitExceeded" in kind:  # a worker task's limit, past every step's own
        return (
            f"{step} ran past its worker task's time limit "
            "(AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT for tool steps, "
            "AGENTIC_IQA_VLM_SOFT_TIME_LIMIT for model steps): raise it for inputs this "
            "large"
        )
    if not message or message in (kind, f"{kind}()", repr(exc)):
        return f"{step} failed: {kind}"
    return f"{step} failed: {kind}: {message}"


def _batch_scope(
    engine: Engine, begun: Begun, run_id: str, step: str, iteration: int
) -> BatchScope:
    """Return the answers batches brought for this step (a batch job), else an empty scope that
    answers nothing and is never asked (its clients call the model online)."""
    if not begun.agents.batch:
        return BatchScope()
    with session_scope(engine) as session:
        return BatchScope(answers=answers_for(session, run_id, step, iteration))


def _discarded(
    engine: Engine,
    stale: steps.StaleAttempt,
    run_id: str,
    step: str,
    iteration: int,
    attempt: int,
    collector: CallCollector,
) -> StepResult:
    """Record nothing of a stale attempt's outcome (its step taken over while it ran: a frozen
    worker, a lost lease); only its VLM calls are kept, under its own attempt, since
    they were made (and paid for)."""
    log.warning("%s", stale)
    if collector.records:
        with session_scope(engine) as session:
            store_vlm_calls(session, run_id, step, iteration, attempt, collector.records)
    return StepResult(SKIPPED)


def _record(
    session: Session,
    begun: Begun,
    run_id: str,
    step: str,
    iteration: int,
    worker: str | None,
    queue: str | None,
    begun_at: datetime,
) -> None:
    """Record a step begun without a record (:attr:`Begun.recorded`): it gets its first attempt
    now, as of when it began; :class:`steps.StaleAttempt` when someone recorded it meanwhile."""
    if begun.recorded:
        return
    if (
        steps.first_attempt(
            session, run_id, step, iteration, worker=worker, queue=queue, started_at=begun_at
        )
        is None
    ):
        raise steps.StaleAttempt(run_id, step, iteration, begun.attempt)


def store_outcome(
    engine: Engine,
    run_id: str,
    step: str,
    iteration: int,
    begun: Begun,
    new_state: AgenticIQAState,
    update: dict[str, Any],
    collector: CallCollector,
    *,
    worker: str | None,
    queue: str | None = None,
    lease_seconds: float | None,
    chain: Chain | None,
    begun_at: datetime | None = None,
    endings: list[Deferred] | None = None,
) -> StepResult:
    """Record the step's outcome, decide the run's next step and, when chained, begin it: one
    transaction, fenced on the attempt (:class:`steps.StaleAttempt`).  With ``endings``, a
    run's one step that ends it is added there instead (:func:`.embedded.end_deferred` writes
    it)."""
    attempt = begun.attempt
    if (
        endings is not None
        and not begun.recorded
        and begun.job_id is not None
        and not collector.records
        and next_step(new_state) is None
        and not ends_alone(new_state)
    ):
        endings.append(
            Deferred(
                run_id,
                step,
                iteration,
                begun,
                new_state,
                update,
                worker,
                queue,
                begun_at or utc_now(),
            )
        )
        return StepResult(RAN)
    with session_scope(engine) as session:
        _record(session, begun, run_id, step, iteration, worker, queue, begun_at or utc_now())
        steps.complete_step(
            session,
            run_id,
            step,
            iteration,
            state=new_state,
            update=update,
            lease_seconds=lease_seconds,
            attempt=attempt,
        )
        store_vlm_calls(session, run_id, step, iteration, attempt, collector.records)
        upcoming = _decide(session, run_id, new_state, None, begun.job_id)
        next_queue = None if upcoming is None or chain is None else chain(upcoming, new_state)
        if upcoming is not None and next_queue is not None:  # same run, same agents
            record = steps.first_attempt(
                session,
                run_id,
                upcoming.step,
                upcoming.iteration,
                worker=worker,
                queue=next_queue,
                lease_seconds=lease_seconds,
                run_started=True,
            )
            if record is not None:
                asked = (
                    begun.asked
                    | collector.seen
                    | {call.request_key for call in collector.records if call.request_key}
                )
                upcoming = replace(
                    upcoming,
                    begun=replace(
                        begun,
                        state=new_state,
                        attempt=record.attempts,
                        asked=frozenset(asked),
                        recorded=True,
                    ),
                )
    return StepResult(RAN, upcoming)


def _begin(
    engine: Engine,
    agents: AgentsSource,
    run_id: str,
    step: str,
    iteration: int,
    *,
    worker: str | None,
    queue: str | None,
    lease_seconds: float | None,
    max_attempts: int | None,
    own_attempt: int | None = None,
) -> Begun | StepResult:
    """Run the step's first transaction: read the state, skip a stale or duplicate delivery, make
    sure the job's configuration can be honoured here (else :class:`CannotHonour`, nothing
    written), begin the step (or give it up when its deliveries kept dying)."""
    with session_scope(engine) as session:
        run = run_context(session, run_id)
        state = run.state
        if state.get("iteration_count", 0) != iteration or next_step(state) != step:
            log.info("run %s: %s#%d is stale or done, skipping", run_id, step, iteration)
            return StepResult(SKIPPED)
        resolved = resolve_agents(agents, run.config)
        # A running run's lease was moved by whoever sent this step (it decided on it).
        record = steps.begin_step(
            session,
            run_id,
            step,
            iteration,
            worker=worker,
            queue=queue,
            lease_seconds=lease_seconds,
            run_started=run.status == "running",
            own_attempt=own_attempt,
        )
        if record is None:
            return StepResult(SKIPPED)
        if max_attempts is not None and record.attempts > max_attempts and record.taken_over:
            # Deliveries kept beginning and dying (recorded failures such as transient VLM
            # errors are bounded by the retry policy instead).
            reason = (
                f"{step} gave up after {record.attempts - 1} attempts that never "
                "finished: each time its worker was killed (the hard time limit, out of "
                "memory) or crashed on this input"
            )
            steps.fail_step(session, run_id, step, iteration, error=reason)
            fail_run(session, run_id, error=reason)
            return StepResult(RAN)
        return Begun(
            state,
            record.attempts,
            run.job_id,
            run.vlm_cache,
            frozenset(vlm_keys_asked(session, run_id)),
            resolved,
            reading_of(run),
        )


def reading_of(run: RunContext) -> ReadingSpec:
    """Return the job's access policy (None: no job, or one stored before policies: the ambient one)
    and its item's digests, for :func:`iqa_tools.storage.access.reading`."""
    return (run.config.access if run.config is not None else None, dict(run.digests))


def fail(engine: Engine, run_id: str, step: str, iteration: int, reason: str) -> None:
    """Give up on a run (e.g. transient errors outlasted every retry)."""
    with session_scope(engine) as session:
        steps.fail_step(session, run_id, step, iteration, error=reason)
        fail_run(session, run_id, error=reason)


def give_up(
    engine: Engine,
    run_id: str,
    step: str,
    iteration: int,
    reason: str,
    *,
    lease_seconds: float | None = None,
) -> NextStep | None:
    """Give up a step whose transient errors outlasted every retry: an executor subtask is given up
    (its evidence null, :func:`agentic_iqa.pipeline.abandoned`) and the run goes on with the
    returned next step; any other step fails the run (None)."""
    with session_scope(engine) as session:
        run = run_context(session, run_id)
        state = run.state
        if (
            run.status in {"succeeded", "failed"}
            or state.get("iteration_count", 0) != iteration
            or next_step(state) != step
        ):
            return None  # stale: the step is done or the run has moved on
        update = abandoned(step, state, reason)
        if update is None:
            steps.fail_step(session, run_id, step, iteration, error=reason)
            fail_run(session, run_id, error=reason)
            return None
        new_state = merge_state(state, update)
        steps.complete_step(
            session,
            run_id,
            step,
            iteration,
            state=new_state,
            update=update,
            lease_seconds=lease_seconds,
        )
        return _decide(session, run_id, new_state, lease_seconds, run.job_id)
