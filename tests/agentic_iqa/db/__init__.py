"""Tests of the persistence layer; builders of the states and tool logs they store."""

from __future__ import annotations

import math
from typing import Any

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
