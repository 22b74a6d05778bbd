"""The pipeline's writes: idempotent under redelivery, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, Row, bindparam, func, select, text
from sqlalchemy.orm import Session

from agentic_iqa.db import (
    ReplanRow,
    Run,
    RunNotFound,
    StepRecord,
    ToolLog,
    begin_step,
    complete_step,
    create_run,
    fail_run,
    fail_step,
    finish_run,
    get_run,
    load_state,
    session_scope,
    steps,
)
from agentic_iqa.db.models import UtcDateTime
from agentic_iqa.state import initial_state, merge_state, record_replan, state_to_json
from tests.agentic_iqa.db import (
    IMAGE,
    QUERY,
    answered,
    execution_log,
    execution_update,
    fresh_state,
    replans_for,
    step_status,
    steps_for,
    tool_log,
    tool_logs_for,
)


def _new_run(engine: Engine, **options: object) -> str:
    with session_scope(engine) as session:
        return create_run(session, query=QUERY, image_path=IMAGE, **options)


def test_create_run_stores_a_pending_run_with_its_initial_state(engine: Engine) -> None:
    run_id = _new_run(
        engine,
        reference_path="ref.png",
        max_replan_iterations=3,
        backend="planner=builtin",
        job_id="job-1",
    )
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        assert (run.status, run.iteration_count, run.max_replan_iterations) == ("pending", 0, 3)
        assert (run.reference_path, run.backend, run.job_id) == (
            "ref.png",
            "planner=builtin",
            "job-1",
        )
        assert run.created_at.tzinfo is UTC
        assert run.started_at is None and run.finished_at is None
        assert load_state(session, run_id) == initial_state(
            QUERY, IMAGE, "ref.png", max_replan_iterations=3
        )
    assert len(run_id) == 36 and run_id.count("-") == 4


def test_an_unknown_run_raises_run_not_found(engine: Engine) -> None:
    with session_scope(engine) as session, pytest.raises(RunNotFound) as raised:
        load_state(session, "no-such-run")
    assert isinstance(raised.value, KeyError)
    assert str(raised.value) == "no run with id 'no-such-run' in the database"


def test_begin_step_counts_attempts_and_starts_the_run(engine: Engine) -> None:
    run_id = _new_run(engine)
    with session_scope(engine) as session:
        assert step_status(session, run_id, "plan", 0) is None
        record = begin_step(session, run_id, "plan", 0, worker="w1", queue="vlm")
        assert record is not None and record.attempts == 1
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        assert run.status == "running" and run.started_at is not None
        first_start = run.started_at
        assert step_status(session, run_id, "plan", 0) == "running"
        fail_step(session, run_id, "plan", 0, error="VLM timed out")
        assert step_status(session, run_id, "plan", 0) == "failed"
    with session_scope(engine) as session:
        record = begin_step(session, run_id, "plan", 0, worker="w2", queue="vlm")
        assert record is not None
        assert (record.attempts, record.worker, record.taken_over) == (2, "w2", False)
        stored = steps_for(session, run_id)[0]
        assert (stored.attempts, stored.status, stored.error, stored.worker) == (
            2,
            "running",
            None,
            "w2",
        )
        assert get_run(session, run_id).started_at == first_start


def test_steps_for_lists_a_runs_steps_in_order(engine: Engine) -> None:
    run_id = _new_run(engine)
    other = _new_run(engine)
    state = fresh_state()
    with session_scope(engine) as session:
        for step, iteration in (("plan", 0), ("summarize", 0), ("replan", 0), ("plan", 1)):
            begin_step(session, run_id, step, iteration, queue="default")
            complete_step(session, run_id, step, iteration, state=state, update={})
        begin_step(session, other, "plan", 0)
        fail_step(session, run_id, "summarize", 1, error="gave up")
    with session_scope(engine) as session:
        rows = [(r.step, r.iteration, r.status, r.attempts) for r in steps_for(session, run_id)]
    assert rows == [
        ("plan", 0, "succeeded", 1),
        ("summarize", 0, "succeeded", 1),
        ("replan", 0, "succeeded", 1),
        ("plan", 1, "succeeded", 1),
        ("summarize", 1, "failed", 1),
    ]


def test_begin_step_returns_none_once_the_step_succeeded(engine: Engine) -> None:
    run_id = _new_run(engine)
    state = fresh_state()
    with session_scope(engine) as session:
        begin_step(session, run_id, "plan", 0)
        complete_step(session, run_id, "plan", 0, state=state, update={})
    with session_scope(engine) as session:
        assert begin_step(session, run_id, "plan", 0) is None
        record = session.scalars(select(StepRecord)).one()
        assert (record.status, record.attempts) == ("succeeded", 1)
        assert record.finished_at is not None and record.finished_at.tzinfo is UTC


def test_complete_step_twice_stores_each_tool_call_once(engine: Engine) -> None:
    run_id = _new_run(engine)
    state = fresh_state()
    logs = [
        tool_log("NIQE", "Blurs", 3.0, requested="BRISQUE"),
        tool_log("MUSIQ", "Noise", math.nan),
        tool_log("SSIM", "Blurs", 4.2, object_name="vehicle"),
    ]
    update = execution_update(state, logs)
    merged = merge_state(state, update)
    for _ in range(2):  # a redelivered task completes the same step again
        with session_scope(engine) as session:
            begin_step(session, run_id, "tool_execution", 0)
            complete_step(session, run_id, "tool_execution", 0, state=merged, update=update)
    with session_scope(engine) as session:
        stored = tool_logs_for(session, run_id)
        assert [execution_log(log) for log in stored] == logs
        assert [(log.tool_name, log.requested_tool, log.fallback) for log in stored] == [
            ("NIQE", "BRISQUE", True),
            ("MUSIQ", None, False),
            ("SSIM", None, False),
        ]
        assert stored[1].normalized_score is None and stored[1].error == "MUSIQ failed"
        assert {log.iteration for log in stored} == {0}
        assert load_state(session, run_id) == merged
        record = session.scalars(select(StepRecord)).one()
        assert (record.status, record.attempts) == ("succeeded", 1)
        output = json.loads(record.output_json or "")
        assert output["steps_done"] == ["tool_execution"]
        assert output["executor_evidence"]["tool_logs"][1]["normalized_score"] == "NaN"


def test_tool_logs_of_later_iterations_are_kept_apart(engine: Engine) -> None:
    run_id = _new_run(engine)
    state = fresh_state()
    for iteration in (0, 1):
        update = execution_update(state, [tool_log("NIQE", "Blurs", 3.0 + iteration)])
        with session_scope(engine) as session:
            complete_step(
                session,
                run_id,
                "tool_execution",
                iteration,
                state=merge_state(state, update),
                update=update,
            )
    with session_scope(engine) as session:
        stored = tool_logs_for(session, run_id)
        assert [(log.iteration, log.normalized_score) for log in stored] == [(0, 3.0), (1, 4.0)]


def test_replans_are_stored_once_each_and_all_of_them(engine: Engine) -> None:
    run_id = _new_run(engine)
    state = record_replan(answered(fresh_state()), "Missing tool scores for vehicle")
    with session_scope(engine) as session:
        complete_step(session, run_id, "replan", 0, state=state, update={})
    state = record_replan(state, "Still no vehicle scores")
    for _ in range(2):
        with session_scope(engine) as session:
            complete_step(session, run_id, "replan", 1, state=state, update={})
    with session_scope(engine) as session:
        rows = replans_for(session, run_id)
        assert [(row.iteration, row.reason) for row in rows] == [
            (1, "Missing tool scores for vehicle"),
            (2, "Still no vehicle scores"),
        ]
        assert rows[1].created_at == state["replan_history"][1].timestamp
        assert get_run(session, run_id).iteration_count == 2


def test_a_replans_failure_is_written_to_its_row_once_and_kept(engine: Engine) -> None:
    """Its row is written when the replan is asked for (no failure yet); the plan step that
    fails writes why, with a credential in it masked; a later state without it (trimmed to
    the latest replans) clears nothing."""
    from agentic_iqa.pipeline import replan_failed
    from agentic_iqa.state import PlannerOutput
    from tests.agentic_iqa.agents.planner_corpus import model_plan

    run_id = _new_run(engine)
    planned = merge_state(fresh_state(), {"plan": PlannerOutput.model_validate(model_plan())})
    state = record_replan(answered(planned), "look closer")
    with session_scope(engine) as session:
        complete_step(session, run_id, "replan", 0, state=state, update={})
        assert [row.failure for row in replans_for(session, run_id)] == [None]
    failed = merge_state(
        state,
        replan_failed(state, "no valid plan: https://user:hunter2@vlm.example/v1 answered 500"),
    )
    with session_scope(engine) as session:
        complete_step(session, run_id, "plan", 1, state=failed, update={})
    with session_scope(engine) as session:
        complete_step(session, run_id, "summarize", 1, state=state, update={})
    with session_scope(engine) as session:
        (row,) = replans_for(session, run_id)
    assert row.failure == "no valid plan: https://***@vlm.example/v1 answered 500"
    assert row.reason == "look closer"


def test_finish_run_records_the_answer(engine: Engine) -> None:
    run_id = _new_run(engine)
    state = answered(fresh_state(), score=3.7)
    with session_scope(engine) as session:
        begin_step(session, run_id, "summarize", 0)
        finish_run(session, run_id, state=state)
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        assert (run.status, run.final_answer, run.quality_score, run.error) == (
            "succeeded",
            "Good",
            3.7,
            None,
        )
        assert run.finished_at is not None and run.finished_at >= run.created_at
        assert run.state_json == state_to_json(state)


def test_finish_run_without_an_answer_is_a_failure(engine: Engine) -> None:
    run_id = _new_run(engine)
    state = merge_state(fresh_state(), {"error": "planning failed after 3 attempts"})
    with session_scope(engine) as session:
        finish_run(session, run_id, state=state)
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        assert (run.status, run.final_answer, run.quality_score, run.error) == (
            "failed",
            None,
            None,
            "planning failed after 3 attempts",
        )


def test_fail_run_records_the_error(engine: Engine) -> None:
    run_id = _new_run(engine)
    with session_scope(engine) as session:
        fail_run(session, run_id, error="worker lost")
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        assert (run.status, run.error) == ("failed", "worker lost")
        assert run.finished_at is not None and run.finished_at.tzinfo is UTC


def test_a_lost_insert_race_reads_the_winners_record(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _new_run(engine)
    with session_scope(engine) as session:
        begin_step(session, run_id, "plan", 0, worker="first")
    real_find = steps._find_step
    calls: list[int] = []

    def find_nothing_first(
        session: Session, run_id: str, step: str, iteration: int
    ) -> StepRecord | None:
        # The second delivery looked before the first one committed.
        calls.append(1)
        return None if len(calls) == 1 else real_find(session, run_id, step, iteration)

    monkeypatch.setattr(steps, "_find_step", find_nothing_first)
    with session_scope(engine) as session:  # a step's failure recorded by another delivery
        fail_step(session, run_id, "plan", 0, error="timed out")
    assert len(calls) == 2
    with session_scope(engine) as session:
        record = session.scalars(select(StepRecord)).one()
        assert (record.attempts, record.worker, record.status) == (1, "first", "failed")


def test_concurrent_deliveries_of_one_step_share_one_record(engine: Engine) -> None:
    run_id = _new_run(engine)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def deliver(worker: str) -> None:
        try:
            barrier.wait(timeout=10)
            with session_scope(engine) as session:
                begin_step(session, run_id, "plan", 0, worker=worker)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(f"w{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with session_scope(engine) as session:
        records = session.scalars(select(StepRecord)).all()
        assert [(r.step, r.attempts, r.status) for r in records] == [("plan", 2, "running")]


#: Questions a user asks of the database, as SQL that runs unchanged on SQLite and PostgreSQL.
#: Parameters (``:since``) are bound by :func:`run_example_query`.
EXAMPLE_QUERIES: dict[str, str] = {
    "runs_where_brisque_fell_back": """
        SELECT r.id AS run_id, r.image_path, t.iteration, t.object_name, t.distortion,
               t.tool_name AS used_instead, t.error
        FROM runs AS r
        JOIN tool_logs AS t ON t.run_id = r.id
        WHERE t.requested_tool = 'BRISQUE' AND t.fallback
        ORDER BY r.created_at, r.id, t.iteration, t.id
    """,
    "mean_normalized_score_per_tool": """
        SELECT tool_name, COUNT(*) AS calls, COUNT(normalized_score) AS scored,
               AVG(normalized_score) AS mean_normalized_score
        FROM tool_logs
        GROUP BY tool_name
        ORDER BY tool_name
    """,
    "failed_runs_since": """
        SELECT id AS run_id, query, image_path, error, finished_at
        FROM runs
        WHERE status = 'failed' AND finished_at >= :since
        ORDER BY finished_at DESC, id
    """,
}


def run_example_query(session: Session, name: str, **params: Any) -> list[Row[Any]]:
    """Run one of :data:`EXAMPLE_QUERIES`; a ``since`` datetime is bound as UTC on both dialects.

    (SQLite stores timestamps as text; an unbound Python datetime would be compared as a
    differently formatted string.)
    """
    statement = text(EXAMPLE_QUERIES[name])
    if isinstance(params.get("since"), datetime):
        statement = statement.bindparams(bindparam("since", type_=UtcDateTime()))
    return list(session.execute(statement, params))


def _seed(engine: Engine, now: datetime) -> dict[str, str]:
    """Runs for the example queries: a fallback, plain scores, two failures, one success."""
    runs: dict[str, str] = {}
    state = fresh_state()
    for name, logs in (
        (
            "fell_back",
            [tool_log("NIQE", "Blurs", 3.0, requested="BRISQUE"), tool_log("SSIM", "Noise", 4.0)],
        ),
        (
            "scored",
            [
                tool_log("BRISQUE", "Blurs", 2.0),
                tool_log("SSIM", "Noise", 3.0),
                tool_log("MUSIQ", "Overexposure", math.nan),
            ],
        ),
    ):
        runs[name] = _new_run(engine)
        update = execution_update(state, logs)
        with session_scope(engine) as session:
            complete_step(
                session,
                runs[name],
                "tool_execution",
                0,
                state=merge_state(state, update),
                update=update,
            )
            finish_run(session, runs[name], state=answered(state))
    for name, error in (("failed_recently", "planner gave up"), ("failed_long_ago", "old")):
        runs[name] = _new_run(engine)
        with session_scope(engine) as session:
            fail_run(session, runs[name], error=error)
    with session_scope(engine) as session:
        session.get_one(Run, runs["failed_recently"]).finished_at = now - timedelta(hours=2)
        session.get_one(Run, runs["failed_long_ago"]).finished_at = now - timedelta(days=2)
    return runs


def test_the_example_queries_answer_on_both_databases(engine: Engine) -> None:
    now = datetime.now(UTC)
    runs = _seed(engine, now)
    assert set(EXAMPLE_QUERIES) == {
        "runs_where_brisque_fell_back",
        "mean_normalized_score_per_tool",
        "failed_runs_since",
    }
    with session_scope(engine) as session:
        fell_back = run_example_query(session, "runs_where_brisque_fell_back")
        assert [
            (row.run_id, row.image_path, row.object_name, row.distortion, row.used_instead)
            for row in fell_back
        ] == [(runs["fell_back"], IMAGE, "Global", "Blurs", "NIQE")]

        per_tool = run_example_query(session, "mean_normalized_score_per_tool")
        assert [tuple(row) for row in per_tool] == [
            ("BRISQUE", 1, 1, 2.0),
            ("MUSIQ", 1, 0, None),
            ("NIQE", 1, 1, 3.0),
            ("SSIM", 2, 2, 3.5),
        ]

        failed = run_example_query(session, "failed_runs_since", since=now - timedelta(days=1))
        assert [(row.run_id, row.query, row.error) for row in failed] == [
            (runs["failed_recently"], QUERY, "planner gave up")
        ]
        assert session.scalar(select(func.count()).select_from(ReplanRow)) == 0
        assert session.scalar(select(func.count()).select_from(ToolLog)) == 5
