"""The paper's tool-augmented score fusion, normalised so the result stays in [1, 5].

q̄ is the mean of the normalized tool scores; α_c = softmax_c(−η (q̄ − c)²) says how well each
level c agrees with the tools; p_c is the VLM's probability of level c.  The paper prints
q = Σ α_c p_c c, which leaves [1, 5]; we use q = Σ α_c p_c c / Σ α_c p_c.

Where p_c comes from matters.  Token log-probabilities ("logprobs") or probabilities the model
states when asked ("stated") spread mass over several levels, and the tools' α_c pull q between
them.  With neither ("argmax": probability 1 on the level the model answered) every term but one
vanishes, so q equals the answered level exactly and the tool scores no longer count.  That is why
the summarizer asks a server without log-probabilities for stated probabilities first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..prompts import QUALITY_LEVEL_NAMES

LEVELS = (1, 2, 3, 4, 5)
ETA = 1.0


def tool_weights(mean_tool_score: float, eta: float = ETA) -> dict[int, float]:
    """Return the weight of each level given the mean tool score: a softmax of -eta (q - c)^2."""
    logits = {c: -eta * (mean_tool_score - c) ** 2 for c in LEVELS}
    top = max(logits.values())
    weights = {c: math.exp(v - top) for c, v in logits.items()}
    total = sum(weights.values())
    return {c: w / total for c, w in weights.items()}


def probabilities_from_logprobs(logprobs: Mapping[int, float]) -> dict[int, float]:
    """Softmax over the five levels' log-probabilities (missing levels get probability 0)."""
    finite = {c: lp for c, lp in logprobs.items() if math.isfinite(lp)}
    if not finite:
        raise ValueError("no finite log-probability for any level")
    top = max(finite.values())
    weights = {c: math.exp(finite[c] - top) if c in finite else 0.0 for c in LEVELS}
    total = sum(weights.values())
    return {c: w / total for c, w in weights.items()}


def probabilities_from_statement(
    stated: Mapping[str, object], letters: Mapping[str, int]
) -> dict[int, float]:
    """Return p_c from probabilities a model stated per option letter (or level name), normalised.

    Negative values count as 0; a value that is not a number, or nothing above 0, raises
    ``ValueError``: a statement we cannot read must not pass for a distribution.
    """
    keys = {str(key).strip().strip("().").casefold(): value for key, value in stated.items()}
    probabilities: dict[int, float] = {}
    for letter, level in letters.items():
        value = keys.get(letter.casefold(), keys.get(QUALITY_LEVEL_NAMES[level].casefold(), 0.0))
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"stated probability of {letter} is not a number: {value!r}")
        probabilities[level] = max(float(value), 0.0)
    total = sum(probabilities.values())
    if total <= 0.0:
        raise ValueError("no stated probability above 0")
    return {c: probabilities.get(c, 0.0) / total for c in LEVELS}


def fuse(
    tool_scores: Sequence[float], level_probabilities: Mapping[int, float], eta: float = ETA
) -> float:
    """Return the fused quality in [1, 5]; without tool scores it is the VLM's expected level.

    A one-hot ``level_probabilities`` (argmax) returns that level whatever the tools say.
    """
    p = {c: float(level_probabilities.get(c, 0.0)) for c in LEVELS}
    if not tool_scores:
        total = sum(p.values())
        return sum(c * p[c] for c in LEVELS) / total
    alpha = tool_weights(sum(tool_scores) / len(tool_scores), eta)
    joint = {c: alpha[c] * p[c] for c in LEVELS}
    total = sum(joint.values())
    if total <= 0.0:  # the VLM put all its mass where the tools put none
        return sum(c * alpha[c] for c in LEVELS)
    return sum(c * joint[c] for c in LEVELS) / total
