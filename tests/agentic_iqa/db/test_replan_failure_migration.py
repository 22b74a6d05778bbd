"""Migration 0016: ``replan_history.failure``, why a replan's new plan could not be made."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from agentic_iqa.db import (
    alembic_config,
    build_engine,
    complete_step,
    create_run,
    session_scope,
)
from agentic_iqa.state import record_replan
from tests.agentic_iqa.db import IMAGE, QUERY, answered, check_schema, fresh_state


def test_0016_adds_the_failure_of_a_replan_null_for_those_before_and_downgrades_to_0015(
    empty_url: str,
) -> None:
    """A replan stored under 0015 has no failure under 0016 (NULL: none was recorded); a
    failure written under 0016 is dropped with its column by the downgrade, its row kept."""
    config = alembic_config(empty_url)
    command.upgrade(config, "head")  # the run is written as the models write it, 0016 on
    engine = build_engine(empty_url, pooled=False)
    try:
        assert check_schema(engine) == []
        with session_scope(engine) as session:
            run_id = create_run(session, query=QUERY, image_path=IMAGE)
            complete_step(
                session,
                run_id,
                "replan",
                0,
                update={},
                state=record_replan(answered(fresh_state()), "look closer"),
            )
        with engine.begin() as connection:
            connection.execute(text("UPDATE replan_history SET failure = 'no valid plan'"))
        command.downgrade(config, "0015")
        assert "failure" not in {c["name"] for c in inspect(engine).get_columns("replan_history")}
        command.upgrade(config, "0016")
        with engine.connect() as connection:
            assert connection.execute(
                text("SELECT run_id, iteration, reason, failure FROM replan_history")
            ).all() == [(run_id, 1, "look closer", None)]
        column = {c["name"]: c for c in inspect(engine).get_columns("replan_history")}
        assert column["failure"]["nullable"] is True
    finally:
        engine.dispose()
