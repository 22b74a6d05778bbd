"""The builtin summarizer: answers from the evidence, and a five-level opinion for scoring.

Its "opinion" of overall quality combines what the executor measured (the most severe
distortions pull the estimate down) with the tools' normalized scores, so the scoring-mode fusion
of the paper has a real second source of evidence next to the tools.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ...agents.summarizer import missing_evidence
from ...query import categories_in, options_in
from .opinion import OpinionModel, default_model
from .severity import SEVERITIES
from .vision import features as image_features
from .vision import scores as measured_scores

LEVEL_WORDS = {"excellent": 5, "good": 4, "fair": 3, "poor": 2, "bad": 1,
               "high": 4, "medium": 3, "average": 3, "low": 2, "very good": 5, "very poor": 1}
LEVEL_NAMES = {5: "Excellent", 4: "Good", 3: "Fair", 2: "Poor", 1: "Bad"}
LETTER_OF_LEVEL = {5: "A", 4: "B", 3: "C", 2: "D", 1: "E"}
#: Spread (in levels) of the builtin's opinion around its estimate.
OPINION_SIGMA = 0.7


def _severity_index(word: str) -> int:
    return SEVERITIES.index(word) if word in SEVERITIES else 0


def category_severity(context: Mapping[str, Any]) -> dict[str, float]:
    """Severity per category: the analysis's words, refined by the measured continuous score."""
    measured = measured_scores(context["image_path"])
    analysis = context.get("distortion_analysis") or {}
    result: dict[str, float] = {}
    for items in analysis.values():
        for item in items:
            level = _severity_index(item["severity"])
            fine = measured.get(item["type"], float(level))
            value = fine if int(min(fine, 4)) == level else level + 0.5
            result[item["type"]] = max(result.get(item["type"], 0.0), value)
    return result


def tool_mean(context: Mapping[str, Any]) -> float | None:
    scores = [float(pair[1]) for per_object in (context.get("quality_scores") or {}).values()
              for pair in per_object.values()]
    return sum(scores) / len(scores) if scores else None


def quality_estimate(context: Mapping[str, Any], model: OpinionModel | None = None) -> float:
    """The builtin's own opinion (see :mod:`.opinion`), from the image and the tool scores."""
    model = model or default_model()
    return model.predict(image_features(context["image_path"]), tool_mean(context))


def level_probabilities(context: Mapping[str, Any], model: OpinionModel | None = None
                        ) -> dict[str, float]:
    estimate = quality_estimate(context, model)
    weights = {LETTER_OF_LEVEL[c]: math.exp(-((c - estimate) ** 2) / (2 * OPINION_SIGMA ** 2))
               for c in range(1, 6)}
    total = sum(weights.values())
    return {letter: weight / total for letter, weight in weights.items()}


def as_logprobs(probabilities: Mapping[str, float]) -> dict[str, float]:
    return {k: math.log(v) if v > 0 else -math.inf for k, v in probabilities.items()}


def explain(context: Mapping[str, Any], model: OpinionModel | None = None) -> dict[str, Any]:
    query = context["query"]
    evidence = _evidence_text(context)
    missing = missing_evidence(context.get("plan") or {}, context.get("quality_scores"),
                               context.get("distortion_analysis"))
    if missing:
        return {"final_answer": "Unable to determine", "need_replan": True,
                "replan_reason": missing,
                "quality_reasoning": f"{missing}. Evidence so far: {evidence}"}
    options = options_in(query)
    severity = category_severity(context)
    estimate = quality_estimate(context, model)
    if options:
        letter, why = _choose_option(query, options, severity, estimate)
        return {"final_answer": letter, "need_replan": False,
                "quality_reasoning": f"{why} {evidence}".strip()}
    answer = _free_answer(query, severity, estimate, context.get("plan"))
    return {"final_answer": answer, "need_replan": False,
            "quality_reasoning": f"{answer}. {evidence}".strip()}


