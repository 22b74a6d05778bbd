"""One Celery task per step, and the coordinator that chains them by the plan's flags.

Tasks carry ids (run id, iteration), never images or state: each loads what it needs from the
database, calls :mod:`agentic_iqa.runtime.service`, and then asks the pure ``next_step`` what
runs next and sends it to its queue (the ``coordinate`` task does the same to start a run or
re-send one).  Steps the plan turns off are never enqueued.  Heavy objects (VLM clients, the
tool registry and its pyiqa models) are created lazily, once per worker process, after the
fork.

Only the delivery that ran a step hands over, one message per step: a duplicate (a redelivery,
a supervisor's re-send) that finds the step done skips silently, and one that finds it running
under a live lease comes back later.  So duplicates never multiply along a run.  Every worker of
the default queue also runs the supervisor (:mod:`agentic_iqa.runtime.supervisor`), which feeds jobs
and re-sends runs whose lease passed: lost messages heal without anyone running ``resume``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from billiard.exceptions import SoftTimeLimitExceeded
from celery import Task, signals
from celery_batches import Batches, SimpleRequest
from sqlalchemy.engine import Engine
from sqlalchemy.exc import InternalError, OperationalError

from agentic_iqa.agents.team import Agents, AgentsCache
from agentic_iqa.config import PipelineSettings
from agentic_iqa.db import jobs as job_store
from agentic_iqa.db import steps
from agentic_iqa.db.endings import hold_leases
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.runs import extend_lease, run_context
from agentic_iqa.pipeline import EXECUTE, STEPS, TOOL_STEPS, tool_step_cached
from agentic_iqa.redact import install_log_redaction
from agentic_iqa.runconfig import CannotHonour
from agentic_iqa.runtime import embedded, service
from agentic_iqa.runtime.consumers import QueueWatch
from agentic_iqa.runtime.lifecycle import feed
from agentic_iqa.runtime.supervisor import SupervisorThread
from agentic_iqa.state import AgenticIQAState
from agentic_iqa.vlm.base import TransientVLMError
from agentic_iqa.vlm.deadline import StepOverrun, step_deadline

from .celery_app import (
    COORDINATE,
    FEED_JOB,
    METRIC_CHUNK_TASK,
    STEP_TASK_PREFIX,
    TOOL_BATCH_TASK,
    app,
    task_limits,
)

log = logging.getLogger(__name__)


def settings() -> PipelineSettings:
    return app.settings


@lru_cache(maxsize=1)
def _agents(pid: int) -> AgentsCache:
    return AgentsCache()


def agents_source() -> AgentsCache:
    """This worker process's agents per job configuration (built on first use, after the
    fork): every item runs as its job was submitted, whatever this worker's environment."""
    return _agents(os.getpid())


def agents() -> Agents:
    """The environment's own agents (runs with no stored configuration)."""
    return agents_source()(None)


def engine() -> Engine:
    return make_engine(settings().database_url)


def step_limit(step: str) -> int:
    """Seconds ``step`` may run: the tool limit for a tool step, the VLM limit otherwise."""
    if step in TOOL_STEPS:
        return settings().tool_soft_time_limit
    return settings().vlm_soft_time_limit


def time_limit_reason(step: str, seconds: float) -> str:
    """What ran out and what to raise, in one sentence."""
    if step in TOOL_STEPS:
        return (
            f"the tool step ran past its time limit of {seconds:g} s "
            "(AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT, or `agentic-iqa worker --tool-time-limit`): "
            "raise it for photos this large"
        )
    return (
        f"the {step} step ran past its time limit of {seconds:g} s for a model step "
        "(AGENTIC_IQA_VLM_SOFT_TIME_LIMIT, or `agentic-iqa worker --vlm-time-limit`): raise "
        "it if the model is this slow, or check its endpoint"
    )


class StepTimeLimit(SoftTimeLimitExceeded, StepOverrun):
    """A step ran past its own time limit.  Celery's soft-limit exception, so that tool code
    lets it through as it does Celery's own (a deadline, not a tool's failure); its ``reason``
    is the step's error."""

    def __init__(self, step: str, seconds: float) -> None:
        self.reason = time_limit_reason(step, seconds)
        super().__init__(self.reason)

    def __str__(self) -> str:
        return self.reason


