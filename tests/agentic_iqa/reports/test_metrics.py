"""Correlation metrics against scipy, the logistic fit, bootstrap intervals and MCQ accuracy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from agentic_iqa.reports.metrics import (
    answer_letter,
    bootstrap_ci,
    correlation_report,
    krcc,
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


def test_logistic_fit_falls_back_to_simpler_fits_and_says_why() -> None:
    # Two points per parameter: 4 points get a line (whose PLCC is the raw PLCC), 6 a 3PL,
    # 8 a 4PL, 10 the 5PL; each fallback says why.
    few = plcc_after_logistic([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 5.0])
    assert few.form == "linear" and few.fitted and few.parameters == 2
    assert few.plcc == pytest.approx(plcc([1, 2, 3, 4], [1, 3, 2, 5]))
    assert few.note == (
        "4 points are too few for the 5-parameter logistic (it needs 10): "
        "linear fit used instead of the 5-parameter logistic"
    )
    pred, mos = noisy_monotone(10, seed=5)
    assert [plcc_after_logistic(pred[:n], mos[:n]).form for n in (5, 6, 8, 10)] == [
        "linear",
        "logistic3",
        "logistic4",
        "logistic5",
    ]
    flat = plcc_after_logistic([2.0] * 10, list(range(10)))
    assert not flat.fitted and flat.form == "none" and "constant" in flat.note
    assert list(flat.curve([1.0, 2.0])) == [1.0, 2.0]
    with pytest.raises(ValueError, match="3, 4 or 5"):
        plcc_after_logistic([1, 2, 3], [1, 2, 3], parameters=2)


def weak_trend_20(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """20 items whose MOS follows the score linearly under heavy noise (raw PLCC 0.63)."""
    rng = np.random.default_rng(seed)
    pred = rng.uniform(1.0, 5.0, 20)
    return pred, 20.0 * pred + rng.normal(0.0, 35.0, 20)


def _unconstrained_5pl(pred: np.ndarray, mos: np.ndarray) -> np.ndarray:
    """The free 5PL fit the report used to draw, on a grid over the scores' range."""
    from scipy import optimize

    from agentic_iqa.reports.metrics.logistic import _logistic5

    z = (pred - pred.mean()) / pred.std()
    start = [float(np.ptp(mos)), 1.0, 0.0, 0.0, float(np.mean(mos))]
    coefficients, _ = optimize.curve_fit(_logistic5, z, mos, p0=start, maxfev=20000)
    grid = np.linspace(z.min(), z.max(), 256)
    return _logistic5(z, *coefficients), _logistic5(grid, *coefficients)


def test_five_parameter_fit_is_monotone_where_a_free_one_bends() -> None:
    pred, mos = weak_trend_20()
    free_fitted, free_curve = _unconstrained_5pl(pred, mos)
    steps = np.diff(free_curve)
    # The free 5PL rises, then drops by over 20 MOS points inside the data's range.
    assert steps.max() > 0 and steps[steps < 0].sum() < -20
    free_plcc = plcc(free_fitted, mos)
    assert free_plcc == pytest.approx(0.832, abs=0.005)  # inflated from the raw 0.632
    fit = plcc_after_logistic(pred, mos)
    assert fit.form == "logistic5" and fit.fitted and fit.note is None
    assert np.all(np.diff(fit.curve(np.linspace(pred.min(), pred.max(), 500))) >= -1e-9)
    assert plcc(pred, mos) == pytest.approx(0.632, abs=0.001)
    assert plcc(pred, mos) < fit.plcc < free_plcc - 0.1
    b1, b2, _b3, b4, _b5 = fit.coefficients  # bounded: every part rises with the scores
    assert b1 >= 0 and 0 <= b2 <= 10 and b4 >= 0


def test_a_fit_that_is_not_monotone_on_the_data_falls_back(monkeypatch) -> None:
    """The check after fitting: a bent 5PL (as a free fit gives) is refused for the 4PL."""
    from agentic_iqa.reports.metrics import logistic

    pred, mos = weak_trend_20()
    real_fit = logistic._fit

    def bent(form, z, y, direction):
        if form == "logistic5":
            return (50.0, 3.0, 0.0, -40.0, 50.0), 0.0  # a logistic step on a falling line
        return real_fit(form, z, y, direction)

    monkeypatch.setattr(logistic, "_fit", bent)
    fit = plcc_after_logistic(pred, mos)
    assert fit.form == "logistic4"
    assert fit.note == (
        "5-parameter logistic fit is not monotone on the data's range: "
        "4-parameter logistic used instead of the 5-parameter logistic"
    )
    assert np.all(np.diff(fit.curve(np.linspace(pred.min(), pred.max(), 500))) >= -1e-9)

    def failing(form, z, y, direction):
        if form != "linear":
            raise RuntimeError("Optimal parameters not found")
        return real_fit(form, z, y, direction)

    monkeypatch.setattr(logistic, "_fit", failing)
    line = plcc_after_logistic(pred, mos)
    assert line.form == "linear" and line.plcc == pytest.approx(plcc(pred, mos))
    assert line.note.startswith(
        "5-parameter logistic fit failed (Optimal parameters not "
        "found); 4-parameter logistic fit failed"
    )


