"""The builtin summarizer: answers from the evidence, and a five-level opinion for scoring.

Its "opinion" of overall quality (:mod:`.opinion`) combines what it reads of the image
(:mod:`.opinion_features`) with the mean score of the tools the pipeline ran; the five-level
probabilities are a Gaussian of :data:`OPINION_SIGMA` levels around it, which the summarizer
fuses with the same tool scores.  The shipped opinion is an early fit (commit c20d270), which
held better on photos it never saw than every later one (``studies/opinion_selection.py``).

Evidence a tool cannot give is not quoted as a reason: a score at the end of the tool's scale
(e.g. PIQE raw 100 -> 1.00, or a normalized score on the flat end of its logistic) carries no
information, and a tool whose metadata does not list the asked distortion among its strengths
rates overall quality, not that distortion.  Such scores are named as set aside, with why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ...evidence import missing_evidence, whole_image_objects
from ...query import categories_in, options_in
from ...vocabulary import level_name
from . import damage
from .encoding import jpeg_quality
from .opinion import OpinionModel, OpinionModels, as_models
from .opinion_features import opinion_features
from .severity import SEVERITIES
from .vision import dominance_for, presence_for, scores_for
from .vision import scores as measured_scores
from .yes_no import (
    BAD_WORDS,
    GOOD_WORDS,
    TOP_WORDS,
    Asked,
    all_needed,
    distortions_asked,
    overall_asked,
)

LEVEL_WORDS = {
    "excellent": 5,
    "good": 4,
    "fair": 3,
    "poor": 2,
    "bad": 1,
    "high": 4,
    "medium": 3,
    "average": 3,
    "low": 2,
    "very good": 5,
    "very poor": 1,
}
LETTER_OF_LEVEL = {5: "A", 4: "B", 3: "C", 2: "D", 1: "E"}
#: Spread (in levels) of the builtin's opinion around its estimate: with the paper's fusion
#: (η = 1, a precision of 2 for the tools against 1/σ² ≈ 2 for the opinion) each carries about
#: half of the fused score, as when the shipped opinion was fitted.
OPINION_SIGMA = 0.7


def _severity_index(word: str) -> int:
    return SEVERITIES.index(word) if word in SEVERITIES else 0


def category_severity(context: Mapping[str, Any], reference: str | None = None) -> dict[str, float]:
    """Severity per category: the analysis's words, refined by the measured continuous score
    (of the same region, and against the reference when there is one)."""
    analysis = context.get("distortion_analysis") or {}
    query = context.get("query", "")
    result: dict[str, float] = {}
    for key, items in analysis.items():
        measured = scores_for(context["image_path"], key, query, reference)
        for item in items:
            level = _severity_index(item["severity"])
            fine = measured.get(item["type"], float(level))
            value = fine if int(min(fine, 4)) == level else level + 0.5
            result[item["type"]] = max(result.get(item["type"], 0.0), value)
    return result


def category_presence(context: Mapping[str, Any], reference: str | None = None) -> dict[str, float]:
    """Per category, how far it is above the point from which it counts as present (>= 0:
    present), the largest over the analysed scopes (:func:`.severity.presence`)."""
    query = context.get("query", "")
    result: dict[str, float] = {}
    for key in context.get("distortion_analysis") or {"Global": []}:
        for category, margin in presence_for(context["image_path"], key, query, reference).items():
            result[category] = max(result.get(category, -math.inf), margin)
    return result


def category_dominance(
    context: Mapping[str, Any], reference: str | None = None
) -> dict[str, float] | None:
    """Per category, the probability that it is the image's distortion, averaged over the
    analysed scopes (None with a reference: the largest severity answers there)."""
    query = context.get("query", "")
    keys = list(context.get("distortion_analysis") or {"Global": []})
    found = [dominance_for(context["image_path"], key, query, reference) for key in keys]
    known = [f for f in found if f is not None]
    if len(known) < len(found) or not known:
        return None
    return {c: sum(f[c] for f in known) / len(known) for c in known[0]}


def _tool_pairs(context: Mapping[str, Any]) -> list[tuple[str, float]]:
    return [
        (str(pair[0]), float(pair[1]))
        for per_object in (context.get("quality_scores") or {}).values()
        for pair in per_object.values()
    ]


def tool_mean(context: Mapping[str, Any]) -> float | None:
    scores = [score for _, score in _tool_pairs(context)]
    return sum(scores) / len(scores) if scores else None


def quality_estimate(
    context: Mapping[str, Any], model: OpinionModel | OpinionModels | None = None
) -> float:
    """The builtin's own opinion (see :mod:`.opinion`), from the image and the tool scores, under
    the ceiling of the damage measured on it, charged for what it does not see (:mod:`.damage`)."""
    chosen = as_models(model).for_tools([tool for tool, _ in _tool_pairs(context)])
    path = context["image_path"]
    features, scores = opinion_features(path), measured_scores(path)
    opinion = damage.bounded(chosen.predict(features, tool_mean(context)), scores)
    return damage.charged(opinion, scores, jpeg_quality(path), features.get("s1_gradient_mean"))


def level_probabilities(
    context: Mapping[str, Any], model: OpinionModel | OpinionModels | None = None
) -> dict[str, float]:
    estimate = quality_estimate(context, model)
    logits = {c: -((c - estimate) ** 2) / (2 * OPINION_SIGMA**2) for c in range(1, 6)}
    top = max(logits.values())
    weights = {LETTER_OF_LEVEL[c]: math.exp(logits[c] - top) for c in range(1, 6)}
    total = sum(weights.values())
    return {letter: weight / total for letter, weight in weights.items()}


def as_logprobs(probabilities: Mapping[str, float]) -> dict[str, float]:
    return {k: math.log(v) if v > 0 else -math.inf for k, v in probabilities.items()}


def explain(
    context: Mapping[str, Any],
    model: OpinionModel | OpinionModels | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    query = context["query"]
    evidence = _evidence_text(context, categories_in(query))
    missing = missing_evidence(
        context.get("plan") or {}, context.get("quality_scores"), context.get("distortion_analysis")
    )
    if missing and context.get("replan_allowed", True):
        return {
            "final_answer": "Unable to determine",
            "need_replan": True,
            "replan_reason": missing,
            "quality_reasoning": f"{missing}. Evidence so far: {evidence}",
        }
    if missing:  # no replan can supply it: answered from the image and what there is
        evidence = f"{evidence} ({missing}.)".strip()
    options = options_in(query)
    severity = category_severity(context, reference)
    estimate = quality_estimate(context, model)
    present = category_presence(context, reference)
    if options:
        letter, why = _choose_option(
            query,
            options,
            severity,
            estimate,
            present=present,
            dominant=category_dominance(context, reference),
        )
        return {
            "final_answer": letter,
            "need_replan": False,
            "quality_reasoning": f"{why} {evidence}".strip(),
        }
    answer = _free_answer(query, severity, estimate, context.get("plan"), present=present)
    return {
        "final_answer": answer,
        "need_replan": False,
        "quality_reasoning": f"{answer}. {evidence}".strip(),
    }


def _level_of(text: str) -> int | None:
    lowered = text.lower().strip(" .")
    for word in sorted(LEVEL_WORDS, key=len, reverse=True):
        if re.search(rf"\b{word}\b", lowered):
            return LEVEL_WORDS[word]
    return None


def _excess(
    severity: Mapping[str, float],
    detection: Mapping[str, float],
    category: str,
    present: Mapping[str, float] | None = None,
) -> float:
    """How far a category is above the point from which it counts as present (a yes/no
    question is answered Yes from 0): ``present`` (:func:`.severity.presence`) where given,
    else the severity minus its detection score.  A "slight" reading that clean photos often
    show (natural blur, a dark scene) is no reason to say Yes."""
    if present is not None and category in present:
        return present[category]
    return severity.get(category, 0.0) - detection.get(category, 1.0)


def _choose_option(
    query: str,
    options: dict[str, str],
    severity: dict[str, float],
    estimate: float,
    detection: Mapping[str, float] | None = None,
    *,
    present: Mapping[str, float] | None = None,
    dominant: Mapping[str, float] | None = None,
) -> tuple[str, str]:
    """The option the evidence supports.  ``present``: per category how far it is above the
    point from which it counts as present (yes/no questions; else severity minus
    ``detection``).  "Which distortion is most severe?" picks the option the analysis rates
    most severe (:func:`_most_severe`); ``dominant``, per category the probability that it is
    the image's distortion, only breaks an exact tie."""
    detection = detection or {}
    stem = query.split("A.")[0] if "A." in query else query
    asked = categories_in(stem)
    by_category = {letter: categories_in(text) for letter, text in options.items()}
    if all(by_category.values()):
        least = re.search(r"\b(least|mildest|smallest)\b", stem, re.I) is not None
        return _most_severe(options, by_category, severity, dominant, least)
    severity_options = {
        letter: text.lower().strip(" .")
        for letter, text in options.items()
        if text.lower().strip(" .") in SEVERITIES
    }
    if len(severity_options) == len(options):
        level = max(
            (severity.get(c, 0.0) for c in asked), default=max(severity.values(), default=0.0)
        )
        word = SEVERITIES[min(4, int(level))]
        pick = min(
            severity_options,
            key=lambda k: abs(SEVERITIES.index(severity_options[k]) - SEVERITIES.index(word)),
        )
        return pick, f"The distortion in question is {word}."
    yes_no = {letter: text.lower().strip(" .") for letter, text in options.items()}
    if set(yes_no.values()) <= {"yes", "no"} and len(yes_no) == 2:
        # The same reading as a free yes/no question: "Is it free of noise?" is Yes when no
        # noise is visible, whichever letter Yes has.
        reply = yes_no_reply(stem, severity, detection, present)
        if reply is not None:
            yes, why = reply[0], f"{reply[1]}."
        elif asks_overall_quality(stem):  # "Is this image of good quality?"
            yes, why = overall_yes(stem, estimate)
        else:
            yes, why = False, "The question names no distortion the offline backend measures."
        pick = next(k for k, v in yes_no.items() if v == ("yes" if yes else "no"))
        return pick, why
    levels = {letter: _level_of(text) for letter, text in options.items()}
    known = {letter: level for letter, level in levels.items() if level is not None}
    if len(known) == len(levels):
        pick = min(known, key=lambda k: abs(known[k] - estimate))
        return pick, f"Estimated quality {estimate:.2f}/5 is closest to {options[pick]}."
    return "Unable to determine", (
        "None of the options is something the offline backend can "
        "measure (a level, a severity, yes/no or a distortion), so "
        "it does not pick one."
    )