@contextmanager
def step_time_limit(step: str) -> Iterator[None]:
    """The step's own time limit (:func:`step_limit`), whichever task runs it: a tool step run
    inside the coordinating task or after a VLM step gets the tool limit, not that task's.

    A deadline on the step's model calls (:func:`agentic_iqa.vlm.deadline.step_deadline`),
    wherever it runs: a call still going when it passes ends then with this error (a thread
    pool, where Celery has no time limits and no signal reaches the thread, honours the limit
    so), and every later call of the step raises it at once.  In the process's main thread,
    where a prefork or solo worker runs its tasks, a timer (SIGALRM) too, for the rest of the
    step; once it has run out it fires again every second until the step ends: code that
    swallows one exception (a subtask's "log and go on") does not outlast its limit.
    """
    seconds = step_limit(step)
    with step_deadline(seconds, lambda: StepTimeLimit(step, seconds)):
        if threading.current_thread() is not threading.main_thread():
            yield
        else:
            with _alarm(step, seconds):
                yield


@contextmanager
def _alarm(step: str, seconds: float) -> Iterator[None]:
    """Raise :class:`StepTimeLimit` in the main thread after ``seconds``, then every second."""

    def expired(_signum: int, _frame: Any) -> None:
        raise StepTimeLimit(step, seconds)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def queue_for(step: str) -> str:
    """Tool steps to the tool queue; every other step calls a VLM: the VLM queue."""
    return settings().tool_queue if step in TOOL_STEPS else settings().vlm_steps_queue


#: The database dropped a connection (a restarted server, a failover) or refused writes for a
#: while (a read-only standby during a failover: InternalError): try the task again.  Steps
#: are idempotent, so a retry after a half-done attempt is safe.
DB_ERRORS = (OperationalError, InternalError)
DB_RETRY = {
    "autoretry_for": DB_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "max_retries": 8,
}


@app.task(name=COORDINATE, bind=True, acks_late=True, **DB_RETRY)
def coordinate(self: Task, run_id: str) -> str | None:
    """Start the run's next step (here, when this worker consumes its queue, else on its
    queue), or close the run when nothing is left.

    Used to start a run and by the supervisor's re-sends; a step that ran hands over itself
    (:func:`_execute`), which saves a message, a worker round trip and a transaction per step.
    """
    hostname = self.request.hostname or socket.gethostname()
    since = time.monotonic()
    upcoming = service.advance(
        engine(),
        run_id,
        lease_seconds=settings().lease_seconds,
        worker=hostname,
        chain=_stays_here(since, tool_task=False),
        agents=agents_source(),
    )
    if upcoming is None:
        return None
    if upcoming.begun is not None:
        _execute(
            upcoming.step,
            run_id,
            upcoming.iteration,
            hostname,
            None,
            delivered=False,
            begun=upcoming.begun,
            since=since,
            tool_task=False,
        )
    else:
        _send(run_id, upcoming)
    return upcoming.step


def _consumed_queues() -> frozenset[str]:
    """The queues this worker takes messages from (``-Q``; every configured one without)."""
    queues = app.amqp.queues
    return frozenset(queues.consume_from or queues)


def _stays_here(since: float, *, tool_task: bool) -> service.Chain:
    """Whether a run's upcoming step runs on in this process, and for which queue: when this
    worker consumes the step's queue too (a worker of every queue runs a whole run from one
    message), or when it is a tool step that only reads cached scores, within
    ``inline_seconds`` of ``since`` (when the task began), and only when the step's whole own
    limit fits in what is left of the task's (``tool_task``: a tool step's task), so that
    Celery never cuts a step short of its limit.  With batching on, tool steps that compute go
    through the tool queue, where they are grouped."""
    here = _consumed_queues()
    until = since + settings().inline_seconds
    budget = task_limits(settings(), tool_task=tool_task)[0]
    batching = settings().tool_batch_size > 1

    def chain(upcoming: service.NextStep, state: AgenticIQAState) -> str | None:
        now = time.monotonic()
        if now >= until or now - since + step_limit(upcoming.step) > budget:
            return None
        queue = queue_for(upcoming.step)
        tool_step = upcoming.step in TOOL_STEPS
        if queue in here and not (batching and tool_step):
            return queue
        if tool_step and _only_cached(state):
            return f"{queue} (cached)"
        return None

    return chain


def _only_cached(state: AgenticIQAState) -> bool:
    """Whether a tool step only reads cached scores (:func:`tool_step_cached`); a failure to
    tell (the cache's store unreachable) means no: the step is sent, as without the check."""
    if not settings().cached_tools_inline:
        return False
    try:
        return tool_step_cached(state, agents().registry)
    except Exception:
        log.warning("could not tell whether a tool step is cached; sending it", exc_info=True)
        return False


