"""Writing a run's step lifecycle, one function per thing a pipeline task does.

Every function takes an open :class:`~sqlalchemy.orm.Session` and leaves the commit to the
caller (:func:`~agentic_iqa.db.engine.session_scope`), so a task's bookkeeping and its result
land in one transaction.  Celery delivers a task at least once, so the writes are idempotent:
a step that already succeeded is reported as such (:func:`begin_step` returns None), and tool
logs and replans are keyed by what they describe, never inserted twice.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import ConfigDict, TypeAdapter
from sqlalchemy import Table, bindparam, case, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..redact import redact
from ..runconfig import RunConfig
from ..state import (
    DEFAULT_MAX_REPLAN_ITERATIONS,
    AgenticIQAState,
    ExecutorOutput,
    ReplanEntry,
    initial_state,
    merge_state,
    state_from_json,
    state_to_json,
)
from ..vlm.usage import CallRecord
from .engine import changed_rows
from .items import close_item
from .models import (
    Job,
    JobItem,
    ReplanRow,
    Run,
    StepRecord,
    ToolLog,
    UtcDateTime,
    VlmCall,
    new_run_id,
    utc_now,
)
from .reads import RunNotFound, get_run

_RUNS = Run.__table__
_STEPS = StepRecord.__table__
_JOBS = Job.__table__
_ITEMS = JobItem.__table__

# NaN as "NaN", like the state's own models, so a failed tool's score survives in step outputs.
_UPDATE = TypeAdapter(dict[str, Any], config=ConfigDict(ser_json_inf_nan="strings"))


class StaleAttempt(Exception):
    """This attempt no longer owns its step: another delivery took it over (its lease had
    passed: a frozen worker, a lost connection) and may have finished it.  Its outcome must
    change nothing; the transaction that tried to write it is rolled back."""

    def __init__(self, run_id: str, step: str, iteration: int, attempt: int) -> None:
        super().__init__(
            f"run {run_id}: {step}#{iteration} attempt {attempt} is stale (the "
            "step was taken over); its outcome is discarded"
        )


class StepBusy(Exception):
    """Another delivery of this step is running and its lease is alive: try again later."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"step is running elsewhere; retry in {retry_after:.1f}s")
        self.retry_after = retry_after


def lease_deadline(seconds: float | None) -> datetime | None:
    """When a lease of ``seconds`` taken now runs out (None: not supervised)."""
    return None if seconds is None else utc_now() + timedelta(seconds=seconds)


def create_run(
    session: Session,
    *,
    query: str,
    image_path: str,
    reference_path: str | None = None,
    max_replan_iterations: int = DEFAULT_MAX_REPLAN_ITERATIONS,
    backend: str | None = None,
    job_id: str | None = None,
    lease_seconds: float | None = None,
    metric_tools: Sequence[str] | None = None,
    mode: Literal["agent", "vlm"] = "agent",
) -> str:
    """A new 'pending' run with its initial state; returns its id.

    With ``lease_seconds`` the run is handed to workers and supervised from now on: if nothing
    happens to it within the lease (the message was lost), it is re-sent.  ``metric_tools``:
    a metric job's run, which only runs these tools (no plan, no VLM).  ``mode="vlm"``: the
    VLM answers alone (no plan, no tools).
    """
    state = initial_state(
        query,
        image_path,
        reference_path,
        max_replan_iterations=max_replan_iterations,
        metric_tools=metric_tools,
        mode=mode,
    )
    run = Run(
        query=query,
        image_path=image_path,
        reference_path=reference_path,
        status="pending",
        state_json=state_to_json(state),
        iteration_count=0,
        max_replan_iterations=max_replan_iterations,
        backend=backend,
        job_id=job_id,
        created_at=utc_now(),
        lease_until=lease_deadline(lease_seconds),
    )
    session.add(run)
    session.flush()
    return run.id


