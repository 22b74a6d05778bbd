"""Fitting the builtin's severity words to calibration copies of photos (offline only).

What :mod:`agentic_iqa.vlm.builtin.severity` reads at run time (``severity.json``) is written
from here, by ``benchmarks/agent_quality.py --fit``: indicator anchors half-way between the
typical readings of neighbouring levels, detection cuts, the per-category logistic detectors and
the which-distortion model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import cast

import numpy as np

from ..vlm.builtin.measure import Measurements
from ..vlm.builtin.severity import (
    CATEGORIES,
    FULL_REFERENCE,
    NO_REFERENCE,
    Anchors,
    Indicator,
    Logistic,
    Thresholds,
    category_scores,
    indicator_scores,
)

#: Detection cuts are searched between the start of "slight" and the start of "severe".
_DETECTION_RANGE = (1.0, 3.0)
#: Ridge penalty and gradient steps of the detector and dominance models (indicator scores
#: are 0..5, so no scaling is needed).
_RIDGE, _STEPS = 1e-3, 4000


def _boundary(lower: np.ndarray, upper: np.ndarray) -> float:
    """The threshold that misclassifies fewest of two neighbouring levels (rising values), at the
    middle of the best interval."""
    values = np.unique(np.r_[lower, upper])
    cuts = np.r_[values[0] - 1e-9, (values[:-1] + values[1:]) / 2, values[-1] + 1e-9]
    errors = np.array([(lower >= c).sum() + (upper < c).sum() for c in cuts])
    best = np.flatnonzero(errors == errors.min())
    return float((cuts[best[0]] + cuts[best[-1]]) / 2)


def _halfway(lower: np.ndarray, upper: np.ndarray) -> float:
    """Half-way between the typical readings of two neighbouring levels."""
    return float((np.median(lower) + np.median(upper)) / 2)


def fit_indicator(values: Sequence[float], levels: Sequence[int], rising: bool) -> Indicator:
    """Anchors for one indicator from readings at known levels 0-4.

    Clean photos spread widely (content), so "slight" begins where it is best told from them
    (fewest errors).  Between degraded levels the boundary is half-way between their typical
    readings: the fewest-errors cut there lands anywhere in the gap between two tight clusters
    and so depends on the calibration generator's quirks, the half-way point does not."""
    v = np.asarray(values, dtype=float) * (1.0 if rising else -1.0)
    lv = np.asarray(levels)
    starts = np.maximum.accumulate(
        [_boundary(v[lv == 0], v[lv == 1])]
        + [_halfway(v[lv == level - 1], v[lv == level]) for level in range(2, 5)]
    )
    clean = min(float(np.median(v[lv == 0])), float(starts[0]))
    sign = 1.0 if rising else -1.0
    return Indicator(sign * clean, cast(Anchors, tuple(float(sign * s) for s in starts)), rising)


def detection_cut(absent: Sequence[float], present: Mapping[int, Sequence[float]]) -> float:
    """The score from which a distortion counts as present: the cut with the lowest balanced
    error between clean photos (``absent``) and degraded ones, every level weighing the same.
    Clean authentic photos have some blur, noise, odd exposure...: a "slight" reading that
    clean photos often show is no reason to say Yes."""
    clean = np.asarray(absent, dtype=float)
    levels = [np.asarray(v, dtype=float) for v in present.values() if len(v)]
    low, high = _DETECTION_RANGE
    values = np.unique(np.r_[clean, *levels])
    candidates = np.unique(np.clip(np.r_[low, (values[:-1] + values[1:]) / 2], low, high))

    def error(cut: float) -> float:
        missed = np.mean([(level < cut).mean() for level in levels]) if levels else 0.0
        return float((clean >= cut).mean() + missed)

    errors = np.array([error(c) for c in candidates])
    best = candidates[np.flatnonzero(errors <= errors.min() + 1e-12)]
    return float((best[0] + best[-1]) / 2)


