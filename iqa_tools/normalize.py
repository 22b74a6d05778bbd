"""Map raw tool scores onto the common [1, 5] quality scale.

Three forms, chosen per tool in the metadata:

``logistic5``  f(x) = β1·(½ − 1/(1 + exp(β2·(x − β3)))) + β4·x + β5
    The standard five-parameter logistic (Sheikh et al. 2006) with the paper's Table 5 values.
    The paper prints the denominator without "1 +": that is a typo (it yields −3e8 for FSIM).
``logistic4``  f(x) = (β1 − β2) / (1 + exp(−(x − β3)/|β4|)) + β2
    The four-parameter form of the design notes.
``linear``     f(x) maps ``x_at_1`` to 1 and ``x_at_5`` to 5 (either order: lower-is-better
    tools put the larger raw value at 1).

All forms are evaluated with an overflow-free sigmoid (TReS has β2 = 6559, so a naive
``exp`` overflows for ordinary inputs) and clipped to [1, 5].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

# No numpy at import time: the catalog checks every curve when it loads (``tools list``,
# ``--help`` of commands that name tools), and that check is plain Python.

SCALE_MIN = 1.0
SCALE_MAX = 5.0

FORMS: dict[str, tuple[str, ...]] = {
    "logistic5": ("beta1", "beta2", "beta3", "beta4", "beta5"),
    "logistic4": ("beta1", "beta2", "beta3", "beta4"),
    "linear": ("x_at_1", "x_at_5"),
}


def sigmoid(z: float) -> float:
    """1 / (1 + exp(−z)) without overflow for any finite or infinite z."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def logistic5(
    x: float, beta1: float, beta2: float, beta3: float, beta4: float, beta5: float
) -> float:
    # 1/(1+exp(β2(x−β3))) is sigmoid(−β2(x−β3)).
    return beta1 * (0.5 - sigmoid(-beta2 * (x - beta3))) + beta4 * x + beta5


def logistic4(x: float, beta1: float, beta2: float, beta3: float, beta4: float) -> float:
    if beta4 == 0:
        raise ValueError("logistic4 needs a non-zero beta4")
    return (beta1 - beta2) * sigmoid((x - beta3) / abs(beta4)) + beta2


def linear(x: float, x_at_1: float, x_at_5: float) -> float:
    if x_at_1 == x_at_5:
        raise ValueError("linear mapping needs x_at_1 != x_at_5")
    return SCALE_MIN + (x - x_at_1) * (SCALE_MAX - SCALE_MIN) / (x_at_5 - x_at_1)


_FUNCTIONS: dict[str, Callable[..., float]] = {
    "logistic5": logistic5,
    "logistic4": logistic4,
    "linear": linear,
}


def clip_to_scale(value: float) -> float:
    return min(SCALE_MAX, max(SCALE_MIN, value))


def normalize(raw: float, form: str, params: Mapping[str, float]) -> float:
    """Map one raw score onto [1, 5]. Raises ``ValueError`` for a non-finite raw score."""
    if not math.isfinite(raw):
        raise ValueError(f"cannot normalize a non-finite score ({raw})")
    try:
        function = _FUNCTIONS[form]
    except KeyError:
        raise ValueError(f"unknown normalization form {form!r}; known: {sorted(FORMS)}") from None
    value = function(raw, **{name: float(params[name]) for name in FORMS[form]})
    return clip_to_scale(value)


def monotonicity_violations(
    form: str,
    params: Mapping[str, float],
    low: float,
    high: float,
    *,
    lower_is_better: bool,
    samples: int = 2001,
    tolerance: float = 1e-9,
) -> list[tuple[float, float]]:
    """Sub-intervals of ``[low, high]`` where the *unclipped* curve runs the wrong way.

    Higher-is-better tools must map to a non-decreasing curve, lower-is-better ones to a
    non-increasing curve.  Published fits are not always monotone (CKDN near 1.0, TReS's
    near-step at β3): we report that rather than hide it.
    """
    function = _FUNCTIONS[form]
    args = {name: float(params[name]) for name in FORMS[form]}
    # The points of numpy.linspace(low, high, samples), computed the same way (i * step + low,
    # the last one exactly ``high``), so the intervals reported are the same to the bit.
    step = (high - low) / (samples - 1) if samples > 1 else 0.0
    xs = [i * step + low for i in range(samples)]
    if samples > 1:
        xs[-1] = float(high)
    ys = [function(x, **args) for x in xs]
    return [
        (xs[i], xs[i + 1])
        for i in range(len(ys) - 1)
        if (ys[i + 1] - ys[i] > tolerance if lower_is_better else ys[i + 1] - ys[i] < -tolerance)
    ]