def _most_severe(
    options: Mapping[str, str],
    by_category: Mapping[str, Sequence[str]],
    severity: Mapping[str, float],
    dominant: Mapping[str, float] | None,
    least: bool,
) -> tuple[str, str]:
    """The option whose distortion the analysis rates most (``least``: least) severe, with why.

    ``severity`` (:func:`category_severity`) is the analysis's word refined by the measured
    score, its integer part the word's level: so the word decides first ("moderate" blur over
    "slight" compression), and between two options of the same word the larger measured
    severity.  Only an exact tie (both unanalysed, or the same categories) goes to ``dominant``
    (the probability of each category being the image's distortion), then to the first option.
    An option naming several categories counts its most severe one."""
    value = {
        letter: max(severity.get(c, 0.0) for c in cats) for letter, cats in by_category.items()
    }
    likely = {
        letter: sum((dominant or {}).get(c, 0.0) for c in set(cats))
        for letter, cats in by_category.items()
    }
    sign = -1.0 if least else 1.0
    order = list(options)
    pick = max(order, key=lambda k: (sign * value[k], sign * likely[k], -order.index(k)))
    word = SEVERITIES[min(4, int(value[pick]))]
    others = ", ".join(
        f"{options[k]} {SEVERITIES[min(4, int(value[k]))]} ({value[k]:.2f})"
        for k in order
        if k != pick
    )
    return pick, (
        f"Option {pick} ({options[pick]}) is the {'least' if least else 'most'} severe "
        f"distortion in the analysis: {word} ({value[pick]:.2f} measured)"
        + (f", against {others}." if others else ".")
    )