def create_runs(
    session: Session,
    inputs: Sequence[tuple[str, str, str | None]],
    *,
    max_replan_iterations: int,
    job_id: str,
    lease_seconds: float | None = None,
    metric_tools: Sequence[str] | None = None,
    mode: Literal["agent", "vlm"] = "agent",
) -> list[tuple[str, AgenticIQAState]]:
    """:func:`create_run` for a window of a job's items, (query, image, reference) each: one
    INSERT for them all; returns their ids and initial states, in order."""
    lease_until = lease_deadline(lease_seconds)
    rows: list[dict[str, Any]] = []
    states: list[AgenticIQAState] = []
    for query, image_path, reference_path in inputs:
        state = initial_state(
            query,
            image_path,
            reference_path,
            max_replan_iterations=max_replan_iterations,
            metric_tools=metric_tools,
            mode=mode,
        )
        states.append(state)
        rows.append(
            {
                "id": new_run_id(),
                "query": query,
                "image_path": image_path,
                "reference_path": reference_path,
                "status": "pending",
                "state_json": state_to_json(state),
                "iteration_count": 0,
                "max_replan_iterations": max_replan_iterations,
                "job_id": job_id,
                "created_at": utc_now(),
                "lease_until": lease_until,
            }
        )
    if rows:
        session.execute(insert(_RUNS), rows)
    return [(row["id"], state) for row, state in zip(rows, states, strict=True)]


@dataclass(frozen=True)
class RunContext:
    """What a step needs of its run before it begins, read in one statement."""

    status: str
    job_id: str | None
    state: AgenticIQAState
    #: False when the run, or the job it belongs to, was started with ``--no-vlm-cache``.
    vlm_cache: bool
    #: The configuration of the run's job (None: no job, or a job stored before it was kept).
    config: RunConfig | None = None
    #: The digests its item's image and reference had at submit, by location: what is read
    #: must still be that (an object replaced since fails the item, not scored).
    digests: Mapping[str, str] = dataclass_field(default_factory=dict)


#: Every step of every run begins with this read: a Core statement built once (the ORM's
#: identity map and attribute loading cost more than the SQL here).
_RUN_CONTEXT = (
    select(
        _RUNS.c.status,
        _RUNS.c.job_id,
        _RUNS.c.state_json,
        _RUNS.c.vlm_cache,
        _JOBS.c.vlm_cache.label("job_vlm_cache"),
        _JOBS.c.config_json,
        _ITEMS.c.image,
        _ITEMS.c.image_digest,
        _ITEMS.c.reference,
        _ITEMS.c.reference_digest,
    )
    .select_from(
        _RUNS.outerjoin(_JOBS, _JOBS.c.id == _RUNS.c.job_id).outerjoin(
            _ITEMS, _ITEMS.c.run_id == _RUNS.c.id
        )
    )
    .where(_RUNS.c.id == bindparam("b_run"))
)


def run_context(session: Session, run_id: str) -> RunContext:
    """The run's status, job, state and VLM-cache setting, or :class:`RunNotFound`."""
    row = session.execute(_RUN_CONTEXT, {"b_run": run_id}).first()
    if row is None:
        raise RunNotFound(run_id)
    digests = {
        location: digest
        for location, digest in (
            (row.image, row.image_digest),
            (row.reference, row.reference_digest),
        )
        if location and digest
    }
    return RunContext(
        row.status,
        row.job_id,
        state_from_json(row.state_json),
        bool(row.vlm_cache) and row.job_vlm_cache is not False,
        _config(row.config_json),
        digests,
    )


@functools.lru_cache(maxsize=16)
def _config(text: str | None) -> RunConfig | None:
    """A job's stored configuration, parsed once per process (every step reads it)."""
    return RunConfig.from_json(text) if text else None


def job_config(text: str | None) -> RunConfig | None:
    """A job's stored configuration (``jobs.config_json``), parsed once per process."""
    return _config(text)


_JOB_STATUS = select(_JOBS.c.status).where(_JOBS.c.id == bindparam("b_job"))


def job_cancelled(session: Session, job_id: str) -> bool:
    """Whether the job was cancelled (asked after every step of its runs: a Core read)."""
    return session.scalar(_JOB_STATUS, {"b_job": job_id}) == "cancelled"


