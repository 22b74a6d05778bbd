"""Migration 0018: ``runs.config_json``, what shapes a run of no job."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from agentic_iqa.db import alembic_config, build_engine
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.runs import run_context
from agentic_iqa.runconfig import capture
from tests.agentic_iqa.db import check_schema
from tests.agentic_iqa.db.test_migrations import _insert_job

_RUN = (
    "INSERT INTO runs (id, query, image_path, status, state_json, iteration_count, "
    "max_replan_iterations, job_id, created_at) VALUES ('{id}', 'q', 'a.png', 'pending', "
    '\'{{"query": "q", "image_path": "a.png"}}\', 0, 2, {job}, CURRENT_TIMESTAMP)'
)


def test_0018_adds_a_null_run_config_that_a_job_overrides_and_downgrades_to_0017(
    empty_url: str,
) -> None:
    """Runs stored before have none (they run as the workers are configured, as before); a run
    of no job runs as its own says, a job's run as its job's; downgrade keeps the rows."""
    command.upgrade(alembic_config(empty_url), "0017")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        with engine.begin() as connection:
            connection.execute(text(_RUN.format(id="before", job="NULL")))
            connection.execute(text(_RUN.format(id="of-job", job="'j1'")))
        command.upgrade(alembic_config(empty_url), "0018")
        assert check_schema(engine) == []
        own = capture(max_replan_iterations=0, vlm_cache=False)
        of_job = capture(max_replan_iterations=2, vlm_cache=True)
        assert own != of_job
        with engine.begin() as connection:
            assert connection.execute(text("SELECT config_json FROM runs")).all() == [
                (None,),
                (None,),
            ]
            connection.execute(text("UPDATE runs SET config_json = :c"), {"c": own.to_json()})
            connection.execute(text("UPDATE jobs SET config_json = :c"), {"c": of_job.to_json()})
        with session_scope(engine) as session:
            assert run_context(session, "before").config == own
            assert run_context(session, "of-job").config == of_job  # the job's holds
        command.downgrade(alembic_config(empty_url), "0017")
        assert "config_json" not in {c["name"] for c in inspect(engine).get_columns("runs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM runs ORDER BY id")).all() == [
                ("before",),
                ("of-job",),
            ]
    finally:
        engine.dispose()
