"""The Summarizer: an answer with reasoning (explanation mode) or a fused score (scoring mode).

When evidence the plan asked for is missing and a new plan can supply it, the VLM is not asked:
the result asks for a replan with the reason.  Otherwise (tools that failed, an analysis the
model could not write, no replan left) the VLM is asked all the same, told what is missing, and
its answer stands: "Unable to determine" is what the model says, or what is left when none of
its replies could be read.

Explanation mode asks the VLM for JSON, read as a :class:`~agentic_iqa.state.SummarizerReply`:
only ``final_answer`` decides whether a reply is usable (the side fields are read leniently,
with a note of what was ignored or coerced).  For a multiple-choice query the ``final_answer``
must name an option (:func:`agentic_iqa.options.read_option`).  A valid reply that commits to
none readably is, where the role asks follow-ups (hosted models, by default), asked about once:
the model is shown its reply and names one letter or NONE (:mod:`.followup`), and that settles
it (``answered_in_follow_up`` says so).  Otherwise the question is asked again with a stricter
prompt, three attempts in all, then the result is marked ``answer_unparseable`` with the
reason.  No letter is ever guessed.  The :class:`~agentic_iqa.state.SummarizerOutput` is
built here and nowhere else: a score, probabilities or an "unparseable" a model writes into its
reply are ignored, so explanation mode has no score and scoring mode's score is the fusion.

Scoring mode asks the five-level question (A Excellent .. E Bad) and turns p_c into a fused score
with the tool scores (:mod:`.fusion`).  p_c comes, in order of preference, from the answer
letters' token log-probabilities ("logprobs", or a backend's own substitute such as the Anthropic
backend's self-reported probabilities); for a server that returns none, from a second request in
which the model states a probability per level ("stated"); and only when that fails from the
answered letter alone ("argmax").  With argmax the fused score is exactly the answered level and
the tool scores do not count, so ``probability_source`` always says which was used.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..evidence import missing_evidence, replan_can_supply, stand_ins, uncatalogued_sentence
from ..options import UNREAD_REASONS, parse_option, read_option, says_it_cannot_see
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
    SUMMARIZER_EVIDENCE_NOTES,
    SUMMARIZER_MISSING_EVIDENCE,
    SUMMARIZER_REPLAN_FAILED,
    SUMMARIZER_STAND_INS,
    SUMMARIZER_SYSTEM,
    SUMMARIZER_USER,
    render,
)
from ..query import options_in, parse_query
from ..state import (
    ExecutorOutput,
    PlannerOutput,
    ReplanEntry,
    SummarizerOutput,
    SummarizerReply,
)
from ..vlm.base import VLMClient, VLMRequest, VLMResponse, was_cut_off
from ..vocabulary import level_name
from .followup import FollowUp, ask_follow_up, asks_follow_up
from .fusion import fuse, probabilities_from_logprobs, probabilities_from_statement
from .jsonreply import MAX_ATTEMPTS, ask_json, looks_like_refusal, reply_problem

log = logging.getLogger(__name__)

#: What ``final_answer`` says when no answer could be given; never an option letter.
UNABLE = "Unable to determine"
#: Attempts at an answer naming an option, the retries with a stricter prompt (the executor's
#: policy for invalid JSON).
ANSWER_ATTEMPTS = MAX_ATTEMPTS


def scoring_mode(query: str, plan: PlannerOutput) -> bool:
    """Tell whether to answer with a score: a request to rate the image, no options.

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


