"""The Planner: query (+ image, + optional reference) -> validated PlannerOutput.

The model's plan is read tolerantly (:mod:`.jsonreply`, the state's validators), then the parts
that the input itself decides are set from the input, whatever the model wrote
(:func:`reconcile`): the reference mode follows whether a reference is given, a tool is required
only when the query names it as a tool, and named distortions are not detected again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..prompts import PLANNER_SYSTEM, PLANNER_USER, render
from ..query import parse_query, tool_in
from ..state import PlanControlFlags, PlannerError, PlannerOutput
from ..vlm.base import FatalVLMError, TransientVLMError, VLMClient, VLMError, VLMRequest
from .jsonreply import ask_json

log = logging.getLogger(__name__)


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
    except (TransientVLMError, FatalVLMError):
        raise  # retried later by the caller; or stops a job: a permanent error fails below
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
    return reconcile(outcome.value, query, reference_path is not None, tool_names)


def reconcile(plan: PlannerOutput, query: str, has_reference: bool,
              tool_names: list[str]) -> PlannerOutput:
    """``plan`` with what the input decides taken from the input (logged when it differs)."""
    changes: dict[str, object] = {}
    mode = "Full-Reference" if has_reference else "No-Reference"
    if plan.reference_mode != mode:
        changes["reference_mode"] = mode
    flags = plan.plan
    named = tool_in(query, tool_names) if tool_names else plan.required_tool
    if plan.required_tool != named:
        changes["required_tool"] = named
        if named is not None:  # the query's tool is run, not one selected
            flags = flags.model_copy(update={"tool_selection": False, "tool_execution": True})
        elif flags.tool_execution:  # no tool is given: one must be selected
            flags = flags.model_copy(update={"tool_selection": True})
    if plan.distortions and flags.distortion_detection:
        # Distortions the query names are the ones to look at: not detected (and replaced).
        flags = flags.model_copy(update={"distortion_detection": False})
    if flags != plan.plan:
        changes["plan"] = flags
    if changes:
        log.info("plan adjusted to the input: %s", {
            key: value.model_dump() if hasattr(value, "model_dump") else value
            for key, value in changes.items()})
        plan = plan.model_copy(update=changes)
    return plan


def no_plan(query: str, has_reference: bool) -> PlannerOutput:
    """The plan of a run where the VLM answers alone (``--mode vlm``): nothing asked of a
    planner, no executor subtask, so the summarizer sees the image and the question only.
    Taste questions stay "Other" so a rating request is still told from a question."""
    aesthetic = parse_query(query).aesthetic
    return PlannerOutput(
        query_type="Other" if aesthetic else "IQA", query_scope="Global",
        distortion_source="Inferred", distortions=None,
        reference_mode="Full-Reference" if has_reference else "No-Reference",
        required_tool=None,
        plan=PlanControlFlags(distortion_detection=False, distortion_analysis=False,
                              tool_selection=False, tool_execution=False))
