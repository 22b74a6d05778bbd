"""Leases: a running step's owner is waited for while alive and replaced once gone; runs that
went quiet are claimed for a re-send exactly once per lease (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, update

from agentic_iqa.db import Run, StepRecord, begin_step, create_run, get_run, session_scope, steps
from agentic_iqa.db.models import utc_now
from agentic_iqa.db.runs import claim_stalled, extend_lease, fail_run
from agentic_iqa.runtime.heartbeat import HEARTBEATS
from tests.agentic_iqa.db import IMAGE, QUERY, steps_for


def _run(engine: Engine, lease: float | None = 60.0) -> str:
    with session_scope(engine) as session:
        return create_run(session, query=QUERY, image_path=IMAGE, lease_seconds=lease)


def _expire(engine: Engine, run_id: str) -> None:
    """Move the run's and its steps' leases into the past, as if their owner had died."""
    past = utc_now() - timedelta(seconds=1)
    with session_scope(engine) as session:
        session.execute(update(Run).where(Run.id == run_id).values(lease_until=past))
        session.execute(
            update(StepRecord).where(StepRecord.run_id == run_id).values(lease_until=past)
        )


def test_a_step_running_under_a_live_lease_makes_a_second_delivery_wait(engine: Engine) -> None:
    run_id = _run(engine)
    with session_scope(engine) as session:
        begin_step(session, run_id, "plan", 0, worker="w1", lease_seconds=30)
    with session_scope(engine) as session, pytest.raises(steps.StepBusy) as busy:
        begin_step(session, run_id, "plan", 0, worker="w2", lease_seconds=30)
    assert 25 < busy.value.retry_after <= 30
    with session_scope(engine) as session:
        record = steps_for(session, run_id)[0]
        assert (record.worker, record.attempts) == ("w1", 1)


def test_a_step_whose_lease_passed_is_taken_over(engine: Engine) -> None:
    run_id = _run(engine)
    with session_scope(engine) as session:
        begin_step(session, run_id, "tool_execution", 0, worker="dead", lease_seconds=30)
    _expire(engine, run_id)
    with session_scope(engine) as session:
        record = begin_step(session, run_id, "tool_execution", 0, worker="heir", lease_seconds=30)
        assert record is not None
        assert (record.worker, record.attempts) == ("heir", 2)
        assert record.lease_until > utc_now() + timedelta(seconds=25)


def test_without_leases_a_redelivery_runs_the_step_again(engine: Engine) -> None:
    """The embedded path (one process) has no leases: a repeat begins the step again."""
    run_id = _run(engine, lease=None)
    with session_scope(engine) as session:
        begin_step(session, run_id, "plan", 0)
        assert begin_step(session, run_id, "plan", 0).attempts == 2


def test_stalled_runs_are_claimed_once_per_lease(engine: Engine) -> None:
    quiet, busy, unsupervised = _run(engine), _run(engine), _run(engine, lease=None)
    _expire(engine, quiet)
    with session_scope(engine) as session:
        assert claim_stalled(session, lease_seconds=30) == [quiet]
    with session_scope(engine) as session:  # re-leased: a second supervisor finds nothing
        assert claim_stalled(session, lease_seconds=30) == []
        assert get_run(session, quiet).resends == 1
        assert get_run(session, busy).resends == 0
        assert get_run(session, unsupervised).lease_until is None


def test_finished_runs_are_never_claimed_and_heartbeats_move_the_lease(engine: Engine) -> None:
    run_id = _run(engine, lease=1)
    with session_scope(engine) as session:
        begin_step(session, run_id, "plan", 0, lease_seconds=1)
        assert extend_lease(session, run_id, 90, step=("plan", 0))
    with session_scope(engine) as session:
        step = steps_for(session, run_id)[0]
        assert step.lease_until > utc_now() + timedelta(seconds=80)
        assert get_run(session, run_id).lease_until > utc_now() + timedelta(seconds=80)
        fail_run(session, run_id, error="gave up")
    _expire(engine, run_id)
    with session_scope(engine) as session:
        assert claim_stalled(session, lease_seconds=30) == []
        assert not extend_lease(session, run_id, 30)


def test_credentials_never_reach_the_database(engine: Engine, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-0123456789")
    run_id = _run(engine)
    reason = (
        "plan failed: APIConnectionError: Connection error at "
        "http://alice:s3cret-token@vlm.internal:8000/v1 (key sk-live-0123456789)"
    )
    with session_scope(engine) as session:
        steps.fail_step(session, run_id, "plan", 0, error=reason)
        fail_run(session, run_id, error=reason)
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        step = steps_for(session, run_id)[0]
    for stored in (run.error, step.error):
        assert "s3cret-token" not in stored and "sk-live-0123456789" not in stored
        assert "http://***@vlm.internal:8000/v1" in stored


def test_a_step_whose_every_delivery_died_fails_its_run_after_the_last_attempt(
    engine: Engine,
) -> None:
    from agentic_iqa.agents.team import metric_agents
    from agentic_iqa.runtime import service

    with session_scope(engine) as session:
        run_id = create_run(
            session, query=QUERY, image_path=IMAGE, lease_seconds=60, metric_tools=["PIQE"]
        )
    for worker in ("killed-1", "killed-2", "killed-3"):  # three deliveries began, none ended
        with session_scope(engine) as session:
            begin_step(session, run_id, "tool_execution", 0, worker=worker, lease_seconds=30)
        _expire(engine, run_id)

    result = service.execute_step(
        engine,
        metric_agents(),
        run_id,
        "tool_execution",
        0,
        worker="fourth",
        lease_seconds=30,
        max_attempts=3,
    )

    assert (result.outcome, result.upcoming) == (service.RAN, None)
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        step = steps_for(session, run_id)[0]
    assert run.status == "failed" and "gave up after 3 attempts" in run.error
    assert (step.status, step.attempts) == ("failed", 4)


def _leases(engine: Engine, runs: list[str]) -> list[tuple[datetime, datetime]]:
    """Each run's (step lease, run lease), read in one session."""
    with session_scope(engine) as session:
        return [
            (steps_for(session, run_id)[0].lease_until, get_run(session, run_id).lease_until)
            for run_id in runs
        ]


