"""The paper's tool-augmented score fusion, normalised so the result stays in [1, 5].

q̄ is the mean of the normalized tool scores; α_c = softmax_c(−η (q̄ − c)²) says how well each
level c agrees with the tools; p_c is the VLM's probability of level c.  The paper prints
q = Σ α_c p_c c, which leaves [1, 5]; we use q = Σ α_c p_c c / Σ α_c p_c.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

LEVELS = (1, 2, 3, 4, 5)
ETA = 1.0


def tool_weights(mean_tool_score: float, eta: float = ETA) -> dict[int, float]:
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


def fuse(tool_scores: Sequence[float], level_probabilities: Mapping[int, float],
         eta: float = ETA) -> float:
    """The fused quality in [1, 5]; without tool scores it is the VLM's expected level."""
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
