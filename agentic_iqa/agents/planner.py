"""The Planner: query (+ image, + optional reference) -> validated PlannerOutput."""

from __future__ import annotations

from pathlib import Path

from ..prompts import PLANNER_SYSTEM, PLANNER_USER, render
from ..state import PlannerError, PlannerOutput
from ..vlm.base import TransientVLMError, VLMClient, VLMError, VLMRequest
from .jsonreply import ask_json


class PlanningFailed(Exception):
    """The planner produced no valid plan; carries the structured error."""

    def __init__(self, error: PlannerError) -> None:
        super().__init__(error.message)
        self.error = error


def make_plan(client: VLMClient, query: str, image_path: str, reference_path: str | None,
              tool_names: list[str], replan_reason: str | None = None) -> PlannerOutput:
    replan_context = (f"Previous attempt needs replanning: {replan_reason}\n"
                      if replan_reason else "")
    images = tuple(Path(p) for p in (image_path, reference_path) if p)
    request = VLMRequest(
        task="plan",
        system=PLANNER_SYSTEM,
        user=render(PLANNER_USER, query=query, has_reference="yes" if reference_path else "no",
                    replan_context=replan_context),
        images=images,
        context={"query": query, "has_reference": reference_path is not None,
                 "tool_names": tool_names, "replan_reason": replan_reason},
    )
    try:
        outcome = ask_json(client, request, PlannerOutput.model_validate)
    except TransientVLMError:
        raise  # the caller may retry later; a permanent error fails planning below
    except VLMError as exc:
        raise PlanningFailed(PlannerError.from_exception(
            exc, backend=getattr(client, "backend", None))) from exc
    if outcome.value is None:
        raise PlanningFailed(PlannerError(
            error_type="validation_error",
            message="planner gave no valid plan: " + "; ".join(outcome.errors),
            retry_count=outcome.attempts - 1,
            backend=getattr(client, "backend", None),
        ))
    plan = outcome.value
    if reference_path is None and plan.reference_mode == "Full-Reference":
        # A plan cannot use a reference that does not exist.
        plan = plan.model_copy(update={"reference_mode": "No-Reference"})
    return plan
