"""The builtin summarizer's own opinion of overall quality, before fusion with the tools.

A ridge regression over a few robust inputs: nine measurements of the image
(:func:`.measure.opinion_features`: edge width, noise, blockiness, exposure, contrast,
colourfulness) and the normalized score of the tool the pipeline ran (its own evidence, computed
and cached once by the executor: the builtin does not recompute BRISQUE-like statistics).  An
input can raise the estimate no further than the range seen in fitting (2nd-98th percentile)
allows, while evidence of damage beyond that range still lowers it (a blur far wider than any
fitted photo's is worse, not "as bad as the worst seen").  The result is clipped to [1, 5].

The summarizer fuses this opinion with the same tool score (the paper's fusion), which would
count the tool twice; so the model is fitted to the *fusion-aware* target
(:func:`fusion_target`): the opinion that, fused with the tool score, gives the MOS.

Tools differ in scale, so there is one model per tool the pipeline may have run (BRISQUE with its
parameter file, PIQE without, ...) and one without any tool score; the model whose tool produced
the evidence answers (:meth:`OpinionModels.for_tools`).

The shipped weights (``opinion.json``) are fitted by ``benchmarks/agent_quality.py --fit`` on the
FIT part of the LIVE-C dev photos only (MOS rescaled to 1 + 4·MOS/100; the split rule and sizes
are in the file's metadata), with the ridge penalty chosen by nested cross-validation inside
FIT.  The benchmark reports figures on the disjoint HELD-OUT part.  Authentic phone-camera
distortions: a prior for photographs, not for synthetic or generated images.  Without the file
a neutral prior is used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS_FILE = Path(__file__).with_name("opinion.json")
TOOL_MEAN = "tool_mean"
#: Key of the model used when no tool score is in the evidence.
NO_TOOL = "none"


@dataclass(frozen=True)
class OpinionModel:
    """y = intercept + Σ w_f (x_f − mean_f) / std_f, each x_f kept within the fitted range on
    the side where it would raise y; a missing feature contributes nothing."""

    intercept: float
    weights: dict[str, float]
    means: dict[str, float] = field(default_factory=dict)
    stds: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, object] = field(default_factory=dict)
    lows: dict[str, float] = field(default_factory=dict)
    highs: dict[str, float] = field(default_factory=dict)

    def predict(self, features: Mapping[str, float], tool_mean: float | None) -> float:
        values = dict(features)
        if tool_mean is not None:
            values[TOOL_MEAN] = tool_mean
        total = self.intercept
        for name, weight in self.weights.items():
            if name in values:
                value = values[name]
                if weight > 0:
                    value = min(value, self.highs.get(name, np.inf))
                elif weight < 0:
                    value = max(value, self.lows.get(name, -np.inf))
                total += (
                    weight * (value - self.means.get(name, 0.0)) / (self.stds.get(name, 1.0) or 1.0)
                )
        return min(5.0, max(1.0, total))

    def as_dict(self) -> dict[str, object]:
        return {
            "intercept": self.intercept,
            "weights": self.weights,
            "means": self.means,
            "stds": self.stds,
            "lows": self.lows,
            "highs": self.highs,
            "metadata": self.metadata,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> OpinionModel:
        def floats(key: str) -> dict[str, float]:
            return {k: float(v) for k, v in dict(document.get(key, {})).items()}

        return cls(
            intercept=float(document["intercept"]),
            weights=floats("weights"),
            means=floats("means"),
            stds=floats("stds"),
            metadata=dict(document.get("metadata", {})),
            lows=floats("lows"),
            highs=floats("highs"),
        )


@dataclass(frozen=True)
class OpinionModels:
    """One model per tool whose score may be the evidence, plus one for no tool score."""

    models: dict[str, OpinionModel]
    metadata: dict[str, object] = field(default_factory=dict)
    default_tool: str | None = None

    def for_tools(self, tools: Sequence[str]) -> OpinionModel:
        """The model for evidence from ``tools`` (tool names, repeats allowed)."""
        names = set(tools)
        if not names:
            return self.models.get(NO_TOOL) or next(iter(self.models.values()))
        if len(names) == 1 and next(iter(names)) in self.models:
            return self.models[next(iter(names))]
        # Several tools, or one without a model of its own: the mean of their scores stands in
        # for the default tool's score.
        if self.default_tool in self.models:
            return self.models[self.default_tool]
        return self.models.get(NO_TOOL) or next(iter(self.models.values()))

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "metadata": self.metadata,
                    "default_tool": self.default_tool,
                    "models": {k: m.as_dict() for k, m in self.models.items()},
                },
                indent=2,
            )
            + "\n"
        )

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> OpinionModels:
        if "models" not in document:  # a single model (older files)
            model = OpinionModel.from_dict(document)
            return cls({NO_TOOL: model}, dict(model.metadata), NO_TOOL)
        return cls(
            {k: OpinionModel.from_dict(v) for k, v in dict(document["models"]).items()},
            dict(document.get("metadata", {})),
            document.get("default_tool"),
        )

    @classmethod
    def single(cls, model: OpinionModel) -> OpinionModels:
        return cls({NO_TOOL: model}, dict(model.metadata), NO_TOOL)


#: Neutral prior: only the tools' mean score, when no fitted weights ship.
PRIOR = OpinionModel(
    intercept=3.0,
    weights={TOOL_MEAN: 1.0},
    means={TOOL_MEAN: 3.0},
    stds={TOOL_MEAN: 1.0},
    metadata={"source": "prior"},
)


def as_models(model: OpinionModel | OpinionModels | None) -> OpinionModels:
    if model is None:
        return default_models()
    if isinstance(model, OpinionModel):
        return OpinionModels.single(model)
    return model


@lru_cache(maxsize=1)
def default_models() -> OpinionModels:
    if not WEIGHTS_FILE.is_file():
        return OpinionModels.single(PRIOR)
    return OpinionModels.from_dict(json.loads(WEIGHTS_FILE.read_text(encoding="utf-8")))


def default_model() -> OpinionModel:
    """The shipped model for the default tool's evidence."""
    models = default_models()
    return models.for_tools([models.default_tool] if models.default_tool else [])