def _find_step(session: Session, run_id: str, step: str, iteration: int) -> StepRecord | None:
    # FOR UPDATE (PostgreSQL; SQLite's BEGIN IMMEDIATE already serialises writers): a second
    # delivery waits for the first one's commit and then sees its attempts, not a stale count.
    statement = (
        select(StepRecord)
        .where(
            StepRecord.run_id == run_id, StepRecord.step == step, StepRecord.iteration == iteration
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return session.scalars(statement).one_or_none()


def _step_record(session: Session, run_id: str, step: str, iteration: int) -> StepRecord:
    """The record of this step, created ('running', no attempts yet) if there is none.

    Two deliveries of one task may both find none; the unique constraint lets one insert win
    and the other, rolled back to its savepoint, reads the winner's row.
    """
    record = _find_step(session, run_id, step, iteration)
    if record is not None:
        return record
    try:
        with session.begin_nested():
            record = StepRecord(
                run_id=run_id,
                step=step,
                iteration=iteration,
                status="running",
                attempts=0,
                started_at=utc_now(),
            )
            session.add(record)
    except IntegrityError:
        record = _find_step(session, run_id, step, iteration)
        if record is None:
            raise
    return record


@dataclass(frozen=True)
class Attempt:
    """One delivery's hold on a step, as :func:`begin_step` left its row."""

    attempts: int
    worker: str | None
    queue: str | None
    lease_until: datetime | None
    #: The attempt before this one died without a word (it was still 'running'), as opposed to
    #: ending with a recorded (e.g. transient) failure.
    taken_over: bool = False


def _dialect_insert(session: Session, table: Table) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"database dialect {dialect!r}: use SQLite or PostgreSQL")


_first_inserts: dict[str, Any] = {}

#: A first delivery starts its run (pending to running, its start time, its lease): plain Core
#: statements built once, as every step of every run goes through them.
_START_RUN = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("b_run"))
    .values(
        status="running",
        started_at=func.coalesce(_RUNS.c.started_at, bindparam("b_now", type_=UtcDateTime())),
        lease_until=func.coalesce(bindparam("b_lease", type_=UtcDateTime()), _RUNS.c.lease_until),
    )
)


def _insert_first_attempt(session: Session) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING RETURNING id: the first delivery's one statement."""
    dialect = session.get_bind().dialect.name
    statement = _first_inserts.get(dialect)
    if statement is None:
        statement = _first_inserts[dialect] = (
            _dialect_insert(session, _STEPS)
            .on_conflict_do_nothing(index_elements=["run_id", "step", "iteration"])
            .returning(_STEPS.c.id)
        )
    return statement


def first_attempt(
    session: Session,
    run_id: str,
    step: str,
    iteration: int,
    *,
    worker: str | None = None,
    queue: str | None = None,
    lease_seconds: float | None = None,
    run_started: bool = False,
    started_at: datetime | None = None,
) -> Attempt | None:
    """Begin a step that has no record yet, as its first attempt: one INSERT of the row as it
    should end up; None when the step has a record already (then see :func:`begin_step`).

    ``run_started``: the caller knows the run is running and has moved its lease already (the
    transaction that finished the step before), so the run's row is left alone.
    ``started_at``: when the step began, for a step recorded as it ends (a local run's first
    step: :attr:`agentic_iqa.runtime.service.Begun.recorded`); default now.
    """
    now = started_at or utc_now()
    lease_until = lease_deadline(lease_seconds)
    try:
        inserted = session.execute(
            _insert_first_attempt(session),
            {
                "run_id": run_id,
                "step": step,
                "iteration": iteration,
                "status": "running",
                "attempts": 1,
                "started_at": now,
                "worker": worker,
                "queue": queue,
                "lease_until": lease_until,
            },
        ).first()
    except IntegrityError as exc:  # the foreign key: no such run
        raise RunNotFound(run_id) from exc
    if inserted is None:
        return None
    if not run_started:
        session.execute(_START_RUN, {"b_run": run_id, "b_now": now, "b_lease": lease_until})
    return Attempt(1, worker, queue, lease_until)


def begin_step(
    session: Session,
    run_id: str,
    step: str,
    iteration: int,
    *,
    worker: str | None = None,
    queue: str | None = None,
    lease_seconds: float | None = None,
    run_started: bool = False,
    own_attempt: int | None = None,
) -> Attempt | None:
    """Mark a step as running (one more attempt); None when it already succeeded.

    A caller that gets None skips the work: this is a redelivery of a finished task.  With
    ``lease_seconds`` (workers), a step still running under a live lease raises
    :class:`StepBusy`: its owner is alive, so this delivery is a duplicate and must wait; once
    the lease has passed (the owner died), this delivery takes the step over.
    ``run_started``: as for :func:`first_attempt`.  ``own_attempt``: the caller's own earlier
    attempt, which it saw fail (a lost database connection): it is taken over at once, its
    lease not waited out.
    """
    first = first_attempt(
        session,
        run_id,
        step,
        iteration,
        worker=worker,
        queue=queue,
        lease_seconds=lease_seconds,
        run_started=run_started,
    )
    if first is not None:  # the usual case
        return first
    now = utc_now()
    lease_until = lease_deadline(lease_seconds)
    run = get_run(session, run_id)
    record = _find_step(session, run_id, step, iteration)
    if record is None:  # deleted between the two statements: nothing to begin
        raise RunNotFound(run_id)
    if record.status == "succeeded":
        return None
    own = own_attempt is not None and record.attempts == own_attempt
    if (
        lease_seconds is not None
        and record.status == "running"
        and record.attempts > 0
        and record.lease_until is not None
        and record.lease_until > now
        and not own
    ):
        raise StepBusy((record.lease_until - now).total_seconds())
    taken_over = record.status == "running" and record.attempts > 0
    record.lease_until = lease_until
    if lease_seconds is not None:
        run.lease_until = lease_until
    record.status = "running"
    record.attempts += 1
    record.started_at = now
    record.finished_at = None
    record.error = None
    record.worker = worker
    record.queue = queue
    _mark_running(run, now)
    session.flush()
    return Attempt(record.attempts, worker, queue, lease_until, taken_over)


