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


def _arrays(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(pred, dtype=float)
    y = np.asarray(mos, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"pred and mos must be 1-D and of equal length, got shapes "
                         f"{x.shape} and {y.shape}")
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
    return float(_quiet(lambda: stats.spearmanr(x, y).statistic))


def plcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Pearson linear correlation of the raw predictions (NaN when either side is constant)."""
    from scipy import stats

    x, y = _arrays(pred, mos)
    return float(_quiet(lambda: stats.pearsonr(x, y).statistic))


def krcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Kendall rank correlation, tau-b (NaN when either side is constant)."""
    from scipy import stats

    x, y = _arrays(pred, mos)
    return float(_quiet(lambda: stats.kendalltau(x, y).statistic))


# -- PLCC after a logistic fit --------------------------------------------------------------------


def _logistic5(z: np.ndarray, b1: float, b2: float, b3: float, b4: float, b5: float
               ) -> np.ndarray:
    """VQEG / Sheikh et al. (2006): b1 (1/2 - 1/(1 + exp(b2 (z - b3)))) + b4 z + b5."""
    return b1 * (0.5 - 1.0 / (1.0 + np.exp(np.clip(b2 * (z - b3), -500, 500)))) + b4 * z + b5


def _logistic4(z: np.ndarray, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """(b1 - b2) / (1 + exp(-(z - b3) / |b4|)) + b2: monotone between the two plateaus."""
    return (b1 - b2) / (1.0 + np.exp(np.clip(-(z - b3) / (abs(b4) + 1e-12), -500, 500))) + b2


@dataclass(frozen=True)
class LogisticFit:
    """PLCC after fitting predictions to MOS, or the raw PLCC with the reason the fit failed.

    The fit is made on standardised predictions ``(x - center) / scale`` so one set of starting
    values suits any score range; :meth:`curve` maps raw predictions through it (for plots).
    """

    plcc: float
    fitted: bool
    parameters: int
    coefficients: tuple[float, ...] = ()
    center: float = 0.0
    scale: float = 1.0
    note: str | None = None

    def curve(self, pred: Sequence[float] | np.ndarray) -> np.ndarray:
        """The fitted MOS for each prediction (the identity when the fit failed)."""
        x = np.asarray(pred, dtype=float)
        if not self.fitted:
            return x
        model = _logistic5 if self.parameters == 5 else _logistic4
        return model((x - self.center) / self.scale, *self.coefficients)


def plcc_after_logistic(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray,
                        *, parameters: int = 5) -> LogisticFit:
    """PLCC between MOS and predictions mapped through a fitted 5- (or 4-) parameter logistic.

    Falls back to the raw PLCC, with ``fitted=False`` and a ``note`` saying why, when the fit
    does not converge, there are fewer points than parameters, or the fitted values are flat.
    """
    if parameters not in (4, 5):
        raise ValueError(f"parameters must be 4 or 5, got {parameters}")
    x, y = _arrays(pred, mos)
    raw = plcc(x, y)

    def fallback(note: str) -> LogisticFit:
        return LogisticFit(plcc=raw, fitted=False, parameters=parameters, note=note)

    if x.size <= parameters:
        return fallback(f"{x.size} points cannot fit {parameters} parameters: raw PLCC")
    center, scale = float(np.mean(x)), float(np.std(x))
    if not math.isfinite(raw) or scale == 0.0:
        return fallback("constant input: no fit")
    z = (x - center) / scale
    direction = 1.0 if srcc(x, y) >= 0 else -1.0
    spread = float(np.ptp(y)) or 1.0
    if parameters == 5:
        model: Callable[..., np.ndarray] = _logistic5
        start = [direction * spread, 1.0, 0.0, 0.0, float(np.mean(y))]
    else:
        model = _logistic4
        high, low = float(np.max(y)), float(np.min(y))
        start = [high, low, 0.0, 1.0] if direction > 0 else [low, high, 0.0, 1.0]
    from scipy import optimize

    try:
        with warnings.catch_warnings():
            # Only the fit is used, so "covariance could not be estimated" does not matter.
            warnings.simplefilter("ignore")
            coefficients, _ = optimize.curve_fit(model, z, y, p0=start, maxfev=20000)
    except (RuntimeError, ValueError, TypeError) as exc:
        return fallback(f"logistic fit failed ({exc}): raw PLCC")
    fitted_values = model(z, *coefficients)
    if not np.all(np.isfinite(fitted_values)) or np.ptp(fitted_values) == 0.0:
        return fallback("logistic fit is flat or not finite: raw PLCC")
    value = plcc(fitted_values, y)
    return LogisticFit(plcc=value, fitted=True, parameters=parameters,
                       coefficients=tuple(float(c) for c in coefficients),
                       center=center, scale=scale)


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


#: Metrics with a vectorised form over a whole batch of resamples (the rest are looped).
_BATCHED: dict[Callable[..., float], Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    srcc: _rowwise_spearman,
    plcc: _rowwise_pearson,
}


def bootstrap_ci(metric_fn: Callable[..., float], pred: Sequence[float] | np.ndarray,
                 mos: Sequence[float] | np.ndarray, n: int = 1000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric_fn(pred, mos)``, resampling pairs.

    Deterministic for a given seed. Resamples where the metric is undefined (e.g. all values
    equal) are left out; (NaN, NaN) when none is defined. SRCC and PLCC are computed for all
    resamples at once; other metrics are called once per resample.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    x, y = _arrays(pred, mos)
    if x.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    batched = _BATCHED.get(metric_fn)
    values = np.empty(n)
    chunk = max(1, 2_000_000 // x.size)  # keep each index matrix to a few tens of MB
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        index = rng.integers(0, x.size, size=(stop - start, x.size))
        if batched is not None:
            values[start:stop] = batched(x[index], y[index])
        else:
            values[start:stop] = [metric_fn(x[row], y[row]) for row in index]
    values = values[np.isfinite(values)]
    if values.size == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


# -- reports --------------------------------------------------------------------------------------


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def correlation_report(pred: Sequence[float | None] | np.ndarray,
                       mos: Sequence[float | None] | np.ndarray, *, bootstrap: int = 1000,
                       seed: int = 0) -> dict[str, Any]:
    """SRCC, PLCC, logistic PLCC and KRCC with 95% bootstrap intervals, as JSON-able data.

    Pairs where either side is None or not finite are dropped (``n`` counts those kept). With
    fewer than 3 pairs, or a constant side, every value is None and ``reason`` says why;
    ``bootstrap=0`` skips the intervals.
    """
    x = np.array([math.nan if v is None else v for v in pred], dtype=float)
    y = np.array([math.nan if v is None else v for v in mos], dtype=float)
    x, y = _arrays(x, y)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    report: dict[str, Any] = {
        "n": int(x.size), "srcc": None, "plcc": None, "plcc_logistic": None, "krcc": None,
        "srcc_ci": None, "plcc_ci": None, "krcc_ci": None, "logistic_note": None,
        "reason": None,
    }
    if x.size < 3:
        report["reason"] = f"{x.size} scored item(s) with MOS: at least 3 are needed"
        return report
    if np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        side = "predicted scores" if np.ptp(x) == 0.0 else "MOS values"
        report["reason"] = f"all {side} are equal: correlation is undefined"
        return report
    fit = plcc_after_logistic(x, y)
    report.update(srcc=_finite_or_none(srcc(x, y)), plcc=_finite_or_none(plcc(x, y)),
                  plcc_logistic=_finite_or_none(fit.plcc), krcc=_finite_or_none(krcc(x, y)),
                  logistic_note=fit.note)
    if bootstrap > 0:
        for name, metric in (("srcc", srcc), ("plcc", plcc), ("krcc", krcc)):
            low, high = bootstrap_ci(metric, x, y, n=bootstrap, seed=seed)
            report[f"{name}_ci"] = ([low, high] if math.isfinite(low) and math.isfinite(high)
                                    else None)
    return report


#: The letters a manifest's ``answer`` may hold, without option texts.
_ANY_LETTER = {letter: "" for letter in "ABCDEFGH"}


def answer_letter(text: str | None) -> str | None:
    """The option letter an answer gives ("B", "b", "(B)", "B. Blurry", "Answer: B"), else None.

    The agent's own parser decides (:func:`agentic_iqa.agents.answers.parse_option`), so the
    report reads answers exactly as the summarizer does: "A blurry photo" is not a letter.
    """
    from ..agents.answers import parse_option

    return parse_option(text, _ANY_LETTER)


def mcq_accuracy(predicted: Sequence[str | None], truth: Sequence[str | None]
                 ) -> tuple[float | None, int]:
    """Share of questions answered with the right letter, over those whose truth is known.

    Returns (accuracy, n); accuracy is None when no truth is known. An unanswered question or
    an answer that is not a letter counts as wrong.
    """
    if len(predicted) != len(truth):
        raise ValueError(f"predicted and truth differ in length: {len(predicted)} and "
                         f"{len(truth)}")
    known = [(answer_letter(p), answer_letter(t)) for p, t in zip(predicted, truth, strict=True)
             if answer_letter(t) is not None]
    if not known:
        return None, 0
    correct = sum(1 for p, t in known if p == t)
    return correct / len(known), len(known)