def _level_of(text: str) -> int | None:
    lowered = text.lower().strip(" .")
    for word in sorted(LEVEL_WORDS, key=len, reverse=True):
        if re.search(rf"\b{word}\b", lowered):
            return LEVEL_WORDS[word]
    return None


def _choose_option(query: str, options: dict[str, str], severity: dict[str, float],
                   estimate: float) -> tuple[str, str]:
    stem = query.split("A.")[0] if "A." in query else query
    asked = categories_in(stem)
    by_category = {letter: categories_in(text) for letter, text in options.items()}
    if all(by_category.values()):
        least = re.search(r"\b(least|mildest|smallest)\b", stem, re.I) is not None
        value = {letter: max(severity.get(c, 0.0) for c in cats)
                 for letter, cats in by_category.items()}
        pick = (min if least else max)(value, key=value.__getitem__)
        return pick, (f"Option {pick} ({options[pick]}) is the "
                      f"{'least' if least else 'most'} severe distortion measured.")
    severity_options = {letter: text.lower().strip(" .") for letter, text in options.items()
                        if text.lower().strip(" .") in SEVERITIES}
    if len(severity_options) == len(options):
        level = max((severity.get(c, 0.0) for c in asked), default=max(severity.values(),
                                                                      default=0.0))
        word = SEVERITIES[min(4, int(level))]
        pick = min(severity_options, key=lambda k: abs(SEVERITIES.index(severity_options[k])
                                                       - SEVERITIES.index(word)))
        return pick, f"The distortion in question is {word}."
    yes_no = {letter: text.lower().strip(" .") for letter, text in options.items()}
    if set(yes_no.values()) <= {"yes", "no"} and len(yes_no) == 2:
        present = max((severity.get(c, 0.0) for c in asked), default=0.0) >= 1.0
        pick = next(k for k, v in yes_no.items() if v == ("yes" if present else "no"))
        return pick, ("The asked distortion is visible." if present
                      else "The asked distortion is not visible.")
    levels = {letter: _level_of(text) for letter, text in options.items()}
    if all(v is not None for v in levels.values()):
        pick = min(levels, key=lambda k: abs(levels[k] - estimate))
        return pick, f"Estimated quality {estimate:.2f}/5 is closest to {options[pick]}."
    return "A", "No option matches the evidence clearly; defaulting to the first option."


NOUNS = {"Blurs": "blur", "Noise": "noise", "Compression": "compression artefacts",
         "Brightness change": "exposure problems", "Contrast": "loss of contrast",
         "Color distortions": "colour distortion", "Sharpness": "loss of sharpness"}


def _free_answer(query: str, severity: dict[str, float], estimate: float,
                 context_plan: Mapping[str, Any] | None = None) -> str:
    asked = categories_in(query)
    if asked:
        worst = max(asked, key=lambda c: severity.get(c, 0.0))
        level = severity.get(worst, 0.0)
        word = SEVERITIES[min(4, int(level))]
        noun = NOUNS.get(worst, worst.lower())
        if level >= 1.0:
            return f"Yes: {word} {noun}"
        return f"No: {noun} is not visible"
    technical = f"{LEVEL_NAMES[round(estimate)]} technical quality ({estimate:.2f} on a 1-5 scale)"
    plan = context_plan or {}
    if plan.get("query_type") == "Other":
        return ("The offline backend judges technical quality, not taste: "
                + technical[0].lower() + technical[1:])
    return technical


def _evidence_text(context: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for key, items in (context.get("distortion_analysis") or {}).items():
        for item in items:
            if item["severity"] != "none":
                prefix = "" if key == "Global" else f"{key}: "
                parts.append(prefix + item["explanation"])
    seen: set[tuple[str, str]] = set()
    for key, pairs in (context.get("quality_scores") or {}).items():
        for tool, score in pairs.values():
            if (key, tool) in seen:
                continue
            seen.add((key, tool))
            parts.append(f"{tool} rates {key if key != 'Global' else 'the image'} "
                         f"{float(score):.2f}/5.")
    return " ".join(parts) if parts else "No distortion stands out."
