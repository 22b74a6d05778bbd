"""The Summarizer: an answer with reasoning (explanation mode) or a fused score (scoring mode).

When the evidence the plan asked for is missing the VLM is not asked at all: the result asks
for a replan with the reason, or, once the replans are used up, says the evidence is missing.

Explanation mode asks the VLM for ``SummarizerOutput`` JSON; for a multiple-choice query the
``final_answer`` must name an option (:func:`.answers.parse_option`), else the question is asked
again with a stricter prompt, three attempts in all, then the result is marked
``answer_unparseable`` with the reason.  No letter is ever guessed.

Scoring mode asks the five-level question (A Excellent .. E Bad) and turns p_c into a fused score
with the tool scores (:mod:`.fusion`).  p_c comes, in order of preference, from the answer
letters' token log-probabilities ("logprobs", or a backend's own substitute such as the Anthropic
backend's self-reported probabilities); for a server that returns none, from a second request in
which the model states a probability per level ("stated"); and only when that fails from the
answered letter alone ("argmax").  With argmax the fused score is exactly the answered level and
the tool scores do not count, so ``probability_source`` always says which was used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..options import parse_option
from ..prompts import (
    QUALITY_LEVEL_CHOICES,
    QUALITY_LEVEL_NAMES,
    QUALITY_LEVEL_OPTIONS,
    QUALITY_LEVELS_SYSTEM,
    QUALITY_LEVELS_USER,
    QUALITY_PROBABILITIES_SYSTEM,
    STRICT_JSON_SUFFIX,
    STRICT_MCQ_SUFFIX,
    STRICT_OPTION_SUFFIX,
    SUMMARIZER_SYSTEM,
    SUMMARIZER_USER,
    render,
)
from ..query import options_in, parse_query
from ..state import ExecutorOutput, PlannerOutput, SummarizerOutput, missing_evidence
from ..vlm.base import VLMClient, VLMRequest, VLMResponse
from ..vocabulary import level_name
from .fusion import fuse, probabilities_from_logprobs, probabilities_from_statement
from .jsonreply import MAX_ATTEMPTS, ask_json, looks_like_refusal, reply_problem

log = logging.getLogger(__name__)

#: What ``final_answer`` says when no answer could be given; never an option letter.
UNABLE = "Unable to determine"
#: Attempts at an answer naming an option, the retries with a stricter prompt (the executor's
#: policy for invalid JSON).
ANSWER_ATTEMPTS = MAX_ATTEMPTS


def scoring_mode(query: str, plan: PlannerOutput) -> bool:
    """A request to rate the image (no options to choose from) is answered with a score.

    The planner decides (``answer_mode``), in whatever language the query is; a plan without
    the field (an older stored run, a model that left it out) falls back on the query's
    wording.  A query with options is always answered with one of them.
    """
    parsed = parse_query(query)
    if parsed.is_multiple_choice or plan.query_type != "IQA":
        return False
    if plan.answer_mode is not None:
        return plan.answer_mode == "scoring"
    return parsed.wants_rating


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
              plan: PlannerOutput, evidence: ExecutorOutput | None, *,
              can_replan: bool = True) -> SummarizerOutput:
    """The answer to ``query`` from the evidence; ``can_replan`` is False once replans are used
    up, so missing evidence then ends the run with an answer saying so."""
    context = evidence_context(query, image_path, plan, evidence)
    missing = missing_evidence(context["plan"], context["quality_scores"],
                               context["distortion_analysis"])
    if missing:
        return evidence_missing(missing, can_replan)
    images = tuple(Path(p) for p in (image_path, reference_path) if p)
    if scoring_mode(query, plan):
        return _score(client, context, images)
    return _explain(client, context, images)


def evidence_missing(missing: str, can_replan: bool) -> SummarizerOutput:
    """The result when the plan's evidence is missing, without asking the VLM (it would answer
    without the evidence): a replan request with the reason; at the bound the same, which ends
    the run, with reasoning that says the evidence is missing and no replan is left."""
    reasoning = (f"{missing}; cannot answer without it." if can_replan else
                 f"Evidence missing: {missing}. The replanning rounds are used up, so no answer "
                 "is given without the evidence the plan asked for.")
    return SummarizerOutput(final_answer=UNABLE, need_replan=True, replan_reason=missing,
                            quality_reasoning=reasoning)


def _explain(client: VLMClient, context: dict[str, Any], images: tuple[Path, ...]
             ) -> SummarizerOutput:
    options: dict[str, str] = context["options"]
    multiple_choice = len(options) >= 2
    request = VLMRequest(
        task="answer", system=SUMMARIZER_SYSTEM,
        user=render(SUMMARIZER_USER, query=context["query"], plan=context["plan"],
                    distortion_analysis=context["distortion_analysis"],
                    quality_scores=context["quality_scores"]),
        images=images, context=context,
    )

    def parse(reply: dict[str, Any]) -> SummarizerOutput:
        answer = SummarizerOutput.model_validate(reply)
        if not multiple_choice or answer.need_replan:
            return answer
        if answer.final_answer.casefold().startswith(UNABLE.casefold()):
            # The model says it cannot choose: recorded as such, not asked until it guesses.
            return answer.model_copy(update={
                "final_answer": UNABLE, "answer_unparseable": True,
                "unparseable_reason": f"the model chose none of the options: "
                                      f"{answer.quality_reasoning}"})
        letter = parse_option(answer.final_answer, options)
        if letter is None:
            raise ValueError(f"final_answer {answer.final_answer!r} names none of the options "
                             f"{', '.join(options)}")
        return answer.model_copy(update={"final_answer": letter})

    stricter = (render(STRICT_MCQ_SUFFIX, letters=_listed(options)) if multiple_choice
                else STRICT_JSON_SUFFIX)
    outcome = ask_json(client, request, parse, ANSWER_ATTEMPTS, stricter)
    if outcome.value is None:
        reason = "; ".join(outcome.errors)
        return SummarizerOutput(
            final_answer=UNABLE, answer_unparseable=True, unparseable_reason=reason,
            quality_reasoning=f"No usable answer after {outcome.attempts} attempts: {reason}",
        )
    return outcome.value


def _listed(options: Mapping[str, str]) -> str:
    return ", ".join(options)


def _score(client: VLMClient, context: dict[str, Any], images: tuple[Path, ...]
           ) -> SummarizerOutput:
    request = VLMRequest(
        task="quality_levels", system=QUALITY_LEVELS_SYSTEM,
        user=render(QUALITY_LEVELS_USER, query=context["query"],
                    distortion_analysis=context["distortion_analysis"],
                    quality_scores=context["quality_scores"]),
        images=images, context=context, json_output=False,
        answer_options=tuple(QUALITY_LEVEL_OPTIONS),
    )
    measured, letter, errors = _level_answer(client, request)
    if measured is not None:
        probabilities, source = measured
    elif letter is None:
        reason = "; ".join(errors)
        return SummarizerOutput(
            final_answer=UNABLE, answer_unparseable=True, unparseable_reason=reason,
            quality_reasoning=f"No quality level could be read after {ANSWER_ATTEMPTS} "
                              f"attempts: {reason}",
        )
    else:
        stated = _stated_probabilities(client, request)
        if stated is not None:
            probabilities, source = stated, "stated"
        else:
            probabilities = {c: 1.0 if c == QUALITY_LEVEL_OPTIONS[letter] else 0.0
                             for c in range(1, 6)}
            source = "argmax"
    tool_scores = [float(pair[1]) for per in (context["quality_scores"] or {}).values()
                   for pair in per.values()]
    quality = fuse(tool_scores, probabilities)
    level = level_name(quality)
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


def _level_answer(client: VLMClient, request: VLMRequest
                  ) -> tuple[tuple[dict[int, float], str] | None, str | None, list[str]]:
    """Ask the five-level question: ``(p_c and its source, or None; the letter answered, or
    None; why replies were rejected)``.

    A reply with log-probabilities (or a backend's substitute for them) settles it.  Otherwise
    the answered letter is read strictly; a reply naming no level is asked again with a
    stricter prompt, :data:`ANSWER_ATTEMPTS` times in all.  A backend's own "argmax" is only a
    letter, so the caller still asks for stated probabilities.
    """
    errors: list[str] = []
    current = request
    stricter = render(STRICT_OPTION_SUFFIX, letters=_listed(QUALITY_LEVEL_CHOICES))
    for attempt in range(1, ANSWER_ATTEMPTS + 1):
        response = client.complete(current)
        problem = reply_problem(response)
        if problem is None:
            measured = _measured(response)
            if measured is not None:
                return measured, None, errors
            letter = (parse_option(response.text, QUALITY_LEVEL_CHOICES)
                      or _argmax_letter(response))
            if letter is not None:
                return None, letter, errors
            problem = (f"the model declined: {response.text[:200]!r}"
                       if looks_like_refusal(response.text) else
                       f"no quality level in {response.text[:200]!r}")
        errors.append(f"attempt {attempt}: {problem}")
        log.warning("quality_levels reply names no level (%s)", errors[-1])
        current = replace(request, system=request.system + stricter)
    log.error("quality_levels: no readable level after %d attempts", ANSWER_ATTEMPTS)
    return None, None, errors


def _measured(response: VLMResponse) -> tuple[dict[int, float], str] | None:
    if not response.option_logprobs or response.probability_source == "argmax":
        return None
    by_level = {QUALITY_LEVEL_OPTIONS[letter]: value
                for letter, value in response.option_logprobs.items()
                if letter in QUALITY_LEVEL_OPTIONS}
    try:
        probabilities = probabilities_from_logprobs(by_level)
    except ValueError:
        return None
    return probabilities, response.probability_source or "logprobs"


def _argmax_letter(response: VLMResponse) -> str | None:
    """The letter a backend put all its probability on ("argmax"), if it did."""
    if response.probability_source != "argmax" or not response.option_logprobs:
        return None
    letter = max(response.option_logprobs, key=response.option_logprobs.__getitem__)
    return letter if letter in QUALITY_LEVEL_OPTIONS else None


def _stated_probabilities(client: VLMClient, question: VLMRequest) -> dict[int, float] | None:
    """p_c stated by the model in a second request (no log-probabilities asked for), or None
    when no readable statement came back."""
    request = replace(question, system=QUALITY_PROBABILITIES_SYSTEM, json_output=True,
                      answer_options=None)

    def parse(reply: dict[str, Any]) -> dict[int, float]:
        stated = reply["option_probabilities"]
        if not isinstance(stated, Mapping):
            raise TypeError("option_probabilities must be an object")
        return probabilities_from_statement(stated, QUALITY_LEVEL_OPTIONS)

    return ask_json(client, request, parse).value


def _analysis_text(analysis: Mapping[str, Any] | None) -> str:
    notes = [item["explanation"] for items in (analysis or {}).values() for item in items
             if item["severity"] != "none"]
    return (" " + " ".join(notes)) if notes else ""


__all__ = ["UNABLE", "evidence_missing", "missing_evidence", "scoring_mode", "summarize"]
