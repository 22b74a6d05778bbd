"""How well predicted scores agree with human opinion (MOS), and how often MCQ answers are right.

The IQA literature reports SRCC (monotonic agreement), PLCC (linear agreement, usually after a
logistic fit that removes the non-linearity between a metric's scale and the MOS scale, as the
VQEG recommends) and KRCC. Point estimates on a few hundred images are noisy, so each comes
with a bootstrap confidence interval. The correlations themselves are scipy's; this module adds
the fit, the resampling and the bookkeeping for inputs too small or too flat to correlate.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# scipy (about half a second to import) is imported in the functions that use it: the package
# is imported by commands that never correlate anything (``eval status`` reads answer letters).

Metric = Callable[[np.ndarray, np.ndarray], float]

#: Above this many pairs the point estimates are computed by :func:`_lean_srcc`,
#: :func:`_lean_plcc` and :func:`_lean_krcc`: the same definitions as scipy's, in a few arrays
#: of the input's size (scipy's take 90 to 150 MB at a million pairs; a report of a million
#: items must stay within 300 MB).  Below it scipy's own, so every smaller job reports what it
#: always did.
LARGE = 50_000
#: Above this many pairs the logistic behind PLCC logistic is fitted on a seeded sample of this
#: many pairs (its PLCC is still computed on every pair): the bounded least-squares fit holds
#: several copies of its Jacobian, 400 MB at a million pairs, and five parameters are as well
#: determined by 50,000 points as by a million.
FIT_SAMPLE = 50_000
#: Above this many pairs (or images) each bootstrap resample draws this many (the m-out-of-n
#: bootstrap, Bickel, Götze and van Zwet 1997) and its deviation from the full sample's value is
#: scaled by sqrt(m/n): a statistic that is asymptotically normal (SRCC, PLCC, KRCC) varies as
#: 1/sqrt(size), so the interval keeps its width for n pairs, in a thousand resamples of 10,000
#: pairs (seconds) instead of a thousand of n (KRCC at a million pairs: minutes).  Shares
#: (accuracy) are drawn exactly instead: a resample's count of right answers is binomial.
BOOTSTRAP_PAIRS = 10_000


def _arrays(
    pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(pred, dtype=float)
    y = np.asarray(mos, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(
            f"pred and mos must be 1-D and of equal length, got shapes {x.shape} and {y.shape}"
        )
    return x, y


def _quiet(fn: Callable[[], Any]) -> Any:
    """scipy warns (and returns NaN) on constant input; callers here check for NaN instead."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def srcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (NaN when either side is constant)."""
    from scipy import stats

    x, y = _arrays(pred, mos)
    if x.size > LARGE:
        return _lean_srcc(x, y)
    return float(_quiet(lambda: stats.spearmanr(x, y).statistic))


def plcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Pearson linear correlation of the raw predictions (NaN when either side is constant)."""
    from scipy import stats

    x, y = _arrays(pred, mos)
    if x.size > LARGE:
        return _lean_plcc(x, y)
    return float(_quiet(lambda: stats.pearsonr(x, y).statistic))


def krcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Kendall rank correlation, tau-b (NaN when either side is constant)."""
    from scipy import stats

    x, y = _arrays(pred, mos)
    if x.size > LARGE:
        return _lean_krcc(x, y)
    return float(_quiet(lambda: stats.kendalltau(x, y).statistic))


# -- the same statistics for many pairs, in bounded memory ----------------------------------------


def _lean_plcc(x: np.ndarray, y: np.ndarray, *, own: bool = False) -> float:
    """Pearson's r as scipy computes it (centred, then divided by a norm taken over the largest
    deviation), in two arrays of the input's size; ``own``: x and y may be overwritten."""
    if (
        x.size < 2
        or np.all(x == x[0])
        or np.all(y == y[0])
        or not (np.isfinite(x).all() and np.isfinite(y).all())
    ):
        return math.nan
    xm = _unit(x, own=own)
    ym = _unit(y, own=own)
    return float(min(1.0, max(-1.0, float(np.dot(xm, ym)))))


