"""The builtin summarizer's own opinion of overall quality, before fusion with the tools.

A ridge regression over what the builtin sees in the image (the measurements and natural-scene
statistics of :mod:`.measure`) and the tools' mean normalized score, clipped to [1, 5].  It is
the builtin's stand-in for a VLM looking at the photo.  The shipped weights (``opinion.json``)
were fitted by ``benchmarks/agent_quality.py --fit`` on the 250 LIVE-C dev photos (MOS rescaled
to 1 + 4·MOS/100): authentic phone-camera distortions, so it is a prior for photographs, not for
synthetic or generated images.  The benchmark's honest figure is cross-validated (each photo
scored by a model fitted without it).  Without the file a neutral prior is used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

WEIGHTS_FILE = Path(__file__).with_name("opinion.json")
TOOL_MEAN = "tool_mean"


@dataclass(frozen=True)
class OpinionModel:
    """y = intercept + Σ w_f (x_f − mean_f) / std_f; a missing feature contributes nothing."""

    intercept: float
    weights: dict[str, float]
    means: dict[str, float] = field(default_factory=dict)
    stds: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, object] = field(default_factory=dict)

    def predict(self, features: Mapping[str, float], tool_mean: float | None) -> float:
        values = dict(features)
        if tool_mean is not None:
            values[TOOL_MEAN] = tool_mean
        total = self.intercept
        for name, weight in self.weights.items():
            if name in values:
                total += weight * (values[name] - self.means.get(name, 0.0)) / (
                    self.stds.get(name, 1.0) or 1.0)
        return min(5.0, max(1.0, total))

    def to_json(self) -> str:
        return json.dumps({"intercept": self.intercept, "weights": self.weights,
                           "means": self.means, "stds": self.stds,
                           "metadata": self.metadata}, indent=2) + "\n"


def fit(rows: Sequence[Mapping[str, float]], targets: Sequence[float], ridge: float = 10.0,
        metadata: Mapping[str, object] | None = None) -> OpinionModel:
    """Ridge regression on standardised features (the intercept is not penalised)."""
    names = sorted(set.intersection(*(set(row) for row in rows)))
    x = np.array([[row[name] for name in names] for row in rows], dtype=float)
    y = np.asarray(targets, dtype=float)
    means, stds = x.mean(axis=0), x.std(axis=0)
    stds[stds == 0] = 1.0
    design = np.c_[np.ones(len(x)), (x - means) / stds]
    penalty = ridge * np.eye(design.shape[1])
    penalty[0, 0] = 0.0
    coefficients = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    return OpinionModel(
        intercept=float(coefficients[0]),
        weights=dict(zip(names, map(float, coefficients[1:]), strict=True)),
        means=dict(zip(names, map(float, means), strict=True)),
        stds=dict(zip(names, map(float, stds), strict=True)),
        metadata=dict(metadata or {}),
    )


#: Neutral prior: only the tools' mean score, when no fitted weights ship.
PRIOR = OpinionModel(intercept=3.0, weights={TOOL_MEAN: 1.0}, means={TOOL_MEAN: 3.0},
                     stds={TOOL_MEAN: 1.0}, metadata={"source": "prior"})


@lru_cache(maxsize=1)
def default_model() -> OpinionModel:
    if not WEIGHTS_FILE.is_file():
        return PRIOR
    document = json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))
    return OpinionModel(intercept=float(document["intercept"]),
                        weights={k: float(v) for k, v in document["weights"].items()},
                        means={k: float(v) for k, v in document.get("means", {}).items()},
                        stds={k: float(v) for k, v in document.get("stds", {}).items()},
                        metadata=dict(document.get("metadata", {})))