NOUNS = {
    "Blurs": "blur",
    "Noise": "noise",
    "Compression": "compression artefacts",
    "Brightness change": "exposure problems",
    "Contrast": "loss of contrast",
    "Color distortions": "colour distortion",
    "Sharpness": "loss of sharpness",
}


#: The first word of a question answered Yes or No (English), negated or not ("Isn't it
#: blurry?"), after "Answer yes or no:" if any.
_YES_NO = re.compile(
    r"^\s*(?:(?:please\s+)?(?:answer|reply|respond)?\s*(?:with\s+)?"
    r"yes\s*(?:or|/)\s*no\s*[:,.\-]?\s*)?"
    r"(?:(?:is|are|was|were|does|do|did|has|have|had|could|would|should|"
    r"might)n't|can't|won't|shan't|is|are|was|were|does|do|did|has|have|had|"
    r"can|could|will|would|should|shall|may|might|am)\b",
    re.I,
)
#: A yes/no question about overall quality is answered from the builtin's opinion against the
#: middle of the 1-5 scale: Good and Excellent are Yes, Poor and Bad No, and Fair, the middle
#: level, splits at its centre (3.0).  Its opinion is drawn towards the middle (the best LIVE-C
#: photos score about 3.4, the worst about 2.3: both Fair), so a cut between levels would give
#: every Fair photo one answer; at 3.0 the answer agrees with MOS >= 50 on 74 % of LIVE-C
#: photos it was not fitted on (livec-extra), against 64 % with the cut at Good (3.5).
GOOD_FROM = 3.0
#: The score from which a question asking for the top ("Is it excellent?") is answered Yes.
TOP_FROM = 4.5


