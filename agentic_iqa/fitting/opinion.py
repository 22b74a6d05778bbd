"""Fitting the builtin's opinion of overall quality to opinion scores (offline only).

:mod:`agentic_iqa.vlm.builtin.opinion` reads the fitted weights at run time; they are written
from here by ``benchmarks/agent_quality.py --fit``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..vlm.builtin.opinion import OpinionModel


def fusion_target(target: float, tool_mean: float | None, sigma: float, eta: float = 1.0) -> float:
    """The opinion whose Gaussian of ``sigma`` levels, fused with the tools' mean score by the
    paper's exp(-η(q̄-c)²) weights, centres on ``target``: the fused centre is the precision-
    weighted mean (2η q̄ + e/σ²) / (2η + 1/σ²), solved for e."""
    if tool_mean is None:
        return target
    precision = 1.0 / (sigma * sigma)
    return ((2.0 * eta + precision) * target - 2.0 * eta * tool_mean) / precision


def fit(
    rows: Sequence[Mapping[str, float]],
    targets: Sequence[float],
    ridge: float = 10.0,
    metadata: Mapping[str, object] | None = None,
    clip: bool = True,
) -> OpinionModel:
    """Ridge regression on standardised, clipped features (the intercept is not penalised)."""
    names = sorted(set.intersection(*(set(row) for row in rows)))
    x = np.array([[row[name] for name in names] for row in rows], dtype=float)
    y = np.asarray(targets, dtype=float)
    if clip and len(x) >= 10:
        lows, highs = np.percentile(x, 2, axis=0), np.percentile(x, 98, axis=0)
    else:
        lows, highs = np.full(len(names), -np.inf), np.full(len(names), np.inf)
    x = np.clip(x, lows, highs)
    means, stds = x.mean(axis=0), x.std(axis=0)
    stds[stds == 0] = 1.0
    design = np.c_[np.ones(len(x)), (x - means) / stds]
    penalty = ridge * np.eye(design.shape[1])
    penalty[0, 0] = 0.0
    coefficients = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    finite = np.isfinite(lows)
    return OpinionModel(
        intercept=float(coefficients[0]),
        weights=dict(zip(names, map(float, coefficients[1:]), strict=True)),
        means=dict(zip(names, map(float, means), strict=True)),
        stds=dict(zip(names, map(float, stds), strict=True)),
        metadata=dict(metadata or {}),
        lows={n: float(v) for n, v, f in zip(names, lows, finite, strict=True) if f},
        highs={n: float(v) for n, v, f in zip(names, highs, finite, strict=True) if f},
    )