def _task_for(step: str) -> Any:
    """The task that runs ``step``: tool steps in their batched form when batching is on."""
    if step in TOOL_STEPS and settings().tool_batch_size > 1:
        return tool_batch
    return STEP_TASKS[step]


def _send(run_id: str, upcoming: service.NextStep) -> None:
    """Send the step the finished one decided on.  If the broker refuses it, the run's lease
    runs out and the supervisor re-sends it: nothing is lost, only a lease of time."""
    _task_for(upcoming.step).apply_async(
        (run_id, upcoming.iteration), queue=queue_for(upcoming.step)
    )


def _execute(
    step: str,
    run_id: str,
    iteration: int,
    hostname: str | None,
    delivery: dict[str, Any] | None,
    *,
    delivered: bool = True,
    begun: service.Begun | None = None,
    own_attempt: int | None = None,
    since: float | None = None,
    tool_task: bool | None = None,
) -> None:
    """Run a step and hand over: the run's following steps that belong to a queue this worker
    consumes run here too, one after the other, for up to ``inline_seconds`` (each with its own
    record and lease, begun in the transaction that completed the step before it, so
    idempotency and replay are as for a delivered step); the first step for a queue this worker
    does not consume is sent there.

    A :class:`TransientVLMError` of the delivered step is the caller's (the task retries it);
    one of a step run here without its own message becomes one, sent with a short delay.

    Each step runs under its own time limit (:func:`step_time_limit`).  ``since``: when the
    task began (default now); ``tool_task``: whether it is a tool step's task (default: whether
    ``step`` is a tool step), which sets what may still be chained.
    """
    lease = settings().lease_seconds
    chain = _stays_here(
        time.monotonic() if since is None else since,
        tool_task=step in TOOL_STEPS if tool_task is None else tool_task,
    )
    while True:
        queue = ((delivery or {}).get("routing_key") if delivered else None) or queue_for(step)
        try:
            result = service.execute_step(
                engine(),
                agents_source(),
                run_id,
                step,
                iteration,
                lease_seconds=lease,
                worker=hostname or socket.gethostname(),
                queue=queue,
                max_attempts=settings().max_step_attempts,
                begun=begun,
                chain=chain,
                own_attempt=own_attempt if delivered else None,
                time_limit=step_time_limit,
            )
        except CannotHonour as reason:
            # Never run on something else: say why, keep the item queued, offer it again.
            _wait_to_honour(run_id, step, iteration, hostname, str(reason))
            return
        except steps.StepBusy as busy:
            # Another delivery owns the step and is alive: come back when its lease would end.
            _task_for(step).apply_async(
                (run_id, iteration), queue=queue, countdown=min(lease, busy.retry_after + 0.5)
            )
            return
        except TransientVLMError as exc:
            if delivered:
                raise
            countdown = max(1.0, exc.retry_after or 0)
            with session_scope(engine()) as session:
                extend_lease(session, run_id, countdown + lease)
            _task_for(step).apply_async((run_id, iteration), queue=queue, countdown=countdown)
            return
        if result.outcome == service.SKIPPED or result.upcoming is None:
            return  # a duplicate delivery (whoever ran the step handed over), or the run ended
        upcoming = result.upcoming
        if upcoming.begun is None:
            _send(run_id, upcoming)
            return
        step, iteration, begun, delivered = (
            upcoming.step,
            upcoming.iteration,
            upcoming.begun,
            False,
        )


def _wait_to_honour(
    run_id: str, step: str, iteration: int, hostname: str | None, reason: str
) -> None:
    """This worker cannot run the step as its job was submitted: the job says why (``eval
    status``) and the run waits a lease; then a supervisor offers it again, to whichever
    worker takes it (a message re-sent from here would most often come straight back)."""
    log.warning("run %s: %s#%d not run here: %s", run_id, step, iteration, reason)
    with session_scope(engine()) as session:
        job_id = run_context(session, run_id).job_id
        if job_id is not None:
            job_store.note_waiting(
                session, job_id, f"worker {hostname or socket.gethostname()}: {reason}"
            )
        extend_lease(session, run_id, settings().lease_seconds)