def evidence_context(
    query: str,
    image_path: str,
    plan: PlannerOutput,
    evidence: ExecutorOutput | None,
    failed_replan: ReplanEntry | None = None,
) -> dict[str, Any]:
    """Return what the summarizer is told: the query, the plan, the evidence and what it lacks."""
    evidence = evidence or ExecutorOutput()
    dumped = evidence.model_dump(mode="json")
    planned = plan.model_dump(mode="json")
    return {
        "query": query,
        "image_path": image_path,
        "plan": planned,
        "distortion_analysis": dumped.get("distortion_analysis"),
        "quality_scores": dumped.get("quality_scores"),
        "options": options_in(query),
        # What the plan asked for and the evidence lacks, what the executor noted, and whether
        # a replan may still supply it (False: the model answers from what there is).
        "missing_evidence": missing_evidence(
            planned, dumped.get("quality_scores"), dumped.get("distortion_analysis")
        ),
        "evidence_notes": list(evidence.notes),
        # Tools that stood in for the ones the agent would have used (not installed here, an
        # FR tool without a reference, a failure): the scores are theirs.
        # And the tools the query named that the catalogue lacks ("IL-NIQE"): what the agent
        # chose instead.
        "stand_ins": [
            *(entry["sentence"] for entry in stand_ins(dumped.get("tool_logs") or ())),
            *filter(
                None,
                [uncatalogued_sentence(plan.uncatalogued_tools, dumped.get("tool_logs") or ())],
            ),
        ],
        "replan_allowed": True,
        # A replan whose plan could not be made: the evidence is the previous plan's.
        "failed_replan": (
            {"reason": failed_replan.reason, "failure": failed_replan.failure}
            if failed_replan is not None
            else None
        ),
    }


def summarize(
    client: VLMClient,
    query: str,
    image_path: str,
    reference_path: str | None,
    plan: PlannerOutput,
    evidence: ExecutorOutput | None,
    *,
    can_replan: bool = True,
    failed_replan: ReplanEntry | None = None,
) -> SummarizerOutput:
    """Return the answer to ``query`` from the evidence; ``can_replan`` is False once replans are
    used up, and so is it after ``failed_replan`` (a replan whose plan could not be made:
    ``plan`` and ``evidence`` are the previous round's, and the model is told so).

    Evidence the plan asked for that a new plan can supply (tool scores for an object no tool
    was run for) is asked for with a replan, without asking the model, while replans are left.
    Otherwise the model always gets its turn: it is told what is missing, answers from the
    image and the evidence there is, and its answer stands (a replan it asks for then is not
    made: nothing new would come of it)."""
    context = evidence_context(query, image_path, plan, evidence, failed_replan)
    can_replan = can_replan and failed_replan is None
    missing = context["missing_evidence"]
    dumped = (evidence or ExecutorOutput()).model_dump(mode="json")
    if (
        missing
        and can_replan
        and replan_can_supply(context["plan"], context["quality_scores"], dumped["tool_logs"])
    ):
        return evidence_missing(missing)
    if missing:
        log.warning(
            "summarizer: %s, and no new plan can supply it: the model answers from "
            "the evidence there is",
            missing,
        )
    context["replan_allowed"] = can_replan and not missing
    images = tuple(str(p) for p in (image_path, reference_path) if p)
    result = (
        _score(client, context, images)
        if scoring_mode(query, plan)
        else _explain(client, context, images)
    )
    if failed_replan is not None:
        note = (
            f"replan {failed_replan.iteration} ({failed_replan.reason}) failed: "
            f"{failed_replan.failure}; answered with the previous plan's evidence"
        )
        result = result.model_copy(update={"notes": [*result.notes, note]})
    return with_stand_ins(result, context["stand_ins"])


def with_stand_ins(result: SummarizerOutput, sentences: list[str]) -> SummarizerOutput:
    """Return ``result`` whose reasoning ends by saying which tool stood in for which, and why
    ("PIQE stood in for BRISQUE (its parameter file ... is not installed: ...)."): what measured
    the image is part of every answer, whatever the model wrote (a sentence it already wrote word
    for word is not repeated)."""
    reasoning = result.quality_reasoning.rstrip()
    added = [sentence for sentence in sentences if sentence not in reasoning]
    if not added or result.need_replan:
        return result
    return result.model_copy(
        update={"quality_reasoning": " ".join(part for part in (reasoning, *added) if part)}
    )