def _mark_running(run: Run, now: datetime) -> None:
    run.status = "running"
    if run.started_at is None:
        run.started_at = now


_COMPLETE_STEP = (
    update(_STEPS)
    .where(
        _STEPS.c.run_id == bindparam("b_run"),
        _STEPS.c.step == bindparam("b_step"),
        _STEPS.c.iteration == bindparam("b_iteration"),
    )
    .values(
        status="succeeded",
        output_json=bindparam("b_output"),
        error=None,
        finished_at=bindparam("b_now", type_=UtcDateTime()),
        lease_until=None,
        attempts=case((_STEPS.c.attempts < 1, 1), else_=_STEPS.c.attempts),
    )
)
#: The same, fenced: only the attempt that owns the step (the latest begun) may complete it.
_COMPLETE_OWNED_STEP = _COMPLETE_STEP.where(
    _STEPS.c.attempts == bindparam("b_attempt"), _STEPS.c.status == "running"
)
_SAVE_STATE = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("b_run"))
    .values(
        state_json=bindparam("b_state"),
        iteration_count=bindparam("b_iterations"),
        lease_until=func.coalesce(bindparam("b_lease", type_=UtcDateTime()), _RUNS.c.lease_until),
    )
)


def _update_json(update: Mapping[str, Any]) -> str:
    return _UPDATE.dump_json(dict(update)).decode()


def complete_step(
    session: Session,
    run_id: str,
    step: str,
    iteration: int,
    *,
    state: AgenticIQAState,
    update: Mapping[str, Any],
    lease_seconds: float | None = None,
    attempt: int | None = None,
) -> None:
    """Record a step's success: its update, the run's new state, its tool calls and replans.

    ``state`` is the run's state with ``update`` merged.  Repeating the call changes nothing.
    ``lease_seconds``: the run goes on, its lease moved in the same statement as its state.
    ``attempt``: the attempt that ran it; unless it still owns the step (no other delivery took
    it over), :class:`StaleAttempt` is raised before anything is written (fencing).
    """
    # Plain UPDATEs by key, built once: a step that just ran need not be read back first; a
    # step never begun (a direct call) gets its row the ORM way.
    now = utc_now()
    output = redact(_update_json(update))
    parameters = {
        "b_run": run_id,
        "b_step": step,
        "b_iteration": iteration,
        "b_output": output,
        "b_now": now,
    }
    if attempt is not None:
        owned = session.execute(_COMPLETE_OWNED_STEP, {**parameters, "b_attempt": attempt})
        if not changed_rows(owned):
            raise StaleAttempt(run_id, step, iteration, attempt)
        found = changed_rows(owned)
    else:
        found = changed_rows(session.execute(_COMPLETE_STEP, parameters))
    if not found:
        get_run(session, run_id)
        record = _step_record(session, run_id, step, iteration)
        record.status, record.output_json, record.error = "succeeded", output, None
        record.finished_at, record.lease_until, record.attempts = now, None, 1
    moved = changed_rows(
        session.execute(
            _SAVE_STATE,
            {
                "b_run": run_id,
                "b_state": redact(state_to_json(state)),
                "b_iterations": state.get("iteration_count", 0),
                "b_lease": lease_deadline(lease_seconds),
            },
        )
    )
    if not moved:
        raise RunNotFound(run_id)
    evidence = update.get("executor_evidence")
    if evidence is not None:
        logs = ExecutorOutput.model_validate(evidence).tool_logs
        _insert_missing(
            session,
            ToolLog,
            ("run_id", "iteration", "object_name", "distortion"),
            [ToolLog.columns_from(entry, run_id=run_id, iteration=iteration) for entry in logs],
        )
    _store_replans(session, run_id, state.get("replan_history", []))
    session.flush()