def _unit(values: np.ndarray, *, own: bool = False) -> np.ndarray:
    """``values`` centred and divided by their norm, the norm taken of the centred values over
    their largest magnitude (no overflow), as scipy's pearsonr does; in place when ``own``."""
    mean = values.mean()
    centred = values if own else values.copy()
    centred -= mean
    largest = float(max(centred.max(), -centred.min()))
    scaled = centred / largest
    norm = largest * math.sqrt(float(np.dot(scaled, scaled)))
    del scaled
    centred /= norm
    return centred


def _sorted_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stable argsort of ``values``, where each run of equal values starts in that order,
    and each run's length."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    change = np.empty(values.size, dtype=bool)
    change[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=change[1:])
    del ordered
    starts = np.flatnonzero(change)
    del change
    sizes = np.diff(starts, append=values.size)
    return order, starts, sizes


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties averaged, equal to ``scipy.stats.rankdata`` (half-integers, so
    exactly), in a few arrays of the input's size."""
    order, starts, sizes = _sorted_runs(values)
    mean_rank = 0.5 * (starts + sizes + starts + 1)
    del starts
    ranks = np.empty(values.size, dtype=float)
    ranks[order] = np.repeat(mean_rank, sizes)
    return ranks


def _lean_srcc(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the average ranks, as scipy defines it."""
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return math.nan
    return _lean_plcc(average_ranks(x), average_ranks(y), own=True)


def _dense(values: np.ndarray) -> np.ndarray:
    """Each value's index among the distinct values, in order (int32: ids below 2**31)."""
    order, starts, sizes = _sorted_runs(values)
    del starts
    dense = np.empty(values.size, dtype=np.int32)
    dense[order] = np.repeat(np.arange(sizes.size, dtype=np.int32), sizes)
    return dense


def _tie_pairs(ordered: np.ndarray) -> int:
    """Pairs of equal values in a sorted array: the sum of t(t-1)/2 over its runs."""
    change = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    sizes = np.diff(np.concatenate(([0], change, [ordered.size])))
    return int((sizes * (sizes - 1) // 2).sum())


def inversions(values: np.ndarray) -> int:
    """Pairs i < j with ``values[i] > values[j]`` (non-negative integers below 2**31).

    Bit by bit from the highest, as a wavelet matrix is built: among values that agree on the
    bits above, every 1 before a 0 at this bit is an inversion; then each such group is
    partitioned stably, its 0s first, for the next bit.  Linear work per bit in int32 arrays,
    no sort: about 45 MB and a few seconds for a million values.
    """
    seq = np.asarray(values).astype(np.int32)
    n = seq.size
    if n < 2:
        return 0
    index = np.arange(n, dtype=np.int32)
    bit = np.empty(n, dtype=np.int32)
    change = np.empty(n, dtype=bool)
    total = 0
    for b in range(int(seq.max()).bit_length() - 1, -1, -1):
        np.right_shift(seq, b, out=bit)
        np.bitwise_and(bit, 1, out=bit)
        high = seq >> (b + 1)
        change[0] = True
        np.not_equal(high[1:], high[:-1], out=change[1:])
        del high
        starts = np.flatnonzero(change).astype(np.int32)
        group = np.cumsum(change, dtype=np.int32)
        group -= 1
        ones = np.cumsum(bit, dtype=np.int32)
        ones -= bit  # ones before each element
        ones -= ones[starts][group]  # ... within its group
        zero = bit == 0
        total += int(ones[zero].sum(dtype=np.int64))
        last = np.empty_like(starts)
        last[:-1] = starts[1:] - 1
        last[-1] = n - 1
        zeros_in = (last - starts + 1) - (ones[last] + bit[last])
        del last
        start = starts[group]
        dest = index - start
        dest -= ones  # a 0 goes after the 0s before it in its group
        dest += start
        np.copyto(dest, start + zeros_in[group] + ones, where=~zero)  # a 1 after all its 0s
        del start, group, zero, ones, starts, zeros_in
        moved = np.empty_like(seq)
        moved[dest] = seq
        seq = moved
        del dest
    return total


def _lean_krcc(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b as scipy computes it (the same integer counts of tied and discordant
    pairs, the same formula), discordant pairs counted by :func:`inversions`."""
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return math.nan
    size = x.size
    order = np.lexsort((y, x))  # by x, then y: within tied x no pair is discordant
    xs = x[order]
    xtie = _tie_pairs(xs)
    joint = xs[1:] != xs[:-1]
    del xs
    ys = y[order]
    del order
    joint |= ys[1:] != ys[:-1]
    joint = np.flatnonzero(joint) + 1
    sizes = np.diff(np.concatenate(([0], joint, [size])))
    ntie = int((sizes * (sizes - 1) // 2).sum())
    del joint, sizes
    dense = _dense(ys)
    del ys
    counts = np.bincount(dense)
    ytie = int((counts * (counts - 1) // 2).sum())
    del counts
    tot = (size * (size - 1)) // 2
    if xtie == tot or ytie == tot:
        return math.nan
    dis = inversions(dense)
    con_minus_dis = np.int64(tot - xtie - ytie + ntie - 2 * dis)
    tau = con_minus_dis / np.sqrt(np.int64(tot - xtie)) / np.sqrt(np.int64(tot - ytie))
    return float(min(1.0, max(-1.0, float(tau))))


# -- PLCC after a logistic fit --------------------------------------------------------------------


def _logistic5(z: np.ndarray, b1: float, b2: float, b3: float, b4: float, b5: float) -> np.ndarray:
    """VQEG / Sheikh et al. (2006): b1 (1/2 - 1/(1 + exp(b2 (z - b3)))) + b4 z + b5."""
    return b1 * (0.5 - 1.0 / (1.0 + np.exp(np.clip(b2 * (z - b3), -500, 500)))) + b4 * z + b5


def _logistic4(z: np.ndarray, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """(b1 - b2) / (1 + exp(-(z - b3) / |b4|)) + b2: monotone between the two plateaus."""
    return (b1 - b2) / (1.0 + np.exp(np.clip(-(z - b3) / (abs(b4) + 1e-12), -500, 500))) + b2


def _logistic3(z: np.ndarray, b1: float, b2: float, b3: float) -> np.ndarray:
    """b1 / (1 + exp(-b2 (z - b3))): a sigmoid from 0 to b1 (the fit adds the lowest MOS)."""
    return b1 / (1.0 + np.exp(np.clip(-b2 * (z - b3), -500, 500)))


def _linear(z: np.ndarray, b1: float, b2: float) -> np.ndarray:
    return b1 * z + b2


#: The fits tried, most flexible first; each is monotone by construction (bounded parameters)
#: and checked on the data's range after fitting; the next one is used when one fails.
FIT_FORMS: tuple[str, ...] = ("logistic5", "logistic4", "logistic3", "linear")
_MODELS: dict[str, Callable[..., np.ndarray]] = {
    "logistic5": _logistic5,
    "logistic4": _logistic4,
    "logistic3": _logistic3,
    "linear": _linear,
}
_PARAMETERS = {"logistic5": 5, "logistic4": 4, "logistic3": 3, "linear": 2}
#: A fit of k parameters needs this many points per parameter; with fewer it would all but
#: interpolate them, and its PLCC would say more about the curve than about the scores.
POINTS_PER_PARAMETER = 2
#: The steepest logistic fitted, per standard deviation of the predicted scores.
MAX_STEEPNESS = 10.0
_LABELS = {
    "logistic5": "5-parameter logistic",
    "logistic4": "4-parameter logistic",
    "logistic3": "3-parameter logistic",
    "linear": "linear fit",
}


def fit_label(form: str | None) -> str:
    """ "5-parameter logistic", "linear fit", or "no fit" for a form of :data:`FIT_FORMS`."""
    return _LABELS.get(form or "", "no fit")


@dataclass(frozen=True)
class LogisticFit:
    """PLCC after a monotone fit of predictions to MOS, or the raw PLCC with the reason no fit
    was possible.

    ``form`` is the fit used (one of :data:`FIT_FORMS`, or ``"none"``); ``note`` says why a
    simpler form than the one asked for was used, or why there is no fit.  The fit is made on
    standardised predictions ``(x - center) / scale`` so one set of starting values suits any
    score range; :meth:`curve` maps raw predictions through it (for plots).
    """

    plcc: float
    fitted: bool
    parameters: int
    coefficients: tuple[float, ...] = ()
    center: float = 0.0
    scale: float = 1.0
    note: str | None = None
    form: str = "none"
    #: Added to the model's output (the 3-parameter logistic starts at the lowest MOS).
    offset: float = 0.0

    @property
    def label(self) -> str:
        return fit_label(self.form if self.fitted else None)

    def curve(self, pred: Sequence[float] | np.ndarray) -> np.ndarray:
        """The fitted MOS for each prediction (the identity when there is no fit)."""
        x = np.asarray(pred, dtype=float)
        if not self.fitted:
            return x
        z = (x - self.center) / self.scale
        return _MODELS[self.form](z, *self.coefficients) + self.offset


def _start_and_bounds(
    form: str, y: np.ndarray, direction: float
) -> tuple[list[float], tuple[list[float], list[float]]]:
    """Starting values and bounds that keep ``form`` monotone in the trend's ``direction``.

    5PL: the logistic's amplitude b1 and the linear term b4 take the sign of the trend and the
    slope b2 is positive, so every part rises (or every part falls) with the score: a hump or
    a dip cannot be fitted to noise.  3PL: amplitude positive, slope with the trend.  The
    steepness is at most :data:`MAX_STEEPNESS` per standard deviation of the scores: a
    steeper logistic is a step between two neighbouring points, not a curve.
    """
    inf = np.inf
    steep = MAX_STEEPNESS
    spread = float(np.ptp(y)) or 1.0
    if form == "logistic5":
        sign_low, sign_high = (0.0, inf) if direction > 0 else (-inf, 0.0)
        return (
            [direction * spread, 1.0, 0.0, direction * 1e-6 * spread, float(np.mean(y))],
            ([sign_low, 0.0, -inf, sign_low, -inf], [sign_high, steep, inf, sign_high, inf]),
        )
    if form == "logistic4":
        high, low = float(np.max(y)), float(np.min(y))
        first, second = (high, low) if direction > 0 else (low, high)
        return [first, second, 0.0, 1.0], ([-inf, -inf, -inf, 1.0 / steep], [inf, inf, inf, inf])
    # logistic3
    slope_low, slope_high = (0.0, steep) if direction > 0 else (-steep, 0.0)
    return ([spread, direction, 0.0], ([0.0, slope_low, -inf], [inf, slope_high, inf]))


def _fit(
    form: str, z: np.ndarray, y: np.ndarray, direction: float
) -> tuple[tuple[float, ...], float]:
    """The coefficients of ``form`` fitted to (z, y), and the offset added to the model."""
    if form == "linear":
        slope, intercept = np.polyfit(z, y, 1)
        return (float(slope), float(intercept)), 0.0
    from scipy import optimize

    offset = float(np.min(y)) if form == "logistic3" else 0.0
    start, bounds = _start_and_bounds(form, y, direction)
    with warnings.catch_warnings():
        # Only the fit is used, so "covariance could not be estimated" does not matter.
        warnings.simplefilter("ignore")
        coefficients, _ = optimize.curve_fit(
            _MODELS[form], z, y - offset, p0=start, bounds=bounds, maxfev=20000
        )
    return tuple(float(c) for c in coefficients), offset


def _monotone_problem(values: np.ndarray, direction: float, spread: float) -> str | None:
    """Why fitted values on a grid over the data's range are not a usable monotone curve."""
    if not np.all(np.isfinite(values)):
        return "not finite"
    steps = np.diff(values) * direction
    tolerance = 1e-9 * (spread or 1.0)
    if np.ptp(values) <= tolerance:
        return "flat"
    if np.any(steps < -tolerance):
        return "not monotone on the data's range"
    return None


def plcc_after_logistic(
    pred: Sequence[float] | np.ndarray,
    mos: Sequence[float] | np.ndarray,
    *,
    parameters: int = 5,
    rank: float | None = None,
) -> LogisticFit:
    """PLCC between MOS and predictions mapped through a monotone fitted curve.

    The VQEG's 5-parameter logistic first (``parameters`` 4 or 3 start lower), with bounds that
    keep it monotone in the direction of the trend (a free 5PL on a few noisy points bends
    into humps that inflate PLCC); the fitted curve is checked on the data's range.  When a fit
    does not converge, is not monotone or flat, or there are fewer than two points per
    parameter, the next simpler one is used: 4-, then 3-parameter logistic, then a straight
    line (whose PLCC is the raw PLCC's magnitude).  ``form`` says which fit was used and
    ``note`` why the first choice was not; constant input gives the raw PLCC (NaN) and
    ``fitted=False``.  ``rank``: the SRCC of (pred, mos) when already known (its sign is the
    trend's).  Above :data:`FIT_SAMPLE` pairs the curve is fitted on a seeded sample of that
    many and checked and correlated on them all.
    """
    if parameters not in (3, 4, 5):
        raise ValueError(f"parameters must be 3, 4 or 5, got {parameters}")
    x, y = _arrays(pred, mos)
    raw = plcc(x, y)
    first = f"logistic{parameters}"
    center, scale = (float(np.mean(x)), float(np.std(x))) if x.size else (0.0, 0.0)
    if x.size < 3 or not math.isfinite(raw) or scale == 0.0 or np.ptp(y) == 0.0:
        note: str | None = (
            f"{x.size} points cannot be fitted: raw PLCC"
            if x.size < 3
            else "constant input: no fit"
        )
        return LogisticFit(plcc=raw, fitted=False, parameters=parameters, note=note)
    z = (x - center) / scale
    direction = 1.0 if (srcc(x, y) if rank is None else rank) >= 0 else -1.0
    sample = (
        np.sort(np.random.default_rng(0).choice(x.size, FIT_SAMPLE, replace=False))
        if x.size > FIT_SAMPLE
        else slice(None)
    )
    grid = np.linspace(float(np.min(z)), float(np.max(z)), 256)
    spread = float(np.ptp(y))
    problems: list[str] = []
    for form in FIT_FORMS[FIT_FORMS.index(first) :]:
        count = _PARAMETERS[form]
        if x.size < POINTS_PER_PARAMETER * count and form != "linear":
            if not problems:
                problems.append(
                    f"{x.size} points are too few for the {fit_label(form)} "
                    f"(it needs {POINTS_PER_PARAMETER * count})"
                )
            continue
        try:
            coefficients, offset = _fit(form, z[sample], y[sample], direction)
        except (RuntimeError, ValueError, TypeError, np.linalg.LinAlgError) as exc:
            problems.append(f"{fit_label(form)} fit failed ({str(exc)[:80]})")
            continue
        model = _MODELS[form]
        # A line is monotone whatever its slope: its sign may differ from the rank trend's.
        trend = (1.0 if coefficients[0] >= 0 else -1.0) if form == "linear" else direction
        problem = _monotone_problem(model(grid, *coefficients) + offset, trend, spread)
        if problem is not None:
            problems.append(f"{fit_label(form)} fit is {problem}")
            continue
        value = plcc(model(z, *coefficients) + offset, y)
        if not math.isfinite(value):
            problems.append(f"{fit_label(form)} fit gives no correlation")
            continue
        note = (
            (f"{'; '.join(problems)}: {fit_label(form)} used instead of the {fit_label(first)}")
            if problems
            else None
        )
        return LogisticFit(
            plcc=value,
            fitted=True,
            parameters=count,
            coefficients=coefficients,
            center=center,
            scale=scale,
            note=note,
            form=form,
            offset=offset,
        )
    return LogisticFit(
        plcc=raw, fitted=False, parameters=parameters, note=f"{'; '.join(problems)}: raw PLCC"
    )


# -- bootstrap ------------------------------------------------------------------------------------


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
        dense_x, dense_y = _dense(pred), _dense(mos)
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


#: Metrics with a vectorised form over a whole batch of resamples (the rest are looped).
_BATCHED: dict[Callable[..., float], Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    srcc: _rowwise_spearman,
    plcc: _rowwise_pearson,
}


def metric_rows(metric_fn: Callable[..., float], pred: np.ndarray, mos: np.ndarray) -> np.ndarray:
    """``metric_fn`` of each row of ``pred`` against the same row of ``mos`` (2-D: one
    resample per row); SRCC and PLCC for all rows at once, other metrics row by row."""
    batched = _BATCHED.get(metric_fn)
    if batched is not None:
        return batched(pred, mos)
    return np.array([metric_fn(x, y) for x, y in zip(pred, mos, strict=True)])


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
    x, y = _arrays(pred, mos)
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


# -- reports --------------------------------------------------------------------------------------


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def correlation_report(
    pred: Sequence[float | None] | np.ndarray,
    mos: Sequence[float | None] | np.ndarray,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    logistic: bool = True,
) -> dict[str, Any]:
    """SRCC, PLCC, logistic PLCC and KRCC with 95% bootstrap intervals, as JSON-able data.

    ``logistic_fit`` names the monotone fit behind ``plcc_logistic`` (``"logistic5"``,
    ``"logistic4"``, ``"logistic3"`` or ``"linear"``; see :func:`plcc_after_logistic`).

    Pairs where either side is None or not finite are dropped (``n`` counts those kept). With
    fewer than 3 pairs, or a constant side, every value is None and ``reason`` says why;
    ``bootstrap=0`` skips the intervals; ``logistic=False`` the fit (``plcc_logistic`` None:
    seconds at 50,000 pairs, for a caller that shows only SRCC, PLCC and KRCC).
    """
    x, y = _arrays(_floats(pred), _floats(mos))
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    report: dict[str, Any] = {
        "n": int(x.size),
        "srcc": None,
        "plcc": None,
        "plcc_logistic": None,
        "krcc": None,
        "srcc_ci": None,
        "plcc_ci": None,
        "krcc_ci": None,
        "logistic_note": None,
        "logistic_fit": None,
        "reason": None,
    }
    if x.size < 3:
        report["reason"] = f"{x.size} scored item(s) with MOS: at least 3 are needed"
        return report
    if np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        side = "predicted scores" if np.ptp(x) == 0.0 else "MOS values"
        report["reason"] = f"all {side} are equal: correlation is undefined"
        return report
    estimates = {"srcc": srcc(x, y), "plcc": plcc(x, y), "krcc": krcc(x, y)}
    report.update(
        srcc=_finite_or_none(estimates["srcc"]),
        plcc=_finite_or_none(estimates["plcc"]),
        krcc=_finite_or_none(estimates["krcc"]),
    )
    if logistic:
        fit = plcc_after_logistic(x, y, rank=estimates["srcc"])
        report.update(
            plcc_logistic=_finite_or_none(fit.plcc),
            logistic_note=fit.note,
            logistic_fit=fit.form if fit.fitted else None,
        )
    if bootstrap > 0:
        for name, metric in (("srcc", srcc), ("plcc", plcc), ("krcc", krcc)):
            low, high = bootstrap_ci(metric, x, y, n=bootstrap, seed=seed, estimate=estimates[name])
            report[f"{name}_ci"] = (
                [low, high] if math.isfinite(low) and math.isfinite(high) else None
            )
    return report


def _floats(values: Sequence[float | None] | np.ndarray) -> np.ndarray:
    """Values as a float array, None as NaN (an array of floats is taken as it is)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values.astype(float, copy=False)
    return np.array([math.nan if v is None else v for v in values], dtype=float)


#: The letters a manifest's ``answer`` may hold, without option texts.
_ANY_LETTER = {letter: "" for letter in "ABCDEFGH"}


def answer_letter(text: str | None) -> str | None:
    """The option letter an answer gives ("B", "b", "(B)", "B. Blurry", "Answer: B"), else None.

    The agent's own parser decides (:func:`agentic_iqa.options.parse_option`), so the
    report reads answers exactly as the summarizer does: "A blurry photo" is not a letter.
    """
    from ..options import parse_option

    return parse_option(text, _ANY_LETTER)


def mcq_accuracy(
    predicted: Sequence[str | None], truth: Sequence[str | None]
) -> tuple[float | None, int]:
    """Share of questions answered with the right letter, over those whose truth is known.

    Returns (accuracy, n); accuracy is None when no truth is known. An unanswered question or
    an answer that is not a letter counts as wrong.
    """
    if len(predicted) != len(truth):
        raise ValueError(f"predicted and truth differ in length: {len(predicted)} and {len(truth)}")
    known = [
        (answer_letter(p), answer_letter(t))
        for p, t in zip(predicted, truth, strict=True)
        if answer_letter(t) is not None
    ]
    if not known:
        return None, 0
    correct = sum(1 for p, t in known if p == t)
    return correct / len(known), len(known)


@dataclass(frozen=True)
class McqTally:
    """MCQ outcomes over every question that was run, as lm-evaluation-harness and VLMEvalKit
    count them: an item that failed, or finished without a letter ("Unable to determine", an
    unparseable reply), is a wrong answer, not one left out; otherwise a job where half the
    items fail could report 100 %.  Answered-only accuracy is kept beside it."""

    correct: int = 0
    #: Questions answered with a letter (right or wrong).
    answered: int = 0
    #: Items that finished without a letter.
    no_answer: int = 0
    #: Items that failed: no answer at all.
    failed: int = 0

    @property
    def questions(self) -> int:
        """Every question counted: answered, without an answer, failed."""
        return self.answered + self.no_answer + self.failed

    @property
    def accuracy(self) -> float | None:
        """Right answers over every question counted (the headline)."""
        return self.correct / self.questions if self.questions else None

    @property
    def answered_accuracy(self) -> float | None:
        """Right answers over the questions answered with a letter."""
        return self.correct / self.answered if self.answered else None


def mcq_tally(
    predicted: Sequence[str | None],
    truth: Sequence[str | None],
    failed: Sequence[bool] | None = None,
) -> McqTally:
    """Count each question whose truth is a letter: right, answered wrong, no letter given, or
    its item failed (``failed[i]``, whatever ``predicted[i]`` says)."""
    failed = failed if failed is not None else [False] * len(predicted)
    if not len(predicted) == len(truth) == len(failed):
        raise ValueError(
            f"predicted, truth and failed differ in length: {len(predicted)}, "
            f"{len(truth)} and {len(failed)}"
        )
    correct = answered = no_answer = lost = 0
    for answer, true, broke in zip(predicted, truth, failed, strict=True):
        letter = answer_letter(true)
        if letter is None:
            continue
        if broke:
            lost += 1
            continue
        given = answer_letter(answer)
        if given is None:
            no_answer += 1
            continue
        answered += 1
        correct += given == letter
    return McqTally(correct=correct, answered=answered, no_answer=no_answer, failed=lost)


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