def _run_step(
    task: Task, step: str, run_id: str, iteration: int, own_attempt: int | None = None
) -> None:
    lease = settings().lease_seconds
    try:
        _execute(
            step,
            run_id,
            iteration,
            task.request.hostname,
            task.request.delivery_info,
            own_attempt=own_attempt,
        )
    except DB_ERRORS as exc:
        # Seen here: the retry takes this attempt over at once (it need not wait out the
        # lease this very process held), after the usual backoff.
        attempt = getattr(exc, "step_attempt", None)
        if attempt is None or task.request.retries >= DB_RETRY["max_retries"]:
            raise
        countdown = min(DB_RETRY["retry_backoff_max"], 2**task.request.retries)
        raise task.retry(
            exc=exc, countdown=countdown, args=(run_id, iteration), kwargs={"own_attempt": attempt}
        ) from exc
    except TransientVLMError as exc:
        retries = task.request.retries
        if retries < settings().vlm_max_retries:
            # Exponential backoff: 1, 2, 4 ... seconds, capped; the lease covers the wait, so
            # the supervisor does not re-send a run that is only backing off.
            countdown = max(
                min(settings().retry_backoff_max, 2**retries), exc.retry_after or 0
            )  # never sooner than the server asked
            with session_scope(engine()) as session:
                extend_lease(session, run_id, countdown + lease)
            raise task.retry(
                exc=exc, countdown=countdown, max_retries=settings().vlm_max_retries
            ) from exc
        # An executor subtask is given up (its evidence null) and the run goes on; any other
        # step fails the run.
        upcoming = service.give_up(
            engine(),
            run_id,
            step,
            iteration,
            f"{step} failed after {retries} retries: {exc}",
            lease_seconds=lease,
        )
        if upcoming is not None:
            _send(run_id, upcoming)


def _make_step_task(step: str) -> Any:
    def run(self: Task, run_id: str, iteration: int, own_attempt: int | None = None) -> None:
        _run_step(self, step, run_id, iteration, own_attempt)

    run.__name__ = run.__qualname__ = f"step_{step}"
    run.__doc__ = f"Run the {step!r} step of one run."
    return app.task(name=STEP_TASK_PREFIX + step, bind=True, acks_late=True, **DB_RETRY)(run)


STEP_TASKS: dict[str, Any] = {step: _make_step_task(step) for step in STEPS}


@app.task(
    name=TOOL_BATCH_TASK,
    base=Batches,
    acks_late=True,
    flush_every=settings().tool_batch_size,
    flush_interval=settings().tool_batch_wait,
)
def tool_batch(requests: Sequence[SimpleRequest]) -> None:
    """Several runs' tool steps, their tool calls scored together (one forward pass per tool
    and image size), then each step run, stored and handed over on its own as usual.

    One item's failure is its own: it is recorded on its run (or, for a database error, left
    to the supervisor, whose lease-based re-send heals it), and the other items go on.
    """
    since = time.monotonic()
    items = [(str(request.args[0]), int(request.args[1])) for request in requests]
    try:
        embedded.score_tools_ahead(
            engine(), agents_source(), items, max_batch=settings().tool_batch_size
        )
    except Exception:  # batching is an optimisation: each step still runs on its own
        log.exception("scoring a batch of %d tool steps ahead failed", len(items))
    step = EXECUTE
    try:
        for request, (run_id, iteration) in zip(requests, items, strict=True):
            try:
                _execute(
                    step,
                    run_id,
                    iteration,
                    request.hostname,
                    request.delivery_info,
                    since=since,
                    tool_task=True,
                )
            except TransientVLMError as exc:
                service.fail(engine(), run_id, step, iteration, f"{step} failed: {exc}")
            except Exception:
                log.exception(
                    "run %s: %s#%d failed in a batch; the supervisor re-sends it",
                    run_id,
                    step,
                    iteration,
                )
    finally:
        for built in agents_source().built():
            built.registry.clear_batch()