def evidence_missing(missing: str) -> SummarizerOutput:
    """Return the replan request for evidence the plan asked for and a new plan can supply, without
    asking the VLM (it would answer without the evidence)."""
    return SummarizerOutput(
        final_answer=UNABLE,
        need_replan=True,
        replan_reason=missing,
        quality_reasoning=f"{missing}; a new plan is asked for it.",
    )


def _told(context: Mapping[str, Any]) -> str:
    """Return what the summarizer's prompt adds about the evidence: a replan that could not add to
    it, what is missing, the executor's notes (a type not analysed, a tool replaced) and the
    tools that stood in for others."""
    text = ""
    if context.get("failed_replan"):
        text += render(SUMMARIZER_REPLAN_FAILED, **context["failed_replan"])
    if context.get("missing_evidence"):
        text += render(SUMMARIZER_MISSING_EVIDENCE, missing=context["missing_evidence"])
    if context.get("evidence_notes"):
        text += render(SUMMARIZER_EVIDENCE_NOTES, notes="; ".join(context["evidence_notes"]))
    if context.get("stand_ins"):
        text += render(SUMMARIZER_STAND_INS, stand_ins=" ".join(context["stand_ins"]))
    return text


def _explain(
    client: VLMClient, context: dict[str, Any], images: tuple[str, ...]
) -> SummarizerOutput:
    options: dict[str, str] = context["options"]
    multiple_choice = len(options) >= 2
    request = VLMRequest(
        task="answer",
        system=SUMMARIZER_SYSTEM,
        user=render(
            SUMMARIZER_USER,
            query=context["query"],
            plan=context["plan"],
            distortion_analysis=context["distortion_analysis"],
            quality_scores=context["quality_scores"],
        )
        + _told(context),
        images=images,
        context=context,
    )

    replan_allowed = context.get("replan_allowed", True)

    def parse(written: dict[str, Any]) -> SummarizerOutput:
        reply = SummarizerReply.model_validate(written)
        if reply.need_replan and not replan_allowed:
            # No replan can follow: the request is read as the answer it comes with.
            reply = reply.model_copy(update={"need_replan": False})
        answer = _answer(reply)
        if not multiple_choice or answer.need_replan:
            return answer
        if says_it_cannot_see(answer.final_answer) or says_it_cannot_see(answer.quality_reasoning):
            # No answer, whatever letter it names; asked again, it could only guess.
            return answer.model_copy(
                update={
                    "final_answer": UNABLE,
                    "answer_unparseable": True,
                    "unparseable_reason": f"{UNREAD_REASONS['cannot see']}: "
                    f"{answer.final_answer!r} ({answer.quality_reasoning})",
                }
            )
        if answer.final_answer.casefold().startswith(UNABLE.casefold()):
            # The model says it cannot choose: recorded as such, not asked until it guesses.
            return answer.model_copy(
                update={
                    "final_answer": UNABLE,
                    "answer_unparseable": True,
                    "unparseable_reason": f"the model chose none of the options: "
                    f"{answer.quality_reasoning}",
                }
            )
        reading = read_option(answer.final_answer, options)
        if reading.letter is None:
            raise NoOptionRead(
                f"final_answer {answer.final_answer!r} names none of the options "
                f"{', '.join(options)} (one, neither negated nor hedged): {reading.reason}",
                answer,
            )
        return answer.model_copy(update={"final_answer": reading.letter})

    follow_up = multiple_choice and asks_follow_up(client)

    def rejected(response: VLMResponse, exc: Exception) -> SummarizerOutput | None:
        """Ask once which option a reply that names none readably chose (:mod:`.followup`)."""
        nonlocal follow_up
        if not follow_up or not isinstance(exc, NoOptionRead):
            return None
        follow_up = False
        asked = ask_follow_up(client, context["query"], options, response.text)
        return followed_up(exc.answer, asked)

    def salvage(text: str) -> SummarizerOutput | None:
        """Read the answer a reply cut at the token cap had finished writing."""
        fields = _written_fields(text, partial="quality_reasoning")
        if not isinstance(fields.get("final_answer"), str):
            return None
        reasoning = str(fields.get("quality_reasoning") or "")
        fields["quality_reasoning"] = f"{reasoning} (cut off at the token limit)".lstrip()
        return parse(fields)

    stricter = (
        render(STRICT_MCQ_SUFFIX, letters=_listed(options))
        if multiple_choice
        else STRICT_JSON_SUFFIX
    )
    outcome = ask_json(
        client,
        request,
        parse,
        ANSWER_ATTEMPTS,
        stricter,
        salvage=salvage if multiple_choice else None,
        rejected=rejected,
    )
    if outcome.value is None:
        reason = "; ".join(outcome.errors)
        return SummarizerOutput(
            final_answer=UNABLE,
            answer_unparseable=True,
            unparseable_reason=reason,
            quality_reasoning=f"No usable answer after {outcome.attempts} attempts: {reason}",
        )
    return outcome.value


