import math

import pytest

from agentic_iqa.agents.fusion import fuse, probabilities_from_logprobs, tool_weights


def test_tool_weights_peak_at_the_mean_tool_score():
    alpha = tool_weights(4.0)
    assert max(alpha, key=alpha.get) == 4
    assert sum(alpha.values()) == pytest.approx(1.0)
    assert alpha[3] == pytest.approx(alpha[5])


def test_fusion_is_normalised_into_the_scale():
    certain_good = {4: 1.0}
    assert fuse([4.0], certain_good) == pytest.approx(4.0)
    # the paper's literal sum would be 4 * alpha_4 (< 4 and not a level); normalised it is 4
    uniform = {c: 0.2 for c in range(1, 6)}
    assert 1.0 <= fuse([1.0, 1.2], uniform) <= 1.5
    assert fuse([], {2: 0.5, 4: 0.5}) == pytest.approx(3.0)


def test_fusion_matches_the_formula():
    p = {1: 0.05, 2: 0.1, 3: 0.5, 4: 0.3, 5: 0.05}
    q_bar = 3.4
    alpha = {c: math.exp(-((q_bar - c) ** 2)) for c in p}
    expected = sum(alpha[c] * p[c] * c for c in p) / sum(alpha[c] * p[c] for c in p)
    assert fuse([3.0, 3.8], p) == pytest.approx(expected)


def test_probabilities_from_logprobs():
    probabilities = probabilities_from_logprobs({5: math.log(0.2), 4: math.log(0.6), 3: -math.inf})
    assert probabilities[4] == pytest.approx(0.75)
    assert probabilities[3] == 0.0 and probabilities[1] == 0.0
    with pytest.raises(ValueError):
        probabilities_from_logprobs({1: -math.inf})
