"""Summarise how scores agree with MOS: the correlations, their fit and intervals, as data."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..cells import finite_or_none
from .bootstrap import bootstrap_ci
from .correlations import krcc, paired_arrays, plcc, srcc
from .logistic import plcc_after_logistic


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
    x, y = paired_arrays(_floats(pred), _floats(mos))
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
        srcc=finite_or_none(estimates["srcc"]),
        plcc=finite_or_none(estimates["plcc"]),
        krcc=finite_or_none(estimates["krcc"]),
    )
    if logistic:
        fit = plcc_after_logistic(x, y, rank=estimates["srcc"])
        report.update(
            plcc_logistic=finite_or_none(fit.plcc),
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
