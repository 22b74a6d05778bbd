"""Tests of the persistence layer; builders of the states and tool logs they store, and reads
of what a run stored (its steps, tool calls and replans, as rows)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agentic_iqa.db.models import Base, ReplanRow, StepRecord, ToolLog
from agentic_iqa.state import (
    AgenticIQAState,
    ExecutorOutput,
    SummarizerOutput,
    ToolExecutionLog,
    initial_state,
    merge_state,
)

IMAGE = "images/photo.png"
QUERY = "Rate the quality of this image."


def tool_log(
    tool: str,
    distortion: str,
    score: float,
    *,
    object_name: str = "Global",
    requested: str | None = None,
    error: str | None = None,
) -> ToolExecutionLog:
    """A logged tool call; a NaN score needs an error, as in the executor."""
    failed = math.isnan(score)
    return ToolExecutionLog(
        tool_name=tool,
        object_name=object_name,
        distortion=distortion,
        raw_score=math.nan if failed else score * 10,
        normalized_score=score,
        execution_time=0.25,
        fallback=requested is not None,
        requested_tool=requested,
        error=error if error is not None or not failed else f"{tool} failed",
    )


def execution_update(state: AgenticIQAState, logs: list[ToolExecutionLog]) -> dict[str, Any]:
    """What the tool_execution step returns for these logs."""
    return {
        "executor_evidence": ExecutorOutput(tool_logs=logs),
        "steps_done": [*state.get("steps_done", []), "tool_execution"],
    }


def answered(state: AgenticIQAState, score: float = 3.7) -> AgenticIQAState:
    """``state`` with a scoring-mode answer from the Summarizer."""
    result = SummarizerOutput(
        final_answer="Good",
        quality_reasoning="Sharp, mild noise.",
        quality_score=score,
        probability_source="logprobs",
    )
    return merge_state(state, {"summarizer_result": result})


def fresh_state() -> AgenticIQAState:
    return initial_state(QUERY, IMAGE)


def step_status(session: Session, run_id: str, step: str, iteration: int) -> str | None:
    """Return the step's status ('running', 'succeeded', 'failed'); None: it never began."""
    return session.scalar(
        select(StepRecord.status).where(
            StepRecord.run_id == run_id, StepRecord.step == step, StepRecord.iteration == iteration
        )
    )


def steps_for(session: Session, run_id: str) -> list[StepRecord]:
    """Return every step record of the run, in the order the steps first began."""
    return list(
        session.scalars(
            select(StepRecord)
            .where(StepRecord.run_id == run_id)
            .order_by(StepRecord.iteration, StepRecord.id)
        )
    )


def tool_logs_for(session: Session, run_id: str) -> list[ToolLog]:
    """Return every tool call of the run, in order."""
    return list(
        session.scalars(
            select(ToolLog).where(ToolLog.run_id == run_id).order_by(ToolLog.iteration, ToolLog.id)
        )
    )


def replans_for(session: Session, run_id: str) -> list[ReplanRow]:
    """Return every replanning round of the run, in order."""
    return list(
        session.scalars(
            select(ReplanRow).where(ReplanRow.run_id == run_id).order_by(ReplanRow.iteration)
        )
    )


def execution_log(log: ToolLog) -> ToolExecutionLog:
    """Return a stored tool call as the state's model again (a NULL score is NaN there)."""
    return ToolExecutionLog(
        tool_name=log.tool_name,
        requested_tool=log.requested_tool,
        object_name=log.object_name,
        distortion=log.distortion,
        raw_score=math.nan if log.raw_score is None else log.raw_score,
        normalized_score=math.nan if log.normalized_score is None else log.normalized_score,
        execution_time=log.execution_time,
        fallback=log.fallback,
        error=log.error,
        cached=log.cached,
        timestamp=log.timestamp,
    )


def check_schema(engine: Engine) -> list[Any]:
    """Return the differences between the models and the database's schema (none: agreed).

    Run on a database built by the migrations, this checks that models and migrations agree.
    """
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))