def fit_logistic5(raw: Sequence[float], target: Sequence[float]) -> dict[str, float]:
    """Least-squares fit of the five-parameter logistic mapping ``raw`` onto ``target``.

    Used to recalibrate a tool on data with known quality (MOS rescaled to [1, 5], or the
    normalized scores of a tool whose published parameters we trust).
    """
    import numpy as np
    from scipy.optimize import curve_fit

    x = np.asarray(raw, dtype=float)
    y = np.asarray(target, dtype=float)
    if x.size < 5 or x.size != y.size:
        raise ValueError("fit_logistic5 needs at least five (raw, target) pairs of equal length")
    spread = float(np.std(x)) or 1.0
    slope = float(np.sign(np.corrcoef(x, y)[0, 1]) or 1.0)
    start = [float(np.ptp(y)) or 1.0, slope / spread, float(np.median(x)), 0.0, float(np.mean(y))]
    vectorised = np.vectorize(logistic5)
    params, _ = curve_fit(vectorised, x, y, p0=start, maxfev=20000)
    return dict(zip(FORMS["logistic5"], (float(p) for p in params), strict=True))


def fit_monotone(
    raw: Sequence[float], target: Sequence[float], *, lower_is_better: bool
) -> tuple[str, dict[str, float], str | None]:
    """The simplest trustworthy mapping of ``raw`` onto ``target``: a five-parameter logistic
    when it runs the tool's way over the data's range, else a four-parameter logistic, else a
    straight line; returns (form, params, why the 5PL was not kept or None).

    A free 5PL may bend back on a small or noisy sample (its linear term fights the logistic),
    so a better raw score would get a worse normalized one.  A line that itself runs the wrong
    way means the tool disagrees with the target on this data: that is reported, not fitted.
    """
    import numpy as np
    from scipy.optimize import curve_fit

    x = np.asarray(raw, dtype=float)
    y = np.asarray(target, dtype=float)
    low, high = float(x.min()), float(x.max())
    reasons: list[str] = []
    try:
        params = fit_logistic5(raw, target)
        if not monotonicity_violations(
            "logistic5", params, low, high, lower_is_better=lower_is_better
        ):
            return "logistic5", params, None
        reasons.append("the five-parameter logistic turns back within the data's range")
    except (RuntimeError, ValueError) as exc:
        reasons.append(f"the five-parameter logistic did not converge ({exc})")
    spread = float(np.std(x)) or 1.0
    start = [float(y.max()), float(y.min()), float(np.median(x)), spread]
    if lower_is_better:
        start[0], start[1] = start[1], start[0]
    try:
        fitted, _ = curve_fit(np.vectorize(logistic4), x, y, p0=start, maxfev=20000)
        params = dict(zip(FORMS["logistic4"], (float(p) for p in fitted), strict=True))
        if not monotonicity_violations(
            "logistic4", params, low, high, lower_is_better=lower_is_better
        ):
            return "logistic4", params, "; ".join(reasons)
        reasons.append("so does the four-parameter one")
    except (RuntimeError, ValueError) as exc:
        reasons.append(f"the four-parameter logistic did not converge ({exc})")
    slope, intercept = np.polyfit(x, y, 1)
    if slope == 0 or (slope > 0) == lower_is_better:
        raise ValueError(
            "the tool's scores run against the target on this data (a line "
            f"fitted to them has slope {slope:+.3g}): no monotone mapping fits"
        )
    params = {
        "x_at_1": float((SCALE_MIN - intercept) / slope),
        "x_at_5": float((SCALE_MAX - intercept) / slope),
    }
    return "linear", params, "; ".join(reasons)
