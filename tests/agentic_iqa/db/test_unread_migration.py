"""Migration 0017: ``runs.unread`` (why no answer was read) and ``jobs.items_cannot_see``."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from agentic_iqa.db import alembic_config, build_engine
from tests.agentic_iqa.db import check_schema
from tests.agentic_iqa.db.test_migrations import _insert_job


def test_0017_adds_unread_null_and_a_zero_count_for_jobs_before_and_downgrades_to_0016(
    empty_url: str,
) -> None:
    """A job stored before counts no item that could not see its image (0, never NULL: the
    column refuses it) and a run stored before has no unread kind; downgrade drops both and
    keeps the rows."""
    command.upgrade(alembic_config(empty_url), "0016")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (id, query, image_path, status, state_json, "
                    "iteration_count, max_replan_iterations, job_id, created_at) VALUES ('r1', "
                    "'q', 'a.png', 'succeeded', '{}', 0, 2, 'j1', CURRENT_TIMESTAMP)"
                )
            )
        command.upgrade(alembic_config(empty_url), "0017")
        assert [  # the models are a revision on (0018: a run's own configuration)
            (kind, table, column.name) for kind, _schema, table, column in check_schema(engine)
        ] == [("add_column", "runs", "config_json")]
        with engine.begin() as connection:
            assert connection.execute(text("SELECT items_cannot_see FROM jobs")).all() == [(0,)]
            assert connection.execute(text("SELECT unread FROM runs")).all() == [(None,)]
            connection.execute(text("UPDATE runs SET unread = 'cannot see'"))
            connection.execute(text("UPDATE jobs SET items_cannot_see = items_cannot_see + 1"))
            assert connection.execute(text("SELECT items_cannot_see FROM jobs")).all() == [(1,)]
        jobs = {c["name"]: c for c in inspect(engine).get_columns("jobs")}
        assert jobs["items_cannot_see"]["nullable"] is False
        assert {c["name"]: c for c in inspect(engine).get_columns("runs")}["unread"]["nullable"]
        command.downgrade(alembic_config(empty_url), "0016")
        assert "items_cannot_see" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert "unread" not in {c["name"] for c in inspect(engine).get_columns("runs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).all() == [("j1",)]
            assert connection.execute(text("SELECT id, job_id FROM runs")).all() == [("r1", "j1")]
    finally:
        engine.dispose()
