import math

import numpy as np
import pytest

from iqa_tools.catalog import load_catalog
from iqa_tools.normalize import (
    fit_logistic5,
    linear,
    logistic4,
    logistic5,
    monotonicity_violations,
    normalize,
    sigmoid,
)

SSIM = {"beta1": 94.4202, "beta2": 64.9155, "beta3": 1.0664, "beta4": 2.8744, "beta5": 47.6819}
TRES = {"beta1": -0.0550, "beta2": 6559.4161, "beta3": 48.9070, "beta4": 0.0255, "beta5": 1.1176}


def test_ssim_anchor_points_from_the_paper():
    assert normalize(0.70, "logistic5", SSIM) == pytest.approx(2.5, abs=0.05)
    assert normalize(0.998, "logistic5", SSIM) == pytest.approx(4.4, abs=0.05)


def test_logistic5_is_the_corrected_form():
    # f(x) = b1 (1/2 - 1/(1 + exp(b2 (x - b3)))) + b4 x + b5, computed by hand at x = b3.
    params = {"beta1": 2.0, "beta2": 1.0, "beta3": 3.0, "beta4": 0.5, "beta5": 1.0}
    assert logistic5(3.0, **params) == pytest.approx(0.5 * 3.0 + 1.0)
    assert logistic5(4.0, **params) == pytest.approx(2 * (0.5 - 1 / (1 + math.e)) + 2.0 + 1.0)


def test_logistic4_and_linear_forms():
    assert logistic4(0.0, beta1=5, beta2=1, beta3=0.0, beta4=-2.0) == pytest.approx(3.0)
    assert linear(20.0, x_at_1=20.0, x_at_5=40.0) == 1.0
    assert linear(30.0, x_at_1=20.0, x_at_5=40.0) == 3.0
    # lower-is-better: the larger raw value sits at 1
    assert linear(1.0, x_at_1=4.0, x_at_5=0.0) == 4.0


@pytest.mark.parametrize("raw", [-1e308, -1e9, -1e3, 48.907, 1e3, 1e9, 1e308])
def test_tres_extreme_inputs_do_not_overflow(raw):
    value = normalize(raw, "logistic5", TRES)
    assert 1.0 <= value <= 5.0


def test_sigmoid_is_stable_at_extremes():
    assert sigmoid(1e6) == 1.0
    assert sigmoid(-1e6) == 0.0
    assert sigmoid(0.0) == 0.5


def test_output_is_clipped_to_the_scale():
    assert normalize(1e6, "linear", {"x_at_1": 0, "x_at_5": 1}) == 5.0
    assert normalize(-1e6, "linear", {"x_at_1": 0, "x_at_5": 1}) == 1.0


@pytest.mark.parametrize("raw", [math.nan, math.inf, -math.inf])
def test_non_finite_raw_scores_are_refused(raw):
    with pytest.raises(ValueError, match="non-finite"):
        normalize(raw, "logistic5", SSIM)


def test_unknown_form_is_refused():
    with pytest.raises(ValueError, match="unknown normalization form"):
        normalize(1.0, "cubic", {})


#: Published fits that are not monotone over the tool's documented range.
KNOWN_NON_MONOTONE = {"CKDN", "TReS", "UNIQUE", "WaDIQaM_NR", "ARNIQA", "BRISQUE"}


def test_every_other_tool_is_monotone_over_its_documented_range():
    catalog = load_catalog()
    for spec in catalog:
        low, high = spec.score_range
        xs = np.linspace(low, high, 4001)
        ys = np.array([spec.normalize(float(x)) for x in xs])
        steps = np.diff(ys)
        if spec.name in KNOWN_NON_MONOTONE:
            continue
        if spec.lower_is_better:
            assert (steps <= 1e-9).all(), spec.name
        else:
            assert (steps >= -1e-9).all(), spec.name


def test_non_monotone_published_fits_are_reported_not_hidden():
    catalog = load_catalog()
    flagged = {spec.name for spec in catalog if spec.normalization_warnings()}
    assert flagged == KNOWN_NON_MONOTONE
    (ckdn,) = catalog.get("CKDN").normalization_warnings()
    # the paper notes CKDN's curve turns down near 1.0
    assert "0.7405..1" in ckdn


def test_monotonicity_violations_finds_a_dip():
    # a logistic with a negative bump: increasing overall, decreasing around x = 0
    params = {"beta1": -5.0, "beta2": 10.0, "beta3": 0.0, "beta4": 1.0, "beta5": 0.0}
    assert monotonicity_violations("logistic5", params, -1, 1, lower_is_better=False)
    assert not monotonicity_violations("logistic5", params, 2, 3, lower_is_better=False)


def test_fit_logistic5_recovers_a_known_curve():
    xs = np.linspace(0.5, 1.0, 60)
    ys = np.array([logistic5(float(x), **SSIM) for x in xs])
    fitted = fit_logistic5(xs, ys)
    predicted = np.array([logistic5(float(x), **fitted) for x in xs])
    assert np.max(np.abs(predicted - ys)) < 0.02


def test_fit_logistic5_needs_enough_points():
    with pytest.raises(ValueError, match="at least five"):
        fit_logistic5([1, 2, 3], [1, 2, 3])


def test_fit_monotone_keeps_a_5pl_that_follows_the_trend_and_drops_one_that_turns_back():
    import numpy as np

    from iqa_tools.normalize import fit_monotone, monotonicity_violations

    x = np.linspace(0, 100, 40)
    clean = 1 + 4 / (1 + np.exp(-(x - 50) / 10))
    form, params, why = fit_monotone(x, clean, lower_is_better=False)
    assert (form, why) == ("logistic5", None)
    # Few noisy points with a dip at the top: a free 5PL follows the dip.
    rng = np.random.default_rng(3)
    xs = np.sort(rng.uniform(0, 100, 12))
    ys = np.clip(1 + 0.04 * xs + rng.normal(0, 0.3, 12), 1, 5)
    ys[-2:] -= 1.5
    form, params, why = fit_monotone(xs, ys, lower_is_better=False)
    assert form in {"logistic4", "linear"} and why
    assert not monotonicity_violations(form, params, xs.min(), xs.max(), lower_is_better=False)


def test_fit_monotone_refuses_a_tool_that_runs_against_the_target():
    import numpy as np
    import pytest

    from iqa_tools.normalize import fit_monotone

    x = np.linspace(0, 1, 20)
    with pytest.raises(ValueError, match="run against the target"):
        fit_monotone(x, 5 - 4 * x, lower_is_better=False)