class NoOptionRead(ValueError):
    """A valid reply whose ``final_answer`` commits to no option readably (kept, with it)."""

    def __init__(self, message: str, answer: SummarizerOutput) -> None:
        super().__init__(message)
        self.answer = answer


def followed_up(answer: SummarizerOutput, asked: FollowUp) -> SummarizerOutput:
    """Return ``answer`` settled by its follow-up: the option it named, recorded as coming from
    the follow-up, or no answer with both replies' reasons (never a guessed letter)."""
    first = f"the reply named no option readably ({answer.final_answer!r})"
    if asked.letter is not None:
        note = f"{first}; asked once more which option it chose, it answered {asked.reply[:80]!r}"
        return answer.model_copy(
            update={
                "final_answer": asked.letter,
                "answered_in_follow_up": True,
                "notes": [*answer.notes, note],
            }
        )
    reason = (
        f"{asked.reason}: asked once more which option it chose, it answered "
        f"{asked.reply[:200]!r}; {first}"
        if asked.reason == UNREAD_REASONS["cannot see"]  # counted as a blind reply
        else f"{first}; {asked.reason}: {asked.reply[:200]!r}"
    )
    return answer.model_copy(
        update={"final_answer": UNABLE, "answer_unparseable": True, "unparseable_reason": reason}
    )


def _answer(reply: SummarizerReply) -> SummarizerOutput:
    """Return the pipeline's answer from the fields the model was asked for, and only those; what
    reading them ignored or coerced is logged and kept with the answer."""
    for note in reply.notes:
        log.warning("summarizer reply: %s", note)
    return SummarizerOutput(
        final_answer=reply.final_answer,
        quality_reasoning=reply.quality_reasoning,
        need_replan=reply.need_replan,
        replan_reason=reply.replan_reason,
        used_evidence=reply.used_evidence,
        notes=list(reply.notes),
    )


def _listed(options: Mapping[str, str]) -> str:
    return ", ".join(options)


_WRITTEN = re.compile(r'"(\w+)"\s*:\s*("(?:[^"\\]|\\.)*"|true|false|null|-?\d+(?:\.\d+)?)')
_UNFINISHED = re.compile(r'"(\w+)"\s*:\s*"((?:[^"\\]|\\.)*)\\?$')


def _written_fields(text: str, partial: str) -> dict[str, Any]:
    """Return the fields a JSON reply cut at the token limit had finished writing, and the text so
    far of ``partial`` if the cut fell in it: ``{"final_answer": "B", "quality_reasoning": "The
    edges ar``.  Any other unfinished field is left out ("B" may have gone on "B or C")."""
    fields: dict[str, Any] = {}
    for match in _WRITTEN.finditer(text):
        fields.setdefault(match.group(1), json.loads(match.group(2)))
    unfinished = _UNFINISHED.search(text)
    if unfinished is not None and unfinished.group(1) == partial and partial not in fields:
        try:
            fields[partial] = json.loads(f'"{unfinished.group(2)}"') + "..."
        except ValueError:  # cut inside an escape ("\\u00")
            fields[partial] = unfinished.group(2) + "..."
    return fields