def _design(rows: Sequence[Mapping[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.c_[
        np.array([[float(r.get(n, 0.0)) for n in names] for r in rows]).reshape(
            len(rows), len(names)
        ),
        np.ones(len(rows)),
    ]


def fit_detector(
    readings: Sequence[Mapping[str, float]], positive: Sequence[bool], levels: Sequence[int]
) -> Logistic:
    """A logistic detector of one category from indicator scores: copies degraded by it
    (``positive``, at ``levels`` 1-4) against clean photos and copies degraded by anything else,
    the two sides weighing the same.  The cut is the logit with the lowest balanced error, every
    degraded level weighing the same (as :func:`detection_cut`)."""
    names = sorted(NO_REFERENCE)
    x = _design(readings, names)
    y = np.asarray(positive, dtype=float)
    lv = np.asarray(levels)
    weights = np.where(y > 0, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    beta = np.zeros(x.shape[1])
    penalty = np.r_[np.ones(len(names)), 0.0] * _RIDGE
    for _ in range(_STEPS):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        beta -= x.T @ ((p - y) * weights) + penalty * beta
    logits = x @ beta
    absent = logits[y == 0]
    present = {level: logits[(y > 0) & (lv == level)] for level in range(1, 5)}
    values = np.unique(logits)
    candidates = np.r_[values[0] - 1e-9, (values[:-1] + values[1:]) / 2, values[-1] + 1e-9]

    def error(cut: float) -> float:
        missed = [(v < cut).mean() for v in present.values() if len(v)]
        return float((absent >= cut).mean() + (np.mean(missed) if missed else 0.0))

    errors = np.array([error(c) for c in candidates])
    best = candidates[np.flatnonzero(errors <= errors.min() + 1e-12)]
    return Logistic(
        {n: float(b) for n, b in zip(names, beta[:-1], strict=True)},
        float(beta[-1]),
        float((best[0] + best[-1]) / 2),
    )


def fit_dominance(
    readings: Sequence[Mapping[str, float]], labels: Sequence[str]
) -> dict[str, Logistic]:
    """A multinomial logistic model of which category (``labels``) degraded each copy, from its
    indicator scores: the answer to "which distortion is most severe?" without a reference."""
    names = sorted(NO_REFERENCE)
    classes = [c for c in CATEGORIES if c in set(labels)]
    x = _design(readings, names)
    y = np.eye(len(classes))[[classes.index(label) for label in labels]]
    beta = np.zeros((x.shape[1], len(classes)))
    penalty = np.r_[np.ones(len(names)), 0.0][:, None] * _RIDGE
    for _ in range(_STEPS):
        z = x @ beta
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        beta -= 0.5 * (x.T @ (p - y) / len(x) + penalty * beta)
    return {
        c: Logistic(
            {n: float(b) for n, b in zip(names, beta[:-1, i], strict=True)}, float(beta[-1, i])
        )
        for i, c in enumerate(classes)
    }


def _category_kinds(specs: Mapping[str, tuple]) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = {}
    for category, kind, *_ in specs.values():
        kinds.setdefault(category, set()).add(kind)
    return kinds


def calibrate(
    samples: Iterable[tuple[str, int, Measurements, Measurements]],
    metadata: Mapping[str, object] | None = None,
) -> Thresholds:
    """Thresholds from ``(kind, level, measurements, reference measurements)`` samples made by
    the calibration generator (level 0 = the undistorted photo, kind irrelevant there), then
    the detection cut of every category on the scores those thresholds give."""
    rows = list(samples)
    tables: list[dict[str, Indicator]] = []
    # The readings take one photo's measurements, or a photo's and its reference's.
    parts: tuple[tuple[Mapping[str, tuple[str, str, Callable[..., float], bool]], bool], ...] = (
        (NO_REFERENCE, False),
        (FULL_REFERENCE, True),
    )
    for specs, with_reference in parts:
        table: dict[str, Indicator] = {}
        for name, (_, kind, reading, rising) in specs.items():
            chosen = [(level, m, ref) for k, level, m, ref in rows if level == 0 or k == kind]
            values = [reading(m, ref) if with_reference else reading(m) for _, m, ref in chosen]
            table[name] = fit_indicator(values, [level for level, _, _ in chosen], rising)
        tables.append(table)
    thresholds = Thresholds(tables[0], tables[1], dict(metadata or {}))
    detection: dict[str, dict[str, float]] = {}
    for part, specs, with_reference in (
        ("no_reference", NO_REFERENCE, False),
        ("full_reference", FULL_REFERENCE, True),
    ):
        scored = [
            (k, level, category_scores(m, ref if with_reference else None, thresholds))
            for k, level, m, ref in rows
        ]
        detection[part] = {
            category: detection_cut(
                [s[category] for _, level, s in scored if level == 0],
                {
                    lv: [s[category] for k, level, s in scored if level == lv and k in kinds]
                    for lv in range(1, 5)
                },
            )
            for category, kinds in _category_kinds(specs).items()
        }
    readings = [indicator_scores(m, None, thresholds) for _, _, m, _ in rows]
    kinds = _category_kinds(NO_REFERENCE)
    detectors = {
        category: fit_detector(
            readings,
            [level > 0 and k in of for k, level, _, _ in rows],
            [level for _, level, _, _ in rows],
        )
        for category, of in kinds.items()
    }
    category_of = {kind: category for category, of in kinds.items() for kind in of}
    degraded = [
        (r, category_of[k])
        for r, (k, level, _, _) in zip(readings, rows, strict=True)
        if level > 0 and k in category_of
    ]
    dominant = fit_dominance([r for r, _ in degraded], [c for _, c in degraded])
    return replace(thresholds, detection=detection, detectors=detectors, dominance=dominant)
