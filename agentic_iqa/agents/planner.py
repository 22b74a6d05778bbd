"""The Planner: query (+ image, + optional reference) -> validated PlannerOutput.

The model plans; the input only corrects what it disproves.  The model's plan is
read tolerantly (:mod:`.jsonreply`, the state's validators); the fields the input decides may
be missing from it (they are filled in from the input, with a note in the log:
:func:`input_defaults`).  Then :func:`reconcile` overrides the model only where the input
proves it wrong:

- the reference mode: "Full-Reference" exactly when a reference is given;
- tools: a tool the query names unambiguously, in any catalogue spelling or alias ("Multi-Scale
  SSIM" is MS-SSIM, not SSIM), is required and one it rules out is excluded; a query naming no
  tool requires none.  A family name ("TOPIQ", "WaDIQaM") is decided by a qualifier beside it
  ("the full-reference one", "(NR)", "blind"), else the model's choice stands when it is one of
  the family, else the one member that fits the reference mode, if exactly one does.  A
  catalogue name inside a longer name ("IL-NIQE", "LPIPS-VGG", "CLIP-IQA+", "NIQE v2") is a
  tool the catalogue lacks, never the shorter one: it is no required tool, tools are selected
  and run instead, and the plan's ``uncatalogued_tools`` keeps its name for the answer;
- distortions: a category the query names with a word that only ever names a distortion
  ("blurry", "too dark", "JPEG") is Explicit, analysed and not detected.  Words that may as well
  describe the content ("dark", "bright", "colour", "details", "flat", "lighting":
  ``query.AMBIGUOUS_DISTORTION_TERMS``) never override the model: where it read them as a
  distortion or as content, its reading stands.  A question about what the picture shows ("what
  colour is the car?", "how many people are there?") is no distortion question: nothing is made
  Explicit from its words and detection is not turned off for them; the model's plan stands;
- an "Other" question (taste, style) runs no executor subtask.

Everything else (query type, scope, answer mode, analysis) is the model's.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from ..prompts import PLANNER_SYSTEM, PLANNER_USER, render
from ..query import (
    distortion_words,
    excluded_tools_in,
    fold_object_name,
    parse_query,
    planned_subtasks,
    required_tool_in,
    uncatalogued_tools_in,
)
from ..state import PlanControlFlags, PlannerError, PlannerOutput
from ..vlm.base import FatalVLMError, TransientVLMError, VLMClient, VLMError, VLMRequest
from .jsonreply import ask_json

log = logging.getLogger(__name__)


class PlanningFailed(Exception):
    """The planner produced no valid plan; carries the structured error."""

    def __init__(self, error: PlannerError) -> None:
        super().__init__(error.message)
        self.error = error


def make_plan(
    client: VLMClient,
    query: str,
    image_path: str,
    reference_path: str | None,
    tool_names: list[str],
    replan_reason: str | None = None,
) -> PlannerOutput:
    """Ask the VLM for the plan of ``query`` on the image, read it tolerantly and reconcile it.

    ``replan_reason``: why the summarizer asked to plan again, told to the model.  Raises
    :class:`PlanningFailed` when no valid plan comes back or the VLM fails for good."""
    replan_context = (
        f"Previous attempt needs replanning: {replan_reason}\n" if replan_reason else ""
    )
    images = tuple(str(p) for p in (image_path, reference_path) if p)
    request = VLMRequest(
        task="plan",
        system=PLANNER_SYSTEM,
        user=render(
            PLANNER_USER,
            query=query,
            has_reference="yes" if reference_path else "no",
            replan_context=replan_context,
        ),
        images=images,
        context={
            "query": query,
            "has_reference": reference_path is not None,
            "tool_names": tool_names,
            "replan_reason": replan_reason,
        },
    )
    defaults = input_defaults(query, reference_path is not None, tool_names)
    filled: list[str] = []

    def validate(data: dict[str, Any]) -> PlannerOutput:
        context: dict[str, Any] = {"defaults": defaults, "filled": []}
        plan = PlannerOutput.model_validate(data, context=context)
        filled[:] = context["filled"]
        return plan

    try:
        outcome = ask_json(client, request, validate)
    except (TransientVLMError, FatalVLMError):
        raise  # retried later by the caller; or stops a job: a permanent error fails below
    except VLMError as exc:
        raise PlanningFailed(
            PlannerError.from_exception(exc, backend=getattr(client, "backend", None))
        ) from exc
    if outcome.value is None:
        raise PlanningFailed(
            PlannerError(
                error_type="validation_error",
                message="planner gave no valid plan: " + "; ".join(outcome.errors),
                retry_count=outcome.attempts - 1,
                backend=getattr(client, "backend", None),
            )
        )
    if filled:
        log.warning(
            "plan: the model's reply left out %s; taken from the input: %s",
            ", ".join(filled),
            {key: defaults[key.split(".")[0]] for key in filled},
        )
    return reconcile(outcome.value, query, reference_path is not None, tool_names)


def input_defaults(query: str, has_reference: bool, tool_names: list[str]) -> dict[str, Any]:
    """Return the plan fields the input decides, for a reply that leaves them out: the reference
    mode; the scope (the objects the query names, else "Global"); the source ("Explicit" when a
    word of the query reads as a distortion, so the model's distortions are kept); the four flags
    by the paper's rules.  :func:`reconcile` then corrects them as it does a model's."""
    words = distortion_words(query, tool_names).read
    objects = list(parse_query(query, tool_names).objects)
    tool = required_tool_in(query, tool_names, reference=has_reference) if tool_names else None
    return {
        "reference_mode": "Full-Reference" if has_reference else "No-Reference",
        "distortion_source": "Explicit" if words else "Inferred",
        "query_scope": objects or "Global",
        "plan": planned_subtasks(explicit=bool(words), region=bool(objects), tool=tool is not None),
    }


def reconcile(
    plan: PlannerOutput, query: str, has_reference: bool, tool_names: list[str]
) -> PlannerOutput:
    """Return ``plan`` with what the input proves taken from the input, the rest as the model wrote
    it; each change is logged.

    The input proves (the module's rule): the reference mode; the tools the query names
    unambiguously and the ones it rules out (a family name by its qualifier, else the model's
    member of it, else the one that fits the reference mode); the distortions the query names by
    unambiguous words, which are then looked at and not detected; that an "Other" question
    (taste, style) runs no executor subtask.  The distortions' object keys are put on the plan's
    scope, so the evidence is gathered for what is asked.
    """
    changes: dict[str, object] = {}
    mode = "Full-Reference" if has_reference else "No-Reference"
    if plan.reference_mode != mode:
        changes["reference_mode"] = mode
    required, excluded = plan.required_tool, plan.excluded_tools
    uncatalogued = plan.uncatalogued_tools
    if tool_names:
        required = required_tool_in(
            query, tool_names, reference=has_reference, chosen=plan.required_tool
        )
        excluded = excluded_tools_in(query, tool_names)
        uncatalogued = uncatalogued_tools_in(query, tool_names, also=plan.uncatalogued_tools)
    distortions, scope = _distortions(plan, query, tool_names)
    if distortions != plan.distortions:
        changes["distortions"] = distortions
    if scope != plan.query_scope:
        changes["query_scope"] = scope
    source = "Explicit" if distortions else "Inferred"
    if plan.distortion_source != source:
        changes["distortion_source"] = source
    if plan.required_tool != required:
        changes["required_tool"] = required
    if plan.excluded_tools != excluded:
        changes["excluded_tools"] = excluded
    if plan.uncatalogued_tools != uncatalogued:
        changes["uncatalogued_tools"] = uncatalogued
    flags = _flags(
        plan, explicit=bool(distortions), required=required, uncatalogued=bool(uncatalogued)
    )
    if flags != plan.plan:
        changes["plan"] = flags
    if changes:
        log.info(
            "plan adjusted to the input: %s",
            {
                key: value.model_dump() if hasattr(value, "model_dump") else value
                for key, value in changes.items()
            },
        )
        plan = plan.model_copy(update=changes)
    return plan


def _flags(
    plan: PlannerOutput, *, explicit: bool, required: str | None, uncatalogued: bool = False
) -> PlanControlFlags:
    """Return the subtasks the input decides.  "Other": none, unless the query names a tool, which
    is then run.  Else detection exactly when the query names no distortion (and something uses
    what is detected), and a named tool is run without selection; tools run without one named are
    selected, and so are they for a named tool the catalogue lacks (``uncatalogued``: the user
    wants a measurement).  The rest is the model's."""
    flags = plan.plan.model_dump()
    if plan.query_type == "Other":
        flags.update(
            distortion_detection=False,
            distortion_analysis=False,
            tool_selection=False,
            tool_execution=required is not None,
        )
        return PlanControlFlags(**flags)
    if required is not None:
        flags.update(tool_selection=False, tool_execution=True)
    elif uncatalogued or flags["tool_execution"]:
        flags["tool_execution"] = True
        flags["tool_selection"] = True
    # Detected distortions feed analysis and selection only: a plan with neither needs none.
    flags["distortion_detection"] = not explicit and (
        flags["distortion_analysis"] or flags["tool_selection"]
    )
    return PlanControlFlags(**flags)


def _distortions(
    plan: PlannerOutput, query: str, tool_names: list[str]
) -> tuple[dict[str, list[str]] | None, list[str] | Literal["Global"]]:
    """Return the plan's distortions and scope as the query proves them.

    Distortions the query names by unambiguous words are added where the model left them out; a
    model's distortions it marked "Inferred" (guesses, not named) are dropped when the query
    names none so; a model's "Explicit" ones stay (an ambiguous word it read as a distortion, or
    a word the query's word list lacks).  Keys are put on the scope: the whole image's
    ("Global") go to each scoped object, a key the scope lacks goes to the single object or,
    when the query names it, joins the scope (the spec's fallback: Global)."""
    # An "Other" question's words ("a calm colour palette") name a taste, not a distortion.
    named = distortion_words(query, tool_names).certain if plan.query_type == "IQA" else ()
    model = plan.distortions or {}
    if not named and plan.distortion_source != "Explicit":
        model = {}
    scope: list[str] = list(plan.query_scope) if isinstance(plan.query_scope, list) else []
    lowered = query.casefold()
    placed: dict[str, list[str]] = {}
    for key, values in model.items():
        by_fold = {fold_object_name(name): name for name in scope}
        if key == "Global":
            targets = scope or ["Global"]
        elif fold_object_name(key) in by_fold:
            targets = [by_fold[fold_object_name(key)]]
        elif re.search(rf"(?<!\w){re.escape(fold_object_name(key))}(?!\w)", lowered):
            scope.append(key)
            targets = [key]
        else:
            targets = scope[:1] if len(scope) == 1 else (scope or ["Global"])
        for target in targets:
            placed.setdefault(target, [])
            placed[target] += [value for value in values if value not in placed[target]]
    whole = placed.pop("Global", []) if scope else []
    for target in scope if whole else ():  # the whole image's, once the scope has objects
        placed.setdefault(target, [])
        placed[target] += [value for value in whole if value not in placed[target]]
    given = {value for values in placed.values() for value in values}
    missing = [category for category in named if category not in given]
    for target in (list(placed) or scope or ["Global"]) if missing else ():
        placed.setdefault(target, [])
        placed[target] += missing
    return (placed or None), (scope or "Global")


def no_plan(query: str, has_reference: bool) -> PlannerOutput:
    """Return the plan of a run where the VLM answers alone (``--mode vlm``): nothing asked of a
    planner, no executor subtask, so the summarizer sees the image and the question only. Taste
    questions stay "Other" so a rating request is still told from a question."""
    aesthetic = parse_query(query).aesthetic
    return PlannerOutput(
        query_type="Other" if aesthetic else "IQA",
        query_scope="Global",
        distortion_source="Inferred",
        distortions=None,
        reference_mode="Full-Reference" if has_reference else "No-Reference",
        required_tool=None,
        plan=PlanControlFlags(
            distortion_detection=False,
            distortion_analysis=False,
            tool_selection=False,
            tool_execution=False,
        ),
    )