def _score(client: VLMClient, context: dict[str, Any], images: tuple[str, ...]) -> SummarizerOutput:
    request = VLMRequest(
        task="quality_levels",
        system=QUALITY_LEVELS_SYSTEM,
        user=render(
            QUALITY_LEVELS_USER,
            query=context["query"],
            distortion_analysis=context["distortion_analysis"],
            quality_scores=context["quality_scores"],
        )
        + _told(context),
        images=images,
        context=context,
        json_output=False,
        answer_options=tuple(QUALITY_LEVEL_OPTIONS),
    )
    measured, letter, errors, followed = _level_answer(client, request, context["query"])
    if measured is not None:
        probabilities, source = measured
    elif letter is None:
        reason = "; ".join(errors)
        return SummarizerOutput(
            final_answer=UNABLE,
            answer_unparseable=True,
            unparseable_reason=reason,
            quality_reasoning=f"No quality level could be read after {len(errors)} "
            f"attempts: {reason}",
        )
    else:
        stated = _stated_probabilities(client, request)
        if stated is not None:
            probabilities, source = stated, "stated"
        else:
            probabilities = {
                c: 1.0 if c == QUALITY_LEVEL_OPTIONS[letter] else 0.0 for c in range(1, 6)
            }
            source = "argmax"
    tool_scores = [
        float(pair[1])
        for per in (context["quality_scores"] or {}).values()
        for pair in per.values()
    ]
    quality = fuse(tool_scores, probabilities)
    level = level_name(quality)
    distribution = {QUALITY_LEVEL_NAMES[c]: probabilities[c] for c in range(1, 6)}
    tools_text = (
        f"mean tool score {sum(tool_scores) / len(tool_scores):.2f} from "
        f"{len(tool_scores)} tool result(s)"
        if tool_scores
        else "no tool scores"
    )
    opinion = ", ".join(f"{QUALITY_LEVEL_NAMES[c]} {probabilities[c]:.2f}" for c in range(5, 0, -1))
    return SummarizerOutput(
        final_answer=level,
        quality_score=quality,
        level_distribution=distribution,
        probability_source=source,
        answered_in_follow_up=followed is not None,
        notes=[] if followed is None else [followed],
        quality_reasoning=(
            f"Fused quality {quality:.2f}/5 ({level}): {tools_text}; "
            f"level probabilities ({source}): {opinion}."
            + _analysis_text(context["distortion_analysis"])
            + (
                f" {context['missing_evidence']}: answered from the image and "
                "the evidence there is."
                if context.get("missing_evidence")
                else ""
            )
        ),
    )


