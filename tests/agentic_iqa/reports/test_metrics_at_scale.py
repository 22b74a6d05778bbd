"""Correlations and their intervals on a million pairs, in seconds and bounded memory.

Above :data:`~agentic_iqa.reports.metrics.LARGE` pairs SRCC, PLCC and KRCC are computed without
scipy's copies (the same definitions: KRCC to the bit, the others to 1e-12); above
:data:`~agentic_iqa.reports.metrics.BOOTSTRAP_PAIRS` each resample draws that many pairs and is
scaled to the sample's size (m-out-of-n), which keeps the interval's width; below both, every
figure is what it always was.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from agentic_iqa.reports.metrics import (
    BOOTSTRAP_PAIRS,
    LARGE,
    average_ranks,
    bootstrap,
    bootstrap_ci,
    correlations,
    inversions,
    krcc,
    plcc,
    proportion_ci,
    srcc,
)
from tests.conftest import REPO

# Left out of the README's test command (CI runs it): bootstraps and correlations at a million
# pairs.
pytestmark = pytest.mark.slow


def monotone_with_ties(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores rounded to 0.01 (ties) and a MOS that follows them through a sigmoid, plus
    noise, rounded to 0.1."""
    rng = np.random.default_rng(seed)
    pred = np.round(rng.uniform(1.0, 5.0, n), 2)
    mos = np.round(100.0 / (1.0 + np.exp(-2.5 * (pred - 3.0))) + rng.normal(0.0, 8.0, n), 1)
    return pred, mos


def test_inversions_are_counted_as_pairs_out_of_order() -> None:
    rng = np.random.default_rng(3)
    for size in (0, 1, 2, 7, 300):
        for distinct in (1, 2, 5, size + 1):
            values = rng.integers(0, distinct, size)
            expected = sum(int((values[i] > values[i + 1 :]).sum()) for i in range(size))
            assert inversions(values) == expected, (size, distinct)


def test_many_pairs_give_scipys_correlations() -> None:
    pred, mos = monotone_with_ties(LARGE + 20_000)
    assert pred.size > LARGE
    assert krcc(pred, mos) == stats.kendalltau(pred, mos).statistic  # the same counts
    assert srcc(pred, mos) == pytest.approx(stats.spearmanr(pred, mos).statistic, abs=1e-12)
    assert plcc(pred, mos) == pytest.approx(stats.pearsonr(pred, mos).statistic, abs=1e-12)
    assert np.array_equal(average_ranks(pred), stats.rankdata(pred))


def test_srcc_resamples_are_ranked_as_rankdata_ranks_them() -> None:
    """Ranks from counts (no sort per resample) are exactly scipy's, ties included."""
    pred, _mos = monotone_with_ties(400)
    index = np.random.default_rng(1).integers(0, pred.size, size=(30, pred.size))
    dense = correlations.dense_ranks(pred)
    ranks = bootstrap._resampled_ranks(dense, int(dense.max()) + 1, index)
    assert np.array_equal(ranks, stats.rankdata(pred[index], axis=1))


@pytest.mark.parametrize("metric", [srcc, plcc, krcc])
def test_subsampled_intervals_keep_the_full_bootstraps_width(metric, monkeypatch) -> None:
    """4 x BOOTSTRAP_PAIRS pairs: the m-out-of-n interval (resamples of BOOTSTRAP_PAIRS, scaled
    by sqrt(m/n)) against the bootstrap that resamples all of them."""
    pred, mos = monotone_with_ties(4 * BOOTSTRAP_PAIRS, seed=2)
    estimate = metric(pred, mos)
    resamples = 200 if metric is krcc else 400
    low, high = bootstrap_ci(metric, pred, mos, n=resamples, seed=1)
    monkeypatch.setattr(bootstrap, "BOOTSTRAP_PAIRS", pred.size)
    full_low, full_high = bootstrap_ci(metric, pred, mos, n=resamples, seed=1)
    assert low < estimate < high and full_low < estimate < full_high
    assert (high - low) == pytest.approx(full_high - full_low, rel=0.25)
    assert abs((low + high) / 2 - (full_low + full_high) / 2) < 0.3 * (full_high - full_low)


def test_an_interval_narrows_as_the_square_root_of_the_pairs() -> None:
    """Resamples of the same size for 40,000 and 640,000 pairs: the interval is four times
    narrower for sixteen times the pairs, as the bootstrap of all of them would be."""
    small = monotone_with_ties(40_000, seed=4)
    large = monotone_with_ties(640_000, seed=4)
    narrow = bootstrap_ci(srcc, *large, n=300, seed=2)
    wide = bootstrap_ci(srcc, *small, n=300, seed=2)
    assert (narrow[1] - narrow[0]) * 4 == pytest.approx(wide[1] - wide[0], rel=0.25)


def test_accuracy_of_many_questions_is_drawn_binomially(monkeypatch) -> None:
    outcomes = np.random.default_rng(5).random(4 * BOOTSTRAP_PAIRS) < 0.7
    low, high = proportion_ci(outcomes, n=2000, seed=3)
    monkeypatch.setattr(bootstrap, "BOOTSTRAP_PAIRS", outcomes.size)
    full_low, full_high = proportion_ci(outcomes, n=2000, seed=3)
    assert (high - low) == pytest.approx(full_high - full_low, rel=0.1)
    assert low < outcomes.mean() < high


def test_a_correlation_report_of_400000_pairs_stays_within_memory() -> None:
    """scipy's correlations and an unbounded logistic fit took some 200 MB more than the
    pairs at this size (the fit alone 430 MB at a million); now a few arrays of it."""
    code = (
        "import json, resource, sys\nimport numpy as np\n"
        "from agentic_iqa.reports.metrics import correlation_report\n"
        "from scipy import optimize, stats\n"
        "rng = np.random.default_rng(0)\n"
        "pred = rng.uniform(1, 5, 400_000)\n"
        "mos = 100 / (1 + np.exp(-2.5 * (pred - 3))) + rng.normal(0, 8, pred.size)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "report = correlation_report(pred, mos, bootstrap=200)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'grown_mb': (after - before) / 1024, 'report': report}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    report = result["report"]
    assert result["grown_mb"] < 90, result["grown_mb"]
    assert report["n"] == 400_000 and report["logistic_fit"] == "logistic5"
    assert report["srcc_ci"][0] < report["srcc"] < report["srcc_ci"][1]
    assert report["plcc_logistic"] > report["plcc"] > 0.8
