"""Fencing: only the attempt that owns a step writes its outcome.  A stale attempt (its step
taken over after its lease passed: a frozen worker, a lost connection) changes nothing: not
the step, not the run's state, end or lease, not the tool logs.  On SQLite and PostgreSQL."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, func, select

from agentic_iqa.db import steps
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Run, StepRecord, ToolLog
from agentic_iqa.db.runs import create_run, extend_lease
from agentic_iqa.state import ExecutorOutput, ToolExecutionLog, initial_state, merge_state

STEP = "tool_execution"


def _run(engine: Engine) -> str:
    with session_scope(engine) as session:
        return create_run(session, query="q", image_path="x.png")


def _update(score: float) -> dict:
    log = ToolExecutionLog(
        tool_name="PIQE",
        object_name="Global",
        distortion="Blurs",
        raw_score=score,
        normalized_score=3.0,
        execution_time=0.1,
    )
    return {"steps_done": [STEP], "executor_evidence": ExecutorOutput(tool_logs=[log])}


def _begin(engine: Engine, run_id: str, lease: float, **options) -> steps.Attempt:
    with session_scope(engine) as session:
        attempt = steps.begin_step(
            session, run_id, STEP, 0, worker="w", lease_seconds=lease, **options
        )
    assert attempt is not None
    return attempt


def test_a_taken_over_attempt_writes_nothing(engine: Engine) -> None:
    run_id = _run(engine)
    first = _begin(engine, run_id, lease=0.05)
    time.sleep(0.1)  # its lease passes: the step may be taken over
    second = _begin(engine, run_id, lease=30)
    assert (first.attempts, second.attempts) == (1, 2)
    state = initial_state("q", "x.png")
    with session_scope(engine) as session:  # the new owner finishes
        update = _update(41.0)
        steps.complete_step(
            session,
            run_id,
            STEP,
            0,
            state=merge_state(state, update),
            update=update,
            attempt=second.attempts,
        )
    with session_scope(engine) as session:
        before = (session.get(Run, run_id).state_json, session.get(Run, run_id).lease_until)

    stale = _update(99.0)
    with pytest.raises(steps.StaleAttempt), session_scope(engine) as session:
        steps.complete_step(
            session,
            run_id,
            STEP,
            0,
            state=merge_state(state, stale),
            update=stale,
            lease_seconds=60,
            attempt=first.attempts,
        )
    with pytest.raises(steps.StaleAttempt), session_scope(engine) as session:
        steps.fail_step(session, run_id, STEP, 0, error="late", attempt=first.attempts)
    with session_scope(engine) as session:
        moved = extend_lease(session, run_id, 60, step=(STEP, 0, first.attempts))
    assert moved is False
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        record = session.scalars(select(StepRecord).where(StepRecord.run_id == run_id)).one()
        logs = session.scalars(select(ToolLog.raw_score).where(ToolLog.run_id == run_id)).all()
        assert (run.state_json, run.lease_until) == before
        assert (record.status, record.attempts, record.error) == ("succeeded", 2, None)
        assert logs == [41.0]


def test_the_owner_can_fail_and_beat_its_own_step(engine: Engine) -> None:
    run_id = _run(engine)
    owner = _begin(engine, run_id, lease=30)
    with session_scope(engine) as session:
        assert extend_lease(session, run_id, 60, step=(STEP, 0, owner.attempts))
        steps.fail_step(session, run_id, STEP, 0, error="boom", attempt=owner.attempts)
        assert (
            session.scalar(
                select(func.count()).select_from(StepRecord).where(StepRecord.status == "failed")
            )
            == 1
        )


def test_a_process_that_saw_its_own_attempt_fail_takes_it_over_at_once(engine: Engine) -> None:
    """A lost connection after the step began: the retry does not wait out its own lease."""
    run_id = _run(engine)
    mine = _begin(engine, run_id, lease=300)
    with pytest.raises(steps.StepBusy), session_scope(engine) as session:
        steps.begin_step(session, run_id, STEP, 0, lease_seconds=300)
    again = _begin(engine, run_id, lease=300, own_attempt=mine.attempts)
    assert again.attempts == 2 and again.taken_over
    with pytest.raises(steps.StepBusy), session_scope(engine) as session:
        # a stale claim on an attempt that is no longer the owner's waits like anyone
        steps.begin_step(session, run_id, STEP, 0, lease_seconds=300, own_attempt=mine.attempts)