def _level_answer(
    client: VLMClient, request: VLMRequest, query: str
) -> tuple[tuple[dict[int, float], str] | None, str | None, list[str], str | None]:
    """Ask the five-level question: ``(p_c and its source, or None; the letter answered, or
    None; why replies were rejected; a note when the letter came from the follow-up)``.

    A reply with log-probabilities (or a backend's substitute for them) settles it.  Otherwise
    the answered letter is read strictly; a reply naming no level is asked again with a
    stricter prompt, :data:`ANSWER_ATTEMPTS` times in all, except one that says it cannot see
    the image (asked again, it could only guess).  A reply cut at the token cap
    counts when its committed letter was already written ("C\\n\\nReasoning: ..."): the cap
    is set for a letter, and only the reasoning after it was lost.  A backend's own "argmax"
    is only a letter, so the caller still asks for stated probabilities.  A reply naming no
    level readably is asked about once (:mod:`.followup`) where the role asks follow-ups; its
    answer settles the question, a level or none.
    """
    errors: list[str] = []
    current = request
    follow_up = asks_follow_up(client)
    stricter = render(STRICT_OPTION_SUFFIX, letters=_listed(QUALITY_LEVEL_CHOICES))
    for attempt in range(1, ANSWER_ATTEMPTS + 1):
        response = client.complete(current)
        problem = reply_problem(response)
        cut = problem is not None and was_cut_off(response)
        if cut and parse_option(response.text, QUALITY_LEVEL_CHOICES, cut_off=True):
            problem = None  # its letter was written before the cap: only reasoning was lost
        if problem is None:
            measured = _measured(response)
            if measured is not None:
                return measured, None, errors, None
            reading = read_option(response.text, QUALITY_LEVEL_CHOICES, cut_off=cut)
            if reading.unread == "cannot see":
                errors.append(f"attempt {attempt}: {reading.reason}: {response.text[:200]!r}")
                log.warning("quality_levels: %s", errors[-1])
                return None, None, errors, None  # asked again, it could only guess
            letter = reading.letter or _argmax_letter(response)
            if letter is not None:
                return None, letter, errors, None
            if follow_up:
                asked = ask_follow_up(client, query, QUALITY_LEVEL_CHOICES, response.text)
                first = f"the reply named no level readably ({response.text[:80]!r})"
                if asked.letter is not None:
                    note = (
                        f"{first}; asked once more which level it chose, it answered {asked.letter}"
                    )
                    return None, asked.letter, errors, note
                errors.append(f"attempt {attempt}: {first}; {asked.reason}: {asked.reply[:200]!r}")
                log.warning("quality_levels: %s", errors[-1])
                return None, None, errors, None
            problem = (
                f"the model declined: {response.text[:200]!r}"
                if looks_like_refusal(response.text)
                else f"no quality level in {response.text[:200]!r}"
            )
        errors.append(f"attempt {attempt}: {problem}")
        log.warning("quality_levels reply names no level (%s)", errors[-1])
        current = replace(request, system=request.system + stricter)
    log.error("quality_levels: no readable level after %d attempts", ANSWER_ATTEMPTS)
    return None, None, errors, None


def _measured(response: VLMResponse) -> tuple[dict[int, float], str] | None:
    if not response.option_logprobs or response.probability_source == "argmax":
        return None
    by_level = {
        QUALITY_LEVEL_OPTIONS[letter]: value
        for letter, value in response.option_logprobs.items()
        if letter in QUALITY_LEVEL_OPTIONS
    }
    try:
        probabilities = probabilities_from_logprobs(by_level)
    except ValueError:
        return None
    return probabilities, response.probability_source or "logprobs"


def _argmax_letter(response: VLMResponse) -> str | None:
    """Return the letter a backend put all its probability on ("argmax"), if it did."""
    if response.probability_source != "argmax" or not response.option_logprobs:
        return None
    letter = max(response.option_logprobs, key=response.option_logprobs.__getitem__)
    return letter if letter in QUALITY_LEVEL_OPTIONS else None


def _stated_probabilities(client: VLMClient, question: VLMRequest) -> dict[int, float] | None:
    """Return p_c stated by the model in a second request (no log-probabilities asked for), or None
    when no readable statement came back."""
    request = replace(
        question, system=QUALITY_PROBABILITIES_SYSTEM, json_output=True, answer_options=None
    )

    def parse(reply: dict[str, Any]) -> dict[int, float]:
        stated = reply["option_probabilities"]
        if not isinstance(stated, Mapping):
            raise TypeError("option_probabilities must be an object")
        return probabilities_from_statement(stated, QUALITY_LEVEL_OPTIONS)

    return ask_json(client, request, parse).value


def _analysis_text(analysis: Mapping[str, Any] | None) -> str:
    notes = [
        item["explanation"]
        for items in (analysis or {}).values()
        for item in items
        if item["severity"] != "none"
    ]
    return (" " + " ".join(notes)) if notes else ""


__all__ = ["UNABLE", "evidence_missing", "scoring_mode", "summarize"]