def _latest(engine: Engine, runs: list[str]) -> datetime:
    return max(lease for pair in _leases(engine, runs) for lease in pair)


def _renewed_past(engine: Engine, runs: list[str], floor: datetime, wait: float = 20.0) -> bool:
    """Whether every step's and run's lease moves past ``floor`` within ``wait`` seconds: polled,
    so a loaded machine that schedules the heartbeat late is waited for, not failed."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if all(lease > floor for pair in _leases(engine, runs) for lease in pair):
            return True
        time.sleep(0.05)
    return False


def test_one_heartbeat_thread_renews_every_running_step_until_it_ends(engine: Engine) -> None:
    """Judged by what the beats wrote, not by the clock at reading time: a lease pushed past
    where begin_step left it was renewed, however late the machine let the thread run."""
    runs = [_run(engine), _run(engine)]
    with session_scope(engine) as session:
        for run_id in runs:
            begin_step(session, run_id, "plan", 0, lease_seconds=0.4)
    taken = _latest(engine, runs)
    assert taken < utc_now() + timedelta(seconds=1)  # begin_step leased the run as well
    with (
        HEARTBEATS.hold(engine, runs[0], "plan", 0, 0.4),
        HEARTBEATS.hold(engine, runs[1], "plan", 0, 0.4),
    ):
        # A beat at least 0.3 s after begin_step, then another one 0.3 s later: it keeps on.
        assert _renewed_past(engine, runs, taken + timedelta(seconds=0.3))
        assert _renewed_past(engine, runs, _latest(engine, runs) + timedelta(seconds=0.3))
        assert [t.name for t in threading.enumerate()].count("lease-heartbeat") == 1
    time.sleep(0.3)  # a beat under way when the steps ended has written by now
    ended = _leases(engine, runs)
    time.sleep(0.8)  # two beats' worth: nothing renews them any more
    assert _leases(engine, runs) == ended