@app.task(name=METRIC_CHUNK_TASK, bind=True, acks_late=True, **DB_RETRY)
def metric_chunk(self: Task, run_ids: list[str]) -> int:
    """Walk a chunk of a metric job's new runs here, each one step (its tools), their ends
    written in one transaction (:func:`embedded.walk_chunk`): one message and a handful of
    statements for many items instead of a coordinator's message and two transactions each.

    The chunk's leases are pushed ahead as its runs are walked; a run that cannot be begun
    from one read of them all (a re-send whose step is recorded, a run that ended, a
    configuration this worker cannot honour) is sent the one-at-a-time way, which says why.
    Returns the runs walked here."""
    hostname = self.request.hostname or socket.gethostname()
    lease = settings().lease_seconds
    source = agents_source()
    renewed = [float("-inf")]

    def renew() -> None:
        now = time.monotonic()
        if now - renewed[0] >= lease / 4:
            with session_scope(engine()) as session:
                hold_leases(session, run_ids, lease)
            renewed[0] = now

    renew()
    begun, left = embedded.begin_new_runs(engine(), source, run_ids)
    for run_id in left:
        submit(run_id)
    where = embedded.Where(
        worker=hostname,
        queue=(self.request.delivery_info or {}).get("routing_key") or settings().tool_queue,
        time_limit=step_time_limit,
        between=renew,
    )
    walked = [run_id for run_id in run_ids if run_id in begun]
    job_ids = {first.begun.job_id for first in begun.values() if first.begun is not None}
    size = settings().tool_batch_size
    if size > 1:
        embedded.walk_batch(engine(), source, walked, max_batch=size, firsts=begun, where=where)
    else:
        embedded.walk_chunk(engine(), source, walked, firsts=begun, where=where)
    for job_id in job_ids:  # the chunk's items left the window: top it up now, not a tick later
        try:
            if job_id is not None:
                feed_job(job_id)
        except Exception as exc:  # the supervisor tops it up at its next tick
            log.warning("job %s: topping up after a chunk failed: %s", job_id, exc)
    return len(walked)


def submit(run_id: str) -> None:
    """Start a stored run on the workers."""
    coordinate.apply_async((run_id,), queue=settings().default_queue)


def submit_chunk(run_ids: list[str]) -> None:
    """Start a chunk of a metric job's stored runs on a tool worker (:func:`metric_chunk`)."""
    metric_chunk.apply_async((run_ids,), queue=settings().tool_queue)


@app.task(name=FEED_JOB, acks_late=True, **DB_RETRY)
def feed_job(job_id: str) -> int:
    """Fill a dataset job's window of items in flight now.

    Bounded batches instead of one chord over the dataset: the broker never holds more than
    ``job_window`` of a job's runs.  This message only makes the start immediate; from then on
    the supervisor tops the job up every ``feed_interval``, from the database, so the job goes
    on if this message, the submitter or the broker's contents are lost.
    """
    return feed(
        engine(),
        job_id,
        settings().job_window,
        submit,
        lease_seconds=settings().lease_seconds,
        dispatch_chunk=submit_chunk,
        chunk_size=settings().metric_chunk_size,
    )


def start_job(job_id: str, restart_runs: Sequence[str] = ()) -> None:
    """Hand a submitted (or resumed) job to the workers.

    The job is marked as fed by the workers first: from that commit on, any supervisor feeds
    it, whether or not the messages below ever arrive.
    """
    with session_scope(engine()) as session:
        job_store.set_dispatch(session, job_id, "workers")
        for run_id in restart_runs:
            extend_lease(session, run_id, settings().lease_seconds)
    for run_id in restart_runs:
        submit(run_id)
    feed_job.apply_async((job_id,), queue=settings().default_queue)


_supervisor: SupervisorThread | None = None


def _consumes_default_queue(consumer: Any) -> bool:
    owner: Any = getattr(consumer, "app", app)
    queues = getattr(owner.amqp.queues, "consume_from", None) or {}
    return settings().default_queue in queues


@signals.worker_init.connect
def _prefetch_a_batch(sender: Any = None, **_: Any) -> None:
    """A worker of the tool queue alone holds a batch's worth of messages per process, so the
    batched task can group them (prefetch 1 would make every batch a batch of one)."""
    size = settings().tool_batch_size
    queues = set(getattr(sender.app.amqp.queues, "consume_from", None) or {})
    if size > 1 and queues == {settings().tool_queue}:
        sender.prefetch_multiplier = max(int(sender.prefetch_multiplier or 1), size)


@signals.worker_ready.connect
def _start_supervisor(sender: Any = None, **_: Any) -> None:
    """Every worker of the default queue supervises (several are safe; see the module)."""
    global _supervisor
    if not settings().supervisor or not _consumes_default_queue(sender):
        return
    _supervisor = SupervisorThread(
        engine,
        window=settings().job_window,
        lease_seconds=settings().lease_seconds,
        interval=settings().feed_interval,
        dispatch=submit,
        dispatch_chunk=submit_chunk,
        chunk_size=settings().metric_chunk_size,
        watch=QueueWatch(app.conf.broker_url, settings().queues),
    )
    _supervisor.start()


@signals.worker_shutdown.connect
def _stop_supervisor(**_: Any) -> None:
    if _supervisor is not None:
        _supervisor.stop()


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _redact_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    """Worker logs (task errors quote SDK messages and URLs) go out with credentials masked."""
    install_log_redaction(logger)
