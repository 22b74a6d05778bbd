"""Read what a run's evidence lacks, what a tool call scored, and which tools stood in.

A tool the query named that the catalogue lacks ("IL-NIQE") stands in for nothing: the answer
says it could not be used and which tools were chosen instead (:func:`uncatalogued_sentence`).

The summarizer asks whether the plan's evidence is complete and whether a new plan could
complete it; the summarizer, the builtin model and every output (the CLI's tables, a job's rows)
say alike which tool stood in for which and on what a score was measured.  Everything here
works on plain dicts (dumped state models, or a stored run's rows), so the builtin VLM, which
sits below the agents, shares it.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def missing_evidence(
    plan: Mapping[str, Any],
    quality_scores: Mapping[str, Any] | None,
    distortion_analysis: Mapping[str, Any] | None,
) -> str | None:
    """Return what the plan asked for but the evidence lacks (plain dicts, shared with the builtin).

    Tools cannot find an object, so for objects they score the whole image, filed under
    "Global": that answers every object's "tool scores missing" (the summarizer is told it is
    the whole image's, :func:`whole_image_objects`), as no plan could give more."""
    flags = plan.get("plan") or {}
    keys = _scope_keys(plan)
    if flags.get("tool_execution"):
        scores = quality_scores or {}
        missing = [key for key in keys if not scores.get(key) and not scores.get("Global")]
        if missing:
            return f"Missing tool scores for {', '.join(missing)}"
    if flags.get("distortion_analysis") and not distortion_analysis:
        return "Missing distortion analysis"
    return None


def replan_can_supply(
    plan: Mapping[str, Any],
    quality_scores: Mapping[str, Any] | None,
    tool_logs: Sequence[Mapping[str, Any]] | None,
) -> bool:
    """Tell whether a new plan could supply what :func:`missing_evidence` finds missing.

    Only tool scores for an object no tool was run for (the plan's objects missed the scope)
    can come from another plan.  Tools that ran and failed fail the same way under any plan
    (for objects they score the whole image, so a failure on "Global" counts for every object),
    and an analysis the model wrote nothing readable for is asked the same question again."""
    if not (plan.get("plan") or {}).get("tool_execution"):
        return False
    scores = quality_scores or {}
    if scores.get("Global"):
        return False
    tried = {
        name
        for entry in tool_logs or ()
        for name in (entry.get("object_name"), *(entry.get("requested_for") or ()))
    }
    if "Global" in tried:
        return False
    return any(key not in tried and not scores.get(key) for key in _scope_keys(plan))


#: The words every output uses for the whole image; the state and the database keep the paper's
#: key for it, "Global" (plans, ``tool_logs.object_name``), which no output shows.
WHOLE_IMAGE = "whole image"


def object_label(name: str) -> str:
    """Return what an object key is called in outputs: "whole image" for "Global", else itself."""
    return WHOLE_IMAGE if name == "Global" else name


def scored_on(region: str | None) -> str:
    """Return what a tool call scored, in words, for every output: a region's crop or the whole
    image (a call for objects, and every call logged before regions were cropped)."""
    return f"{region} (crop)" if region else WHOLE_IMAGE


#: What a tool log's ``error`` says after the tool's name when the tool is not installed here
#: (missing weight files, packages or models): the registry's wording, and the executor's for
#: a tool another stood in for.
CANNOT_RUN = " cannot run here: "


def stand_in_reason(requested: str, error: str | None) -> str:
    """Why ``requested`` did not run, from its log's ``error``, without "X cannot run here: "."""
    text = (error or "").strip()
    prefix = f"{requested}{CANNOT_RUN}"
    return text[len(prefix) :] if text.startswith(prefix) else text or "it did not run"


def stand_in_sentence(tool: str, requested: str, error: str | None) -> str:
    """Return "PIQE stood in for BRISQUE (its parameter file ... is not installed: ...).": what the
    answer says of a call whose tool another replaced, for every summarizer and output."""
    return f"{tool} stood in for {requested} ({stand_in_reason(requested, error)})."


def stand_in_label(requested: str, error: str | None) -> str:
    """Return a tools table's note for such a call: "in place of BRISQUE (not installed)"."""
    text = (error or "").strip()
    if text.startswith(f"{requested}{CANNOT_RUN}"):
        return f"in place of {requested} (not installed)"
    if text.startswith(f"{requested} is full-reference"):
        return f"in place of {requested} (no reference image)"
    return f"in place of {requested} (it failed)" if text else f"in place of {requested}"


def stand_ins(tool_logs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the tools that stood in for others and gave a score, once per (tool, tool wanted,
    reason), in log order: ``{"tool", "in_place_of", "reason", "distortions", "sentence"}``. Logs
    are plain dicts (a dumped :class:`ToolExecutionLog`, or a stored run's, whose tool is under
    "tool")."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in tool_logs:
        tool = entry.get("tool_name") or entry.get("tool")
        requested = entry.get("requested_tool")
        score = entry.get("normalized_score")
        if not (entry.get("fallback") and requested and tool and requested != tool):
            continue
        if score is None or not math.isfinite(float(score)):
            continue
        error = entry.get("error")
        key = (str(tool), str(requested), stand_in_reason(str(requested), error))
        if key not in found:
            found[key] = {
                "tool": key[0],
                "in_place_of": key[1],
                "reason": key[2],
                "distortions": [],
                "sentence": stand_in_sentence(key[0], key[1], error),
            }
        distortion = entry.get("distortion")
        if distortion and distortion not in found[key]["distortions"]:
            found[key]["distortions"].append(distortion)
    return list(found.values())


def uncatalogued_sentence(
    names: Sequence[str], tool_logs: Iterable[Mapping[str, Any]] = ()
) -> str | None:
    """Return what the answer says of tools the query named that the catalogue lacks: "IL-NIQE is
    not in the tool catalogue, so it could not be used; the tools were chosen instead (BRISQUE,
    MUSIQ)." (or "... no tool was run in its place." when none gave a score); None for none.
    No catalogue tool is ever run as one of them ("IL-NIQE" is not NIQE)."""
    if not names:
        return None
    said = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    one = len(names) == 1
    scored = list(
        dict.fromkeys(
            str(entry.get("tool_name") or entry.get("tool"))
            for entry in tool_logs
            if (entry.get("tool_name") or entry.get("tool"))
            and entry.get("normalized_score") is not None
            and math.isfinite(float(entry["normalized_score"]))
        )
    )
    instead = (
        f"the tools were chosen instead ({', '.join(scored)})"
        if scored
        else f"no tool was run in {'its' if one else 'their'} place"
    )
    return (
        f"{said} {'is' if one else 'are'} not in the tool catalogue, so "
        f"{'it' if one else 'they'} could not be used; {instead}."
    )


def whole_image_objects(
    plan: Mapping[str, Any], quality_scores: Mapping[str, Any] | None
) -> list[str]:
    """Return the objects in scope that only a whole-image score speaks for: no score of their own
    (no tool can find "the car"; a region is scored on its crop), and one under "Global". What
    the summarizer is told to judge from the image itself (plain dicts, as above)."""
    scores = quality_scores or {}
    if not scores.get("Global"):
        return []
    return [key for key in _scope_keys(plan) if key != "Global" and not scores.get(key)]


def _scope_keys(plan: Mapping[str, Any]) -> list[str]:
    scope = plan.get("query_scope")
    return list(scope) if isinstance(scope, list) and scope else ["Global"]