def _store_replans(session: Session, run_id: str, history: Sequence[ReplanEntry]) -> None:
    """The state's replans as rows: a new one inserted when it is asked for, its failure
    written when its plan step fails (the row exists by then); a failure, once written, is
    never cleared."""
    if not history:
        return
    table = ReplanRow.__table__
    statement = (
        postgresql.insert(table)
        if session.get_bind().dialect.name == "postgresql"
        else sqlite.insert(table)
    )
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["run_id", "iteration"],
            set_={"failure": func.coalesce(table.c.failure, statement.excluded.failure)},
            where=statement.excluded.failure.is_not(None),
        ),
        [
            {
                "run_id": run_id,
                "iteration": entry.iteration,
                "reason": entry.reason,
                "created_at": entry.timestamp,
                "failure": redact(entry.failure) if entry.failure is not None else None,
            }
            for entry in history
        ],
    )


def _insert_missing(
    session: Session,
    model: type[ToolLog] | type[VlmCall],
    keys: Iterable[str],
    rows: list[dict[str, Any]],
) -> None:
    """INSERT ... ON CONFLICT (keys) DO NOTHING: rows already stored are left as they are.

    One statement executed for many parameter sets (not one VALUES list per call), so that it
    compiles once per process instead of once per step."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    statement: postgresql.Insert | sqlite.Insert
    if dialect == "postgresql":
        statement = postgresql.insert(model.__table__)
    elif dialect == "sqlite":
        statement = sqlite.insert(model.__table__)
    else:
        raise NotImplementedError(f"database dialect {dialect!r}: use SQLite or PostgreSQL")
    session.execute(statement.on_conflict_do_nothing(index_elements=list(keys)), rows)


def fail_step(
    session: Session,
    run_id: str,
    step: str,
    iteration: int,
    *,
    error: str,
    attempt: int | None = None,
) -> None:
    """Record that an attempt of this step failed (the task may still be retried).

    ``attempt``: as for :func:`complete_step`, a stale attempt's failure changes nothing."""
    get_run(session, run_id)
    record = _step_record(session, run_id, step, iteration)
    if attempt is not None and (record.attempts != attempt or record.status != "running"):
        raise StaleAttempt(run_id, step, iteration, attempt)
    record.status = "failed"
    record.attempts = max(record.attempts, 1)
    record.error = redact(error)
    record.finished_at = utc_now()
    record.lease_until = None
    session.flush()


def finish_run(
    session: Session, run_id: str, *, state: AgenticIQAState, state_saved: bool = False
) -> None:
    """Close the run with its final state: succeeded when the Summarizer answered, or, for a
    metric job's run (which has no Summarizer), when its tools ran without a run error.

    ``state_saved``: ``state`` is already the run's stored state (the caller just wrote or
    read it), so it is not serialised and written a second time."""
    result = state.get("summarizer_result")
    metric_done = bool(state.get("metric_tools")) and not state.get("error")
    values: dict[str, Any] = {
        "status": "succeeded" if result is not None or metric_done else "failed",
        "final_answer": result.final_answer if result is not None else None,
        "quality_score": result.quality_score if result is not None else None,
        "error": redact(state.get("error")),
        "iteration_count": state.get("iteration_count", 0),
        "finished_at": utc_now(),
        "lease_until": None,
    }
    if not state_saved:
        values["state_json"] = redact(state_to_json(state))
    _end_run(session, run_id, values)


def _end_run(session: Session, run_id: str, values: dict[str, Any]) -> None:
    """Write a run's end (one UPDATE by key, no read of the run first) and close its job's
    item (:func:`~.items.close_item`), in the caller's transaction."""
    session.flush()  # an ORM caller's changes to the run come before these
    ended = session.execute(
        update(_RUNS).where(_RUNS.c.id == run_id).values(values).returning(_RUNS.c.job_id)
    ).first()
    if ended is None:
        raise RunNotFound(run_id)
    _expire_run(session, run_id)
    if ended.job_id is not None:
        close_item(
            session,
            run_id=run_id,
            job_id=ended.job_id,
            succeeded=values["status"] == "succeeded",
            error=values.get("error"),
        )


