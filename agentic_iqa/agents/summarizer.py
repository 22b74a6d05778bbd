"""The Summarizer: an answer with reasoning (explanation mode) or a fused score (scoring mode).

Explanation mode asks the VLM for ``SummarizerOutput`` JSON.  Scoring mode asks the five-level
question (A Excellent .. E Bad), turns the answer letters' log-probabilities into p_c and fuses
them with the tool scores (:mod:`.fusion`).  Backends without log-probabilities provide a
substitute and say which in ``probability_source``; when even that is missing, the letter
answered gets probability 1 ("argmax").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..prompts import (
    QUALITY_LEVEL_NAMES,
    QUALITY_LEVEL_OPTIONS,
    QUALITY_LEVELS_SYSTEM,
    QUALITY_LEVELS_USER,
    SUMMARIZER_SYSTEM,
    SUMMARIZER_USER,
    render,
)
from ..query import options_in, parse_query
from ..state import ExecutorOutput, PlannerOutput, SummarizerOutput
from ..vlm.base import VLMClient, VLMRequest
from .fusion import fuse, probabilities_from_logprobs
from .jsonreply import ask_json


def scoring_mode(query: str, plan: PlannerOutput) -> bool:
    """A request to rate the image (no options to choose from) is answered with a score."""
    parsed = parse_query(query)
    return plan.query_type == "IQA" and parsed.wants_rating and not parsed.is_multiple_choice


def missing_evidence(plan: Mapping[str, Any], quality_scores: Mapping[str, Any] | None,
                     distortion_analysis: Mapping[str, Any] | None) -> str | None:
    """What the plan asked for but the evidence lacks (plain dicts, shared with the builtin)."""
    flags = plan.get("plan") or {}
    scope = plan.get("query_scope")
    keys = list(scope) if isinstance(scope, list) and scope else ["Global"]
    if flags.get("tool_execution"):
        scores = quality_scores or {}
        missing = [key for key in keys if not scores.get(key)]
        if missing:
            return f"Missing tool scores for {', '.join(missing)}"
    if flags.get("distortion_analysis") and not distortion_analysis:
        return "Missing distortion analysis"
    return None


def evidence_context(query: str, image_path: str, plan: PlannerOutput,
                     evidence: ExecutorOutput | None) -> dict[str, Any]:
    evidence = evidence or ExecutorOutput()
    dumped = evidence.model_dump(mode="json")
    return {
        "query": query,
        "image_path": image_path,
        "plan": plan.model_dump(mode="json"),
        "distortion_analysis": dumped.get("distortion_analysis"),
        "quality_scores": dumped.get("quality_scores"),
        "options": options_in(query),
    }


def summarize(client: VLMClient, query: str, image_path: str, reference_path: str | None,
              plan: PlannerOutput, evidence: ExecutorOutput | None) -> SummarizerOutput:
    context = evidence_context(query, image_path, plan, evidence)
    images = tuple(Path(p) for p in (image_path, reference_path) if p)
    if scoring_mode(query, plan):
        return _score(client, context, images)
    request = VLMRequest(
        task="answer", system=SUMMARIZER_SYSTEM,
        user=render(SUMMARIZER_USER, query=query, plan=context["plan"],
                    distortion_analysis=context["distortion_analysis"],
                    quality_scores=context["quality_scores"]),
        images=images, context=context,
    )
    outcome = ask_json(client, request, SummarizerOutput.model_validate)
    if outcome.value is None:
        return SummarizerOutput(
            final_answer="Unable to determine",
            quality_reasoning="The summarizer gave no valid answer: " + "; ".join(outcome.errors),
        )
    return outcome.value


def _score(client: VLMClient, context: dict[str, Any], images: tuple[Path, ...]
           ) -> SummarizerOutput:
    missing = missing_evidence(context["plan"], context["quality_scores"],
                               context["distortion_analysis"])
    if missing:
        return SummarizerOutput(final_answer="Unable to determine", need_replan=True,
                                replan_reason=missing,
                                quality_reasoning=f"{missing}; cannot score without it.")
    request = VLMRequest(
        task="quality_levels", system=QUALITY_LEVELS_SYSTEM,
        user=render(QUALITY_LEVELS_USER, query=context["query"],
                    distortion_analysis=context["distortion_analysis"],
                    quality_scores=context["quality_scores"]),
        images=images, context=context, json_output=False,
        answer_options=tuple(QUALITY_LEVEL_OPTIONS),
    )
    response = client.complete(request)
    if response.option_logprobs:
        by_level = {QUALITY_LEVEL_OPTIONS[letter]: value
                    for letter, value in response.option_logprobs.items()
                    if letter in QUALITY_LEVEL_OPTIONS}
        probabilities = probabilities_from_logprobs(by_level)
        source = response.probability_source or "logprobs"
    else:
        letter = _first_letter(response.text)
        probabilities = {c: 1.0 if c == QUALITY_LEVEL_OPTIONS[letter] else 0.0
                         for c in range(1, 6)}
        source = "argmax"
    tool_scores = [float(pair[1]) for per in (context["quality_scores"] or {}).values()
                   for pair in per.values()]
    quality = fuse(tool_scores, probabilities)
    level = QUALITY_LEVEL_NAMES[min(5, max(1, round(quality)))]
    distribution = {QUALITY_LEVEL_NAMES[c]: probabilities[c] for c in range(1, 6)}
    tools_text = (f"mean tool score {sum(tool_scores) / len(tool_scores):.2f} from "
                  f"{len(tool_scores)} tool result(s)" if tool_scores else "no tool scores")
    opinion = ", ".join(f"{QUALITY_LEVEL_NAMES[c]} {probabilities[c]:.2f}"
                        for c in range(5, 0, -1))
    return SummarizerOutput(
        final_answer=level,
        quality_score=quality,
        level_distribution=distribution,
        probability_source=source,
        quality_reasoning=(f"Fused quality {quality:.2f}/5 ({level}): {tools_text}; "
                           f"level probabilities ({source}): {opinion}."
                           + _analysis_text(context["distortion_analysis"])),
    )


def _first_letter(text: str) -> str:
    match = re.search(r"\b([A-E])\b", text.upper())
    if match:
        return match.group(1)
    for letter, level in QUALITY_LEVEL_OPTIONS.items():
        if QUALITY_LEVEL_NAMES[level].lower() in text.lower():
            return letter
    return "C"


def _analysis_text(analysis: Mapping[str, Any] | None) -> str:
    notes = [item["explanation"] for items in (analysis or {}).values() for item in items
             if item["severity"] != "none"]
    return (" " + " ".join(notes)) if notes else ""


__all__ = ["missing_evidence", "scoring_mode", "summarize"]
