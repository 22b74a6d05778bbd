"""Correlation metrics against scipy, the logistic fit, bootstrap intervals and MCQ accuracy."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from agentic_iqa.jobs.metrics import (
    answer_letter,
    bootstrap_ci,
    correlation_report,
    krcc,
    mcq_accuracy,
    plcc,
    plcc_after_logistic,
    srcc,
)


def noisy_monotone(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Predictions on a 1-5 scale and a MOS that follows them through a sigmoid, plus noise."""
    rng = np.random.default_rng(seed)
    pred = rng.uniform(1.0, 5.0, n)
    mos = 100.0 / (1.0 + np.exp(-2.5 * (pred - 3.0))) + rng.normal(0.0, 6.0, n)
    return pred, mos


def test_point_estimates_equal_scipy() -> None:
    pred, mos = noisy_monotone(120)
    pred = np.round(pred, 1)  # ties, so tie handling must agree too
    assert srcc(pred, mos) == pytest.approx(stats.spearmanr(pred, mos).statistic, abs=1e-12)
    assert plcc(pred, mos) == pytest.approx(stats.pearsonr(pred, mos).statistic, abs=1e-12)
    assert krcc(pred, mos) == pytest.approx(stats.kendalltau(pred, mos).statistic, abs=1e-12)
    assert srcc(list(pred), list(mos)) == srcc(pred, mos)


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="equal length"):
        srcc([1, 2, 3], [1, 2])


def test_constant_input_gives_nan_without_a_warning(recwarn: pytest.WarningsRecorder) -> None:
    assert math.isnan(srcc([1, 1, 1, 1], [1, 2, 3, 4]))
    assert math.isnan(plcc([1, 2, 3, 4], [2, 2, 2, 2]))
    assert not recwarn.list


def test_logistic_plcc_beats_raw_plcc_on_a_nonlinear_relation() -> None:
    pred, mos = noisy_monotone(200, seed=3)
    raw = plcc(pred, mos)
    for parameters in (4, 5):
        fit = plcc_after_logistic(pred, mos, parameters=parameters)
        assert fit.fitted and fit.note is None
        assert fit.plcc >= raw + 0.01
        assert fit.plcc == pytest.approx(stats.pearsonr(fit.curve(pred), mos).statistic)


def test_logistic_fit_works_for_a_decreasing_relation_on_any_scale() -> None:
    pred, mos = noisy_monotone(200, seed=4)
    fit = plcc_after_logistic(-1000.0 * pred, mos)
    assert fit.fitted
    assert fit.plcc > abs(plcc(-1000.0 * pred, mos))


def test_logistic_fit_falls_back_to_raw_plcc_and_says_why() -> None:
    few = plcc_after_logistic([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 5.0])
    assert not few.fitted and few.plcc == pytest.approx(plcc([1, 2, 3, 4], [1, 3, 2, 5]))
    assert "cannot fit 5 parameters" in few.note
    flat = plcc_after_logistic([2.0] * 10, list(range(10)))
    assert not flat.fitted and "constant" in flat.note
    assert list(flat.curve([1.0, 2.0])) == [1.0, 2.0]
    with pytest.raises(ValueError, match="4 or 5"):
        plcc_after_logistic([1, 2, 3], [1, 2, 3], parameters=3)


@pytest.mark.parametrize("metric", [srcc, plcc, krcc])
def test_bootstrap_interval_contains_the_estimate_and_narrows_with_more_data(metric) -> None:
    small_pred, small_mos = noisy_monotone(40, seed=1)
    large_pred, large_mos = noisy_monotone(400, seed=1)
    small = bootstrap_ci(metric, small_pred, small_mos, n=400)
    large = bootstrap_ci(metric, large_pred, large_mos, n=400)
    assert small[0] <= metric(small_pred, small_mos) <= small[1]
    assert large[0] <= metric(large_pred, large_mos) <= large[1]
    assert large[1] - large[0] < 0.6 * (small[1] - small[0])


def test_bootstrap_is_seeded_and_the_vectorised_path_matches_the_loop() -> None:
    pred, mos = noisy_monotone(60, seed=2)
    assert bootstrap_ci(srcc, pred, mos, n=200, seed=5) == bootstrap_ci(srcc, pred, mos, n=200,
                                                                          seed=5)
    looped = bootstrap_ci(lambda x, y: srcc(x, y), pred, mos, n=200, seed=5)
    assert bootstrap_ci(srcc, pred, mos, n=200, seed=5) == pytest.approx(looped, abs=1e-12)
    looped = bootstrap_ci(lambda x, y: plcc(x, y), pred, mos, n=200, seed=5)
    assert bootstrap_ci(plcc, pred, mos, n=200, seed=5) == pytest.approx(looped, abs=1e-12)


def test_bootstrap_of_250_items_is_fast() -> None:
    pred, mos = noisy_monotone(250)
    started = time.perf_counter()
    bootstrap_ci(srcc, pred, mos, n=1000)
    bootstrap_ci(krcc, pred, mos, n=1000)
    assert time.perf_counter() - started < 3.0


def test_bootstrap_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(srcc, [1, 2, 3], [1, 2, 3], confidence=1.5)
    assert all(math.isnan(v) for v in bootstrap_ci(srcc, [], []))


def test_correlation_report_has_estimates_and_intervals() -> None:
    pred, mos = noisy_monotone(80)
    report = correlation_report(list(pred) + [None, 3.0], list(mos) + [50.0, math.nan],
                                bootstrap=200)
    assert report["n"] == 80 and report["reason"] is None
    assert report["srcc"] == pytest.approx(srcc(pred, mos))
    assert report["plcc_logistic"] >= report["plcc"]
    for name in ("srcc", "plcc", "krcc"):
        low, high = report[f"{name}_ci"]
        assert low <= report[name] <= high


def test_correlation_report_explains_what_it_cannot_compute() -> None:
    few = correlation_report([3.0, 4.0], [40.0, 60.0])
    assert few["n"] == 2 and few["srcc"] is None and "at least 3" in few["reason"]
    flat = correlation_report([3.0] * 5, [1.0, 2.0, 3.0, 4.0, 5.0])
    assert flat["srcc"] is None and flat["srcc_ci"] is None
    assert "predicted scores are equal" in flat["reason"]
    assert "MOS values are equal" in correlation_report([1, 2, 3], [2, 2, 2])["reason"]
    assert correlation_report([], [])["n"] == 0


@pytest.mark.parametrize(("text", "letter"), [
    ("B", "B"), (" c ", "C"), ("(D)", "D"), ("A. Blurry", "A"), ("E) noise", "E"),
    ("A blurry photo", None), ("Unable to determine", None), (None, None), ("Z", None),
])
def test_answer_letter(text: str | None, letter: str | None) -> None:
    assert answer_letter(text) == letter


def test_mcq_accuracy_counts_only_known_truths() -> None:
    assert mcq_accuracy(["A", "b", "C. x", None, "D"], ["A", "B", "D", "C", None]) == (0.5, 4)
    assert mcq_accuracy(["A"], [None]) == (None, 0)
    with pytest.raises(ValueError, match="differ in length"):
        mcq_accuracy(["A"], [])
