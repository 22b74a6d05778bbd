"""Migration 0015: ``jobs.submitting``, true while a submit is still adding a job's rows."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from agentic_iqa.db import alembic_config, build_engine
from tests.agentic_iqa.db import check_schema
from tests.agentic_iqa.db.test_migrations import _insert_job


def test_0015_adds_submitting_false_for_jobs_before_and_downgrades_to_0014(empty_url: str) -> None:
    """A job stored before is not submitting (its rows are all in); the column refuses NULL;
    downgrade drops it and keeps the job."""
    command.upgrade(alembic_config(empty_url), "0014")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0015")
        # The models are three revisions on (0016: a replan's failure; 0017: unread answers;
        # 0018: a run's own configuration).
        assert sorted(
            (kind, table, column.name) for kind, _schema, table, column in check_schema(engine)
        ) == [
            ("add_column", "jobs", "items_cannot_see"),
            ("add_column", "replan_history", "failure"),
            ("add_column", "runs", "config_json"),
            ("add_column", "runs", "unread"),
        ]
        with engine.begin() as connection:
            assert connection.execute(text("SELECT submitting FROM jobs")).all() == [(False,)]
            connection.execute(text("UPDATE jobs SET submitting = true"))
            assert connection.execute(text("SELECT submitting FROM jobs")).all() == [(True,)]
        column = {c["name"]: c for c in inspect(engine).get_columns("jobs")}["submitting"]
        assert column["nullable"] is False
        command.downgrade(alembic_config(empty_url), "0014")
        assert "submitting" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).all() == [("j1",)]
    finally:
        engine.dispose()