def test_correlation_report_names_the_fit() -> None:
    pred, mos = weak_trend_20()
    report = correlation_report(pred, mos, bootstrap=0)
    assert report["logistic_fit"] == "logistic5" and report["logistic_note"] is None
    assert report["plcc_logistic"] == pytest.approx(plcc_after_logistic(pred, mos).plcc)
    small = correlation_report(pred[:7], mos[:7], bootstrap=0)
    assert small["logistic_fit"] == "logistic3" and "7 points are too few" in small["logistic_note"]
    assert correlation_report([1, 2], [1, 2])["logistic_fit"] is None


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
    assert bootstrap_ci(srcc, pred, mos, n=200, seed=5) == bootstrap_ci(
        srcc, pred, mos, n=200, seed=5
    )
    looped = bootstrap_ci(lambda x, y: srcc(x, y), pred, mos, n=200, seed=5)
    assert bootstrap_ci(srcc, pred, mos, n=200, seed=5) == pytest.approx(looped, abs=1e-12)
    looped = bootstrap_ci(lambda x, y: plcc(x, y), pred, mos, n=200, seed=5)
    assert bootstrap_ci(plcc, pred, mos, n=200, seed=5) == pytest.approx(looped, abs=1e-12)


def test_bootstrap_of_250_items_brackets_the_estimates() -> None:
    """The size a job report bootstraps; its speed is measured by benchmarks/metrics.py."""
    pred, mos = noisy_monotone(250)
    for metric, reference in ((srcc, stats.spearmanr), (krcc, stats.kendalltau)):
        low, high = bootstrap_ci(metric, pred, mos, n=1000)
        estimate = reference(pred, mos)[0]
        assert low < estimate < high, metric.__name__
        assert 0.0 < high - low < 0.2, (metric.__name__, low, high)  # 250 items: a tight interval
    # Seeded: the same interval again, a different one for another seed.
    assert bootstrap_ci(krcc, pred, mos, n=1000) == bootstrap_ci(krcc, pred, mos, n=1000)
    assert bootstrap_ci(krcc, pred, mos, n=1000, seed=1) != bootstrap_ci(krcc, pred, mos, n=1000)


def test_bootstrap_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(srcc, [1, 2, 3], [1, 2, 3], confidence=1.5)
    assert all(math.isnan(v) for v in bootstrap_ci(srcc, [], []))


def test_correlation_report_has_estimates_and_intervals() -> None:
    pred, mos = noisy_monotone(80)
    report = correlation_report(
        list(pred) + [None, 3.0], list(mos) + [50.0, math.nan], bootstrap=200
    )
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


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("B", "B"),
        (" c ", "C"),
        ("(D)", "D"),
        ("A. Blurry", "A"),
        ("E) noise", "E"),
        ("A blurry photo", None),
        ("Unable to determine", None),
        (None, None),
        ("Z", None),
    ],
)
def test_answer_letter(text: str | None, letter: str | None) -> None:
    assert answer_letter(text) == letter


def test_mcq_accuracy_counts_only_known_truths() -> None:
    from agentic_iqa.reports.report import build_report

    def accuracy(predicted: list[str | None], truth: list[str | None]) -> tuple[float | None, int]:
        rows = [
            {
                "status": "done",
                "quality_score": None,
                "mos": None,
                "final_answer": p,
                "answer_truth": t,
            }
            for p, t in zip(predicted, truth, strict=True)
        ]
        mcq = build_report(rows, bootstrap=0)["mcq"]
        return (mcq["accuracy"], mcq["n"]) if mcq is not None else (None, 0)

    assert accuracy(["A", "b", "C. x", None, "D"], ["A", "B", "D", "C", None]) == (0.5, 4)
    assert accuracy(["A"], [None]) == (None, 0)