def is_yes_no(query: str) -> bool:
    """A question that expects Yes or No ("Is the flower in focus?", "Does it look noisy?",
    "Answer yes or no: is it noisy?")."""
    return _YES_NO.match(query.replace("\u2019", "'")) is not None


def asks_overall_quality(query: str) -> bool:
    """A question about the image's quality as a whole ("Is this image of good quality?")."""
    lowered = query.casefold()
    return re.search(r"\bquality\b", lowered) is not None or any(
        re.search(rf"\b{re.escape(word)}\b", lowered) for word in (*GOOD_WORDS, *BAD_WORDS)
    )


def overall_yes(query: str, estimate: float) -> tuple[bool, str]:
    """Yes or No to a yes/no question about overall quality, with why: "good" (or no word) is
    Yes from :data:`GOOD_FROM`, "poor" or "bad" below it, "excellent" from :data:`TOP_FROM`;
    a negated word turns round ("not of good quality" asks whether it is poor, "not
    excellent" whether it is below the top)."""
    asked = overall_asked(query)
    bad = asked is not None and asked.present
    top = asked is not None and asked.words in TOP_WORDS
    cut = TOP_FROM if top else GOOD_FROM
    above = estimate >= cut
    side = "at or above" if above else "below"
    what = "the top level" if top else "the middle of the scale"
    return above != bad, (
        f"{level_name(estimate)} technical quality ({estimate:.2f} on a 1-5 "
        f"scale, {side} {what}, {cut:.1f})"
    )


def _deciding(
    asked: Asked,
    severity: Mapping[str, float],
    detection: Mapping[str, float],
    present: Mapping[str, float] | None,
) -> tuple[str, float]:
    """The category that decides ``asked`` and how far it is above the point of being present:
    the most visible of its categories, the analysed one on a tie ("sharp" names Blurs and
    Sharpness, which are measured alike)."""
    category = max(
        asked.categories, key=lambda c: (_excess(severity, detection, c, present), c in severity)
    )
    return category, _excess(severity, detection, category, present)


