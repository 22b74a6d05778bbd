"""Write a run's steps, one function per thing a pipeline task does: begin, complete, fail.

Every function takes an open :class:`~sqlalchemy.orm.Session` and leaves the commit to the
caller (:func:`~agentic_iqa.db.engine.session_scope`), so a task's bookkeeping and its result
land in one transaction.  Celery delivers a task at least once, so the writes are idempotent:
a step that already succeeded is reported as such (:func:`begin_step` returns None), and tool
logs and replans are keyed by what they describe, never inserted twice.  The run a step belongs
to is created and ended by :mod:`.runs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ConfigDict, TypeAdapter
from sqlalchemy import bindparam, case, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..redact import redact
from ..state import AgenticIQAState, ExecutorOutput, ReplanEntry, state_to_json
from .engine import changed_rows
from .models import (
    ReplanRow,
    Run,
    StepRecord,
    ToolLog,
    UtcDateTime,
    utc_now,
)
from .queries import dialect_insert, insert_missing
from .runs import RunNotFound, get_run, lease_deadline

_RUNS = Run.__table__
_STEPS = StepRecord.__table__

# NaN as "NaN", like the state's own models, so a failed tool's score survives in step outputs.


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


def _find_step(session: Session, run_id: str, step: str, iteration: int) -> StepRecord | None:
    # FOR UPDATE (PostgreSQL; SQLite's BEGIN IMMEDIATE already serialises writers): a second
    # delivery waits for the first one's commit and then sees its attempts, not a stale count.
    """Return the step's record, locked for update, or None."""
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
    """Return the record of this step, created ('running', no attempts yet) if there is none.

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
    """Build INSERT ... ON CONFLICT DO NOTHING RETURNING id: the first delivery's one statement."""
    dialect = session.get_bind().dialect.name
    statement = _first_inserts.get(dialect)
    if statement is None:
        statement = _first_inserts[dialect] = (
            dialect_insert(session, _STEPS)
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
    """Mark the run running, its start time set once."""
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


def update_json(update: Mapping[str, Any]) -> str:
    """Return a step's update as JSON (NaN as ``"NaN"``)."""
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
    output = redact(update_json(update))
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
        insert_missing(
            session,
            ToolLog,
            ("run_id", "iteration", "object_name", "distortion"),
            [ToolLog.columns_from(entry, run_id=run_id, iteration=iteration) for entry in logs],
        )
    _store_replans(session, run_id, state.get("replan_history", []))
    session.flush()


def _store_replans(session: Session, run_id: str, history: Sequence[ReplanEntry]) -> None:
    """Store the state's replans as rows: a new one inserted when it is asked for, its failure
    written when its plan step fails (the row exists by then); a failure, once written, is
    never cleared."""
    if not history:
        return
    table = ReplanRow.__table__
    statement = dialect_insert(session, table)
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


def current_step(session: Session, run_id: str) -> str | None:
    """Return the step the run is busy with ("tool_execution#0"), for progress displays."""
    record = session.scalars(
        select(StepRecord)
        .where(StepRecord.run_id == run_id, StepRecord.status == "running")
        .order_by(StepRecord.id.desc())
        .limit(1)
    ).first()
    return None if record is None else f"{record.step}#{record.iteration}"
