"""Hold one run's state: its keys, how updates merge, replanning rounds, the JSON round trip."""

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, cast

from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    with_config,
)
from typing_extensions import TypedDict

from .executor import ExecutorOutput
from .fields import (
    DEFAULT_MAX_REPLAN_ITERATIONS,
    MAX_REPLAN_HISTORY,
    STORED,
    StateModel,
    Text,
    ToolName,
    UtcDatetime,
    utc_now,
)
from .plan import PlannerOutput
from .summarizer import SummarizerOutput

log = logging.getLogger(__name__)


class ReplanEntry(StateModel):
    """One replanning round: why the Summarizer asked for it, and why it failed if it did."""

    iteration: int = Field(ge=1, description="the iteration count after this replan")
    reason: Text
    timestamp: UtcDatetime = Field(default_factory=utc_now)
    failure: str | None = Field(
        default=None,
        description="why its new plan could not be made: the summarizer then "
        "answered with the previous plan and its evidence",
    )


@with_config(ConfigDict(extra="forbid"))
class AgenticIQAState(TypedDict):
    """The state of one run, as it grows through the pipeline.

    The inputs come first (query, image, optional reference); the Planner adds ``plan`` (or
    ``error``), the Executor adds ``executor_evidence``, the Summarizer ``summarizer_result``.
    When the Summarizer asks to replan, :func:`record_replan` counts the round and keeps the
    reason, and the Planner runs again, at most ``max_replan_iterations`` times; the previous
    plan and evidence stay until the new plan is made, and are answered with if it cannot be.
    Updates are applied with :func:`merge_state`; the state crosses processes with
    :func:`state_to_json`.
    """

    query: str
    image_path: str
    reference_path: NotRequired[str]
    # Phase 2: Planner outputs
    plan: NotRequired[PlannerOutput]
    error: NotRequired[str]
    # Phase 3: Executor outputs
    executor_evidence: NotRequired[ExecutorOutput]
    # Phase 4: Summarizer outputs and replanning
    summarizer_result: NotRequired[SummarizerOutput]
    iteration_count: NotRequired[int]
    max_replan_iterations: NotRequired[int]
    replan_history: NotRequired[list[ReplanEntry]]
    # Progress of the current iteration, so the next step follows from the state alone
    steps_done: NotRequired[list[str]]
    step_seconds: NotRequired[dict[str, float]]
    # Executor subtasks given up on (``step#iteration`` -> why): their evidence is null
    step_errors: NotRequired[dict[str, str]]
    # A metric job's run: only these tools, on the whole image, with no plan and no VLM
    metric_tools: NotRequired[list[ToolName]]
    # "vlm": the VLM answers alone (an ablation): no plan asked for, no executor, no replan
    mode: NotRequired[Literal["agent", "vlm"]]


_STATE_KEYS = AgenticIQAState.__required_keys__ | AgenticIQAState.__optional_keys__
_STATE = TypeAdapter(AgenticIQAState)


def initial_state(
    query: str,
    image_path: str,
    reference_path: str | None = None,
    *,
    max_replan_iterations: int = DEFAULT_MAX_REPLAN_ITERATIONS,
    metric_tools: Sequence[str] | None = None,
    mode: Literal["agent", "vlm"] = "agent",
) -> AgenticIQAState:
    """Return a run's starting state, with the replanning counters set.

    ``metric_tools``: a metric job's run, which only scores the image with these tools.
    ``mode="vlm"``: the VLM answers the query alone, the ablation of the agent's parts.
    """
    if max_replan_iterations < 0:
        raise ValueError(f"max_replan_iterations must be >= 0, got {max_replan_iterations}")
    state = AgenticIQAState(
        query=query,
        image_path=image_path,
        iteration_count=0,
        max_replan_iterations=max_replan_iterations,
        replan_history=[],
    )
    if reference_path is not None:
        state["reference_path"] = reference_path
    if metric_tools:
        state["metric_tools"] = list(metric_tools)
    if mode == "vlm":
        state["mode"] = "vlm"
        state["max_replan_iterations"] = 0
    return state


def merge_state(state: AgenticIQAState, update: Mapping[str, Any]) -> AgenticIQAState:
    """Return ``state`` with a node's partial ``update`` applied; neither argument is modified.

    Every key is replaced, except ``executor_evidence``, which accumulates: the update's fields
    that are not None replace the old ones and its tool logs are appended.  A None value removes
    an optional key.  Nested models are shared with the inputs, not copied: treat them as
    immutable.
    """
    unknown = sorted(set(update) - _STATE_KEYS)
    if unknown:
        raise ValueError(f"unknown state keys {unknown}; known: {sorted(_STATE_KEYS)}")
    merged: dict[str, Any] = {
        key: list(value) if isinstance(value, list) else value for key, value in state.items()
    }
    for key, value in update.items():
        if value is None:
            if key in AgenticIQAState.__required_keys__:
                raise ValueError(f"{key} is required and cannot be removed from the state")
            merged.pop(key, None)
        elif key == "executor_evidence" and merged.get(key) is not None:
            merged[key] = _add_evidence(merged[key], value)
        else:
            merged[key] = list(value) if isinstance(value, list) else value
    return cast(AgenticIQAState, merged)


def _add_evidence(old: Any, new: Any) -> ExecutorOutput:
    old, new = ExecutorOutput.model_validate(old), ExecutorOutput.model_validate(new)
    changes = {
        name: getattr(new, name)
        for name in ExecutorOutput.model_fields
        if name not in {"tool_logs", "notes"} and getattr(new, name) is not None
    }
    return old.model_copy(
        update={
            **changes,
            "tool_logs": [*old.tool_logs, *new.tool_logs],
            "notes": [*old.notes, *new.notes],
        }
    )


def record_replan(state: AgenticIQAState, reason: str) -> AgenticIQAState:
    """Return ``state`` after one more replanning round: the count goes up, the reason is kept.

    Only the latest :data:`MAX_REPLAN_HISTORY` entries are kept; dropping older ones is logged
    as a warning, because a run that replans that often is stuck.
    """
    iteration = state.get("iteration_count", 0) + 1
    history = [*state.get("replan_history", []), ReplanEntry(iteration=iteration, reason=reason)]
    if len(history) > MAX_REPLAN_HISTORY:
        dropped = history[:-MAX_REPLAN_HISTORY]
        history = history[-MAX_REPLAN_HISTORY:]
        log.warning(
            "excessive replanning (%d rounds): replan history keeps the last %d entries, "
            "dropped iterations %s",
            iteration,
            MAX_REPLAN_HISTORY,
            [entry.iteration for entry in dropped],
        )
    return merge_state(state, {"iteration_count": iteration, "replan_history": history})


def state_to_json(state: AgenticIQAState) -> str:
    """Return the state as JSON (validated first, so whatever is written can be read back)."""
    return _STATE.dump_json(_STATE.validate_python(state)).decode()


def state_from_json(text: str | bytes) -> AgenticIQAState:
    """Return the state written by :func:`state_to_json`, with its nested models revived."""
    return _STATE.validate_json(text, context=STORED)