def _finding(
    asked: Asked,
    severity: Mapping[str, float],
    detection: Mapping[str, float],
    present: Mapping[str, float] | None,
) -> str:
    """A visible distortion in words ("severe noise"); at least "slight", since it is seen."""
    category, _ = _deciding(asked, severity, detection, present)
    noun = NOUNS.get(category, category.lower())
    if category not in severity:  # measured for the answer, not analysed: no severity word
        return f"{noun} is visible"
    return f"{SEVERITIES[max(1, min(4, int(severity[category])))]} {noun}"


def _nouns(
    asked: Sequence[Asked],
    severity: Mapping[str, float],
    detection: Mapping[str, float],
    present: Mapping[str, float] | None,
) -> str:
    nouns: list[str] = []
    for item in asked:
        category, _ = _deciding(item, severity, detection, present)
        noun = NOUNS.get(category, category.lower())
        if noun not in nouns:
            nouns.append(noun)
    return " or ".join(nouns)


def yes_no_reply(
    query: str,
    severity: Mapping[str, float],
    detection: Mapping[str, float] | None = None,
    present: Mapping[str, float] | None = None,
) -> tuple[bool, str] | None:
    """Yes or No to a yes/no question about distortions, with the finding that decides it
    ("No: severe noise" to "Is it free of noise?"), or None when it names no distortion.
    What it asks to be absent must all be invisible; of what it asks to be there one must be
    visible ("noisy or blurry"), or each ("noisy and blurry")."""
    asked = distortions_asked(query)
    if not asked:
        return None
    detection = detection or {}

    def margin(item: Asked) -> float:
        return _deciding(item, severity, detection, present)[1]

    absent = [item for item in asked if not item.present]
    wanted = [item for item in asked if item.present]
    seen = [item for item in absent if margin(item) >= 0.0]
    if seen:
        return False, "No: " + _finding(max(seen, key=margin), severity, detection, present)
    shown = [item for item in wanted if margin(item) >= 0.0]
    unseen = [item for item in wanted if margin(item) < 0.0]
    every = all_needed(query)
    if wanted and (unseen if every else not shown):
        return False, f"No: {_nouns(unseen, severity, detection, present)} is not visible"
    decisive = shown if every else sorted(shown, key=margin)[-1:]
    parts = [_finding(item, severity, detection, present) for item in decisive]
    if absent:
        parts.append(f"no {_nouns(absent, severity, detection, present)} is visible")
    return True, "Yes: " + ", and ".join(parts)


def _free_answer(
    query: str,
    severity: dict[str, float],
    estimate: float,
    context_plan: Mapping[str, Any] | None = None,
    detection: Mapping[str, float] | None = None,
    *,
    present: Mapping[str, float] | None = None,
) -> str:
    """A yes/no question gets Yes or No first, the right way round (:func:`yes_no_reply`):
    "Is it noisy?" is Yes when noise is visible, "Is it sharp?" or "Is it clear of noise?"
    when it is not; one that names no distortion is about overall quality."""
    detection = detection or {}
    reply = yes_no_reply(query, severity, detection, present) if is_yes_no(query) else None
    if reply is not None:
        return reply[1]
    asked = categories_in(query)
    if asked:
        worst = max(asked, key=lambda c: _excess(severity, detection, c, present))
        level = severity.get(worst, 0.0)
        word = SEVERITIES[min(4, int(level))]
        noun = NOUNS.get(worst, worst.lower())
        visible = _excess(severity, detection, worst, present) >= 0.0
        if is_yes_no(query):  # names a category only :mod:`.yes_no` does not read
            return f"Yes: {word} {noun}" if visible else f"No: {noun} is not visible"
        # "How severe is the blur?", "Describe the colours": the finding, no Yes or No.
        return f"{word.capitalize()} {noun}" if visible else f"No {noun} is visible"
    technical = f"{level_name(estimate)} technical quality ({estimate:.2f} on a 1-5 scale)"
    plan = context_plan or {}
    if plan.get("query_type") == "Other":
        return (
            "The offline backend judges technical quality, not taste: "
            + technical[0].lower()
            + technical[1:]
        )
    if is_yes_no(query):
        yes, why = overall_yes(query, estimate)
        return f"{'Yes' if yes else 'No'}: {why[0].lower()}{why[1:]}"
    return technical


