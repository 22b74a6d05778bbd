"""Compute bootstrap intervals: resampled correlations (m out of n above a size) and shares.

A statistic on a few hundred images is noisy, so each comes with a percentile bootstrap
interval; resamples are drawn in chunks so their index matrices stay within tens of MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .correlations import dense_ranks, paired_arrays, plcc, srcc

#: Above this many pairs (or images) each bootstrap resample draws this many (the m-out-of-n
#: bootstrap, Bickel, Götze and van Zwet 1997) and its deviation from the full sample's value is
#: scaled by sqrt(m/n): a statistic that is asymptotically normal (SRCC, PLCC, KRCC) varies as
#: 1/sqrt(size), so the interval keeps its width for n pairs, in a thousand resamples of 10,000
#: pairs (seconds) instead of a thousand of n (KRCC at a million pairs: minutes).  Shares
#: (accuracy) are drawn exactly instead: a resample's count of right answers is binomial.
BOOTSTRAP_PAIRS = 10_000


def _rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row of x with the same row of y (NaN for a flat row)."""
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    denominator = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip((xc * yc).sum(axis=1) / denominator, -1.0, 1.0)


def _rowwise_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman per row: Pearson of the (tie-averaged) ranks, as scipy defines it."""
    from scipy import stats

    return _rowwise_pearson(stats.rankdata(x, axis=1), stats.rankdata(y, axis=1))


def _resampled_ranks(dense: np.ndarray, distinct: int, index: np.ndarray) -> np.ndarray:
    """The tie-averaged ranks of each resample (a row of ``index``), from the values' dense ids:
    a value's rank is the count of drawn values below it plus the mean position among its equals,
    so no row is sorted.  Half-integers, hence exactly what ``rankdata`` gives the resample."""
    rows = index.shape[0]
    ids = dense[index]
    shifted = ids + (np.arange(rows, dtype=np.int64) * distinct)[:, None]
    counts = np.bincount(shifted.ravel(), minlength=rows * distinct).reshape(rows, distinct)
    del shifted
    average = np.cumsum(counts, axis=1) - (counts - 1) / 2.0
    del counts
    return np.take_along_axis(average, ids, axis=1)


def resampler(
    metric_fn: Callable[..., float], pred: np.ndarray, mos: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """``metric_fn`` of each resample of (pred, mos), a resample being a row of positions.

    SRCC ranks every resample at once from the values' dense ids (:func:`_resampled_ranks`)
    where a resample is as large as the sample (above :data:`BOOTSTRAP_PAIRS` it sorts each
    smaller resample), PLCC takes all rows at once, any other metric is called per row.
    """
    if metric_fn is srcc and pred.size > BOOTSTRAP_PAIRS:
        return _by_rows(lambda index: _rowwise_spearman(pred[index], mos[index]))
    if metric_fn is srcc:
        dense_x, dense_y = dense_ranks(pred), dense_ranks(mos)
        span_x, span_y = int(dense_x.max(initial=-1)) + 1, int(dense_y.max(initial=-1)) + 1
        return lambda index: _rowwise_pearson(
            _resampled_ranks(dense_x, span_x, index), _resampled_ranks(dense_y, span_y, index)
        )
    if metric_fn is plcc:
        return _by_rows(lambda index: _rowwise_pearson(pred[index], mos[index]))
    return lambda index: np.array([metric_fn(pred[row], mos[row]) for row in index])


#: Cells of resamples ranked or correlated at once (a few MB of arrays; each row's value is its
#: own, whatever rows are computed beside it).
_ROWS_CELLS = 100_000


def _by_rows(draws: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``draws`` of an index matrix, a few rows at a time (ranks and deviations of 50 rows of
    10,000 at once take some 30 MB)."""

    def rows(index: np.ndarray) -> np.ndarray:
        step = max(1, _ROWS_CELLS // max(1, index.shape[1]))
        if index.shape[0] <= step:
            return draws(index)
        return np.concatenate(
            [draws(index[start : start + step]) for start in range(0, index.shape[0], step)]
        )

    return rows


#: Index matrices of at most this many cells (int64: 4 MB), so that a resampled metric's
#: arrays stay within a few tens of MB whatever the size.
_CHUNK_CELLS = 500_000


def draw_resamples(
    draws: Callable[[np.ndarray], np.ndarray],
    size: int,
    n: int,
    seed: int,
    estimate: float | None = None,
) -> np.ndarray:
    """``draws`` of ``n`` resamples of ``size`` positions (rows of an index matrix), the finite
    ones; above :data:`BOOTSTRAP_PAIRS` positions each resample draws that many and its
    deviation from ``estimate`` (the full sample's value) is scaled by sqrt(m/size)."""
    rng = np.random.default_rng(seed)
    drawn = min(size, BOOTSTRAP_PAIRS)
    chunk = max(1, _CHUNK_CELLS // drawn)
    values = np.concatenate(
        [
            draws(rng.integers(0, size, size=(min(chunk, n - start), drawn)))
            for start in range(0, n, chunk)
        ]
    )
    values = values[np.isfinite(values)]
    if drawn < size and estimate is not None and math.isfinite(estimate):
        values = estimate + math.sqrt(drawn / size) * (values - estimate)
    return values


def bootstrap_ci(
    metric_fn: Callable[..., float],
    pred: Sequence[float] | np.ndarray,
    mos: Sequence[float] | np.ndarray,
    n: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    estimate: float | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric_fn(pred, mos)``, resampling pairs.

    Deterministic for a given seed. Resamples where the metric is undefined (e.g. all values
    equal) are left out; (NaN, NaN) when none is defined. SRCC and PLCC are computed for all
    resamples at once; other metrics are called once per resample.  Above
    :data:`BOOTSTRAP_PAIRS` pairs, the m-out-of-n bootstrap around ``estimate`` (computed
    here when not given).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    x, y = paired_arrays(pred, mos)
    if x.size == 0:
        return math.nan, math.nan
    if x.size > BOOTSTRAP_PAIRS and estimate is None:
        estimate = metric_fn(x, y)
    values = draw_resamples(resampler(metric_fn, x, y), x.size, n, seed, estimate)
    return _percentiles(values, confidence)


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of finite draws; (NaN, NaN) without any."""
    if values.size == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def proportion_ci(
    outcomes: Sequence[bool] | np.ndarray, n: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of a share (accuracy) over ``outcomes`` resampled with
    replacement, as the correlations' intervals are; None with no outcome or ``n`` < 1."""
    values = np.asarray(outcomes, dtype=float)
    if values.size == 0 or n < 1:
        return None
    rng = np.random.default_rng(seed)
    if values.size > BOOTSTRAP_PAIRS:  # a resample's right answers are binomial: drawn so
        shares = rng.binomial(values.size, float(values.mean()), size=n) / values.size
        return _percentiles(shares, confidence)
    chunk = max(1, 2_000_000 // values.size)
    means = np.concatenate(
        [
            values[rng.integers(0, values.size, size=(min(chunk, n - start), values.size))].mean(
                axis=1
            )
            for start in range(0, n, chunk)
        ]
    )
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)
