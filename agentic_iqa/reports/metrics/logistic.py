"""Fit a monotone logistic between scores and MOS, and compute PLCC after it.

The fit removes the non-linearity between a metric's scale and the MOS scale, as the VQEG
recommends: a 5-parameter logistic, falling back to 4, 3 parameters or a line where the data
cannot support it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .correlations import paired_arrays, plcc, srcc

#: Above this many pairs the logistic behind PLCC logistic is fitted on a seeded sample of this
#: many pairs (its PLCC is still computed on every pair): the bounded least-squares fit holds
#: several copies of its Jacobian, 400 MB at a million pairs, and five parameters are as well
#: determined by 50,000 points as by a million.
FIT_SAMPLE = 50_000


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
    x, y = paired_arrays(pred, mos)
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