#: Categories a tool's strength may name for an asked one.
_SAME = {"Blurs": {"Blurs", "Sharpness"}, "Sharpness": {"Blurs", "Sharpness"}}


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    from iqa_tools.catalog import load_catalog

    return {spec.name: spec for spec in load_catalog()}


@lru_cache(maxsize=64)
def _normalized_range(tool: str) -> tuple[float, float] | None:
    spec = _catalog().get(tool)
    if spec is None:
        return None
    low, high = spec.score_range
    values = [spec.normalize(float(x)) for x in np.linspace(low, high, 1001)]
    return min(values), max(values)


def saturated(tool: str, score: float) -> bool:
    """Whether a normalized score sits at an end of the tool's scale (the clamp at 1 or 5, or
    the flat end of its mapping over the documented raw range), where it tells nothing."""
    if score <= 1.0 + 1e-6 or score >= 5.0 - 1e-6:
        return True
    span = _normalized_range(tool)
    if span is None:
        return False
    low, high = span
    margin = 0.02 * (high - low)
    return score <= low + margin or score >= high - margin


def measures(tool: str, asked: Sequence[str]) -> bool:
    """Whether ``tool`` is evidence about the asked distortions (any tool, when none is asked:
    overall quality)."""
    if not asked:
        return True
    spec = _catalog().get(tool)
    strengths = set(spec.strengths) if spec is not None else set()
    return any(strengths & _SAME.get(category, {category}) for category in asked)


def tool_evidence(
    context: Mapping[str, Any], asked: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """(scores quoted as evidence, scores set aside with the reason), one per (part, tool): a
    "Global" score is the whole image's, whatever objects it was run for, and is said so."""
    cited: list[str] = []
    set_aside: list[str] = []
    seen: set[tuple[str, str]] = set()
    nouns = " or ".join(NOUNS.get(c, c.lower()) for c in asked)
    for key, pairs in (context.get("quality_scores") or {}).items():
        for tool, score in pairs.values():
            score = float(score)
            if (key, tool) in seen:
                continue
            seen.add((key, tool))
            where = "the whole image" if key == "Global" else f"{key} (its crop)"
            if saturated(tool, score):
                set_aside.append(
                    f"{tool} {score:.2f}/5 for {where} (at the end of its scale, "
                    "so it carries no information)"
                )
            elif not measures(tool, asked):
                set_aside.append(
                    f"{tool} {score:.2f}/5 for {where} (an overall-quality score; "
                    f"it does not measure {nouns})"
                )
            else:
                cited.append(f"{tool} rates {where} {score:.2f}/5.")
    return cited, set_aside


def _evidence_text(context: Mapping[str, Any], asked: Sequence[str] = ()) -> str:
    parts: list[str] = []
    for key, items in (context.get("distortion_analysis") or {}).items():
        for item in items:
            explanation = item["explanation"]
            shown = (
                item["severity"] != "none" or item["type"] in asked or "measured on" in explanation
            )
            if shown:
                prefix = "" if key == "Global" else f"{key}: "
                parts.append(prefix + explanation)
    cited, set_aside = tool_evidence(context, asked)
    parts.extend(cited)
    if set_aside:
        parts.append("Not used as evidence: " + "; ".join(set_aside) + ".")
    objects = whole_image_objects(context.get("plan") or {}, context.get("quality_scores"))
    if objects:
        names, judged = " or ".join(objects), "it is" if len(objects) == 1 else "they are"
        parts.append(
            f"The tool scores are the whole image's: no tool measured {names} on its "
            f"own (tools cannot locate objects), so {judged} judged from the image."
        )
    return " ".join(parts) if parts else "No distortion stands out."