def _expire_run(session: Session, run_id: str) -> None:
    """A Run this session holds no longer says what the database does: read it again when
    used (callers that loaded it, such as a fenced step's, see the run's end)."""
    run = session.identity_map.get(session.identity_key(Run, run_id))
    if run is not None:
        session.expire(run)


def fail_run(session: Session, run_id: str, *, error: str) -> None:
    """Close the run as failed (a step gave up for good)."""
    state_json = session.scalar(select(_RUNS.c.state_json).where(_RUNS.c.id == run_id))
    if state_json is None:
        raise RunNotFound(run_id)
    values: dict[str, Any] = {
        "status": "failed",
        "error": redact(error),
        "finished_at": utc_now(),
        "lease_until": None,
    }
    state = state_from_json(state_json)
    if not state.get("error"):  # every reader of the state sees why, not only of the row
        values["state_json"] = redact(state_to_json(merge_state(state, {"error": error})))
    _end_run(session, run_id, values)


def extend_lease(
    session: Session,
    run_id: str,
    seconds: float,
    *,
    step: tuple[str, int] | tuple[str, int, int] | None = None,
) -> bool:
    """Push the run's lease (and a running step's) ``seconds`` ahead; False if it has ended.

    Called when a run is dispatched, by a running step's heartbeat, and before a delayed retry.
    A heartbeat names its attempt (``step=(name, iteration, attempt)``): a stale attempt (its
    step taken over) moves nothing, neither the step's lease nor the run's.
    """
    deadline = lease_deadline(seconds)
    if step is not None:
        name, iteration, *attempt = step
        fenced = update(StepRecord).where(
            StepRecord.run_id == run_id,
            StepRecord.step == name,
            StepRecord.iteration == iteration,
            StepRecord.status == "running",
        )
        if attempt:
            fenced = fenced.where(StepRecord.attempts == attempt[0])
        if not changed_rows(session.execute(fenced.values(lease_until=deadline))) and attempt:
            return False
    moved = changed_rows(
        session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status.in_(("pending", "running")))
            .values(lease_until=deadline)
        )
    )
    return bool(moved)


def claim_stalled(session: Session, lease_seconds: float, limit: int = 500) -> list[str]:
    """Runs whose lease has passed, re-leased now so that one supervisor re-sends each.

    Several supervisors may call this at once: PostgreSQL skips rows another one has locked,
    SQLite's BEGIN IMMEDIATE lets one writer in at a time.
    """
    now = utc_now()
    runs = session.scalars(
        select(Run)
        .where(
            Run.status.in_(("pending", "running")),
            Run.lease_until.is_not(None),
            Run.lease_until < now,
        )
        .order_by(Run.lease_until)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    deadline = lease_deadline(lease_seconds)
    for run in runs:
        run.lease_until = deadline
        run.resends += 1
    session.flush()
    return [run.id for run in runs]


# -- VLM calls -------------------------------------------------------------------------------


_VLM_CALLS = VlmCall.__table__
_KEYS_ASKED = select(_VLM_CALLS.c.request_key).where(
    _VLM_CALLS.c.run_id == bindparam("b_run"), _VLM_CALLS.c.request_key.is_not(None)
)


def vlm_keys_asked(session: Session, run_id: str) -> set[str]:
    """The response-cache keys this run has asked already (in any step)."""
    return set(session.scalars(_KEYS_ASKED, {"b_run": run_id}))


def set_run_vlm_cache(session: Session, run_id: str, enabled: bool) -> None:
    get_run(session, run_id).vlm_cache = enabled
    session.flush()


def store_vlm_calls(
    session: Session,
    run_id: str,
    step: str,
    iteration: int,
    attempt: int,
    records: Iterable[CallRecord],
) -> None:
    """The calls one attempt of a step made, in order; storing them again changes nothing."""
    _insert_missing(
        session,
        VlmCall,
        ("run_id", "step", "iteration", "attempt", "seq"),
        [
            {
                "run_id": run_id,
                "step": step,
                "iteration": iteration,
                "attempt": attempt,
                "seq": seq,
                "role": record.role,
                "task": record.task,
                "backend": record.backend,
                "model": record.model,
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "cached_tokens": record.cached_tokens,
                "latency_s": record.latency_s,
                "cache_hit": record.cache_hit,
                "request_key": record.request_key,
                "created_at": utc_now(),
                "error": redact(record.error),
                "endpoint": record.endpoint,
                "batch": record.batch,
            }
            for seq, record in enumerate(records)
        ],
    )
    session.flush()
