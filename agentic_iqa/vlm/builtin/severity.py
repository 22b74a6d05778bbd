"""From measurements to the paper's severity words, per distortion category.

Every category has one or more *indicators*: a measurement (:mod:`.measure`) and a monotone map
from it to a continuous severity, 0 = clean .. 4 = extreme (a little beyond, for ranking), by
linear interpolation between five anchors: the value of an undistorted photo and where "slight",
"moderate", "severe" and "extreme" begin.  A category's severity is its largest indicator's.

Without a reference the indicators read the image alone, normalised by its own statistics
(blur as the width of its own edges, contrast as spread relative to level, colourfulness relative
to mean luminance, ...):

==================  =====================================================  =================
category            indicator (no reference)                               worse when
==================  =====================================================  =================
Blurs, Sharpness    edge width σ (pixels, log scale)                       rising
Noise               noise σ in flat areas (log scale)                      rising
Compression         8x8 blockiness (best grid offset)                      rising
Brightness change   log median luminance (too dark); −log(1 − median) or  falling; rising
                    blown-highlight fraction (too bright)
Contrast            log of (p95 − p5) / min(p95 + p5, 2 − p95 − p5)        falling
Color distortions   log of colourfulness / min(mean, 1 − mean) luminance   falling
==================  =====================================================  =================

With a reference (full-reference questions) they read the *change* from the reference: added
edge width √(σ² − σref²), added noise, added blockiness, log ratio of median luminance (and
added blown highlights), log ratio of contrast, log ratio of relative colourfulness.

The anchors are calibrated, not hand-set: ``benchmarks/agent_quality.py --fit`` degrades the FIT
part of the LIVE-C dev photos with the calibration generator
(:mod:`agentic_iqa.fitting.degradations`, levels 1-4, every one of its two or three processes per
kind, so the cuts do not follow one process's quirks); "slight" begins where degraded photos are
best told from clean ones, each further level half-way between the typical readings of its
neighbours (:func:`agentic_iqa.fitting.severity.fit_indicator`).  A separate *detection* score per
category (:func:`agentic_iqa.fitting.severity.detection_cut`) says from where a distortion is
reported as present at all (a yes/no question, the executor's detection): clean authentic photos
often read "slight" blur or odd exposure, so it sits above the start of "slight" where they do.
Without a reference, one reading alone confuses a distortion with content (a dark scene, a soft
photo), but the readings together tell more (blur also lowers the measured noise and blockiness;
desaturation in HSV also brightens), so two small linear models of all the indicator scores are
fitted on the same calibration copies (:func:`fit_detector`, :func:`fit_dominance`): per category a
logistic *detector* (degraded by that category or not; present from the cut with the lowest
balanced error), and a multinomial model of which category a degraded copy was degraded by, for
"which distortion is most severe?".  With a reference the change readings are clear enough: there
the detection score and the largest severity decide. The result ships as ``severity.json`` with its
provenance.  The benchmark then tests on other photos degraded by a different generator
(:mod:`agentic_iqa.fitting.evaluation_degradations`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import numpy as np

from .measure import Measurements

SEVERITIES = ("none", "slight", "moderate", "severe", "extreme")
CATEGORIES = ("Blurs", "Noise", "Compression", "Brightness change", "Contrast", "Color distortions")
THRESHOLDS_FILE = Path(__file__).with_name("severity.json")

Reading = Callable[..., float]


def _log(value: float, floor: float) -> float:
    return math.log(max(value, floor))


#: No-reference indicators: name -> (category, calibration kind, reading, rising).  Readings
#: of multiplicative changes (edge width, noise σ, exposure, contrast, colourfulness) are
#: logarithms, so neighbouring levels are evenly spaced and a boundary half-way between them
#: (:func:`fit_indicator`) sits at the same *ratio* whatever the process that made the change.
NO_REFERENCE: dict[str, tuple[str, str, Callable[[Measurements], float], bool]] = {
    "blur": ("Blurs", "blur", lambda m: _log(m.blur_sigma, 0.3), True),
    "noise": ("Noise", "noise", lambda m: _log(m.noise_sigma, 1e-4), True),
    "blocking": ("Compression", "jpeg", lambda m: m.blockiness, True),
    "dark": ("Brightness change", "dark", lambda m: _log(m.median_luminance, 0.005), False),
    "bright": (
        "Brightness change",
        "bright",
        lambda m: -_log(1.0 - m.median_luminance, 0.005),
        True,
    ),
    "highlights": ("Brightness change", "bright", lambda m: m.bright_fraction, True),
    "contrast": ("Contrast", "contrast", lambda m: _log(m.contrast, 1e-3), False),
    "colour": (
        "Color distortions",
        "desaturate",
        lambda m: _log(m.relative_colourfulness, 0.5),
        False,
    ),
}


def _added(value: float, reference: float) -> float:
    return math.sqrt(max(value * value - reference * reference, 0.0))


#: Median luminances below this count as black: a mostly black photo's median (0) says nothing
#: about an exposure change, and a little noise would otherwise read as a huge one.
_DARKEST = 0.03


def _ratio(value: float, reference: float, floor: float) -> float:
    return math.log(max(value, floor) / max(reference, floor))


#: Full-reference indicators: name -> (category, calibration kind, reading(m, ref), rising).
FULL_REFERENCE: dict[str, tuple[str, str, Callable[[Measurements, Measurements], float], bool]] = {
    "blur": ("Blurs", "blur", lambda m, r: _added(m.blur_sigma, r.blur_sigma), True),
    "noise": ("Noise", "noise", lambda m, r: _added(m.noise_sigma, r.noise_sigma), True),
    "blocking": ("Compression", "jpeg", lambda m, r: m.blockiness - r.blockiness, True),
    "dark": (
        "Brightness change",
        "dark",
        lambda m, r: _ratio(m.median_luminance, r.median_luminance, _DARKEST),
        False,
    ),
    "bright": (
        "Brightness change",
        "bright",
        lambda m, r: _ratio(m.median_luminance, r.median_luminance, _DARKEST),
        True,
    ),
    "highlights": (
        "Brightness change",
        "bright",
        lambda m, r: m.bright_fraction - r.bright_fraction,
        True,
    ),
    "contrast": ("Contrast", "contrast", lambda m, r: _ratio(m.contrast, r.contrast, 1e-3), False),
    "colour": (
        "Color distortions",
        "desaturate",
        lambda m, r: _ratio(m.relative_colourfulness, r.relative_colourfulness, 0.5),
        False,
    ),
}


#: Where severity levels 1-4 begin on an indicator's scale (JSON stores them as a list).
Anchors = tuple[float, float, float, float]


@dataclass(frozen=True)
class Indicator:
    """Anchors: the value of a clean photo, then where levels 1-4 begin."""

    clean: float
    starts: Anchors
    rising: bool = True

    def score(self, value: float) -> float:
        anchors = np.array([self.clean, *self.starts], dtype=float)
        if not self.rising:
            anchors, value = -anchors, -value
        anchors = np.maximum.accumulate(anchors + np.arange(5) * 1e-9)
        if value <= anchors[0]:
            return 0.0
        if value >= anchors[-1]:
            beyond = (value - anchors[-1]) / max(anchors[-1] - anchors[-2], 1e-9)
            return float(4.0 + min(beyond, 1.0) * 0.99)
        return float(np.interp(value, anchors, np.arange(5.0)))

    def as_dict(self) -> dict[str, object]:
        return {"clean": self.clean, "starts": list(self.starts), "rising": self.rising}


@dataclass(frozen=True)
class Logistic:
    """A linear model of the no-reference indicator scores (:func:`indicator_scores`): a weight
    per indicator and a bias; a detector counts its category present from logit ``cut``."""

    weights: dict[str, float]
    bias: float
    cut: float = 0.0

    def logit(self, scores: Mapping[str, float]) -> float:
        return self.bias + sum(w * float(scores.get(name, 0.0)) for name, w in self.weights.items())

    def as_dict(self) -> dict[str, object]:
        return {"weights": self.weights, "bias": self.bias, "cut": self.cut}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Logistic:
        return cls(
            {str(k): float(v) for k, v in dict(document["weights"]).items()},
            float(document["bias"]),
            float(document.get("cut", 0.0)),
        )


@dataclass(frozen=True)
class Thresholds:
    """Indicator anchors, and per category the severity score from which a distortion counts
    as present (``detection``: "no_reference"/"full_reference" -> category -> score; 1.0, the
    start of "slight", where not calibrated)."""

    no_reference: dict[str, Indicator]
    full_reference: dict[str, Indicator]
    metadata: dict[str, object] = field(default_factory=dict)
    detection: dict[str, dict[str, float]] = field(default_factory=dict)
    #: No reference: per category a logistic detector of all indicator scores (when fitted, it
    #: decides presence instead of ``detection``), and the multinomial "which category" model.
    detectors: dict[str, Logistic] = field(default_factory=dict)
    dominance: dict[str, Logistic] = field(default_factory=dict)

    def present_from(self, category: str, with_reference: bool = False) -> float:
        """The score from which ``category`` is reported as present (Sharpness as Blurs)."""
        table = self.detection.get("full_reference" if with_reference else "no_reference", {})
        return float(table.get("Blurs" if category == "Sharpness" else category, 1.0))

    def detection_table(self, with_reference: bool = False) -> dict[str, float]:
        return {c: self.present_from(c, with_reference) for c in (*CATEGORIES, "Sharpness")}

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "metadata": self.metadata,
                    "no_reference": {k: v.as_dict() for k, v in self.no_reference.items()},
                    "full_reference": {k: v.as_dict() for k, v in self.full_reference.items()},
                    "detection": self.detection,
                    "detectors": {k: v.as_dict() for k, v in self.detectors.items()},
                    "dominance": {k: v.as_dict() for k, v in self.dominance.items()},
                },
                indent=2,
            )
            + "\n"
        )

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Thresholds:
        def table(part: Any) -> dict[str, Indicator]:
            return {
                name: Indicator(
                    float(v["clean"]),
                    cast(Anchors, tuple(float(s) for s in v["starts"])),
                    bool(v["rising"]),
                )
                for name, v in dict(part).items()
            }

        detection = {
            part: {c: float(v) for c, v in dict(values).items()}
            for part, values in dict(document.get("detection", {})).items()
        }

        def models(part: Any) -> dict[str, Logistic]:
            return {c: Logistic.from_dict(v) for c, v in dict(part or {}).items()}

        return cls(
            table(document["no_reference"]),
            table(document["full_reference"]),
            dict(document.get("metadata", {})),
            detection,
            models(document.get("detectors")),
            models(document.get("dominance")),
        )


@lru_cache(maxsize=1)
def default_thresholds() -> Thresholds:
    return Thresholds.from_dict(json.loads(THRESHOLDS_FILE.read_text(encoding="utf-8")))


def indicator_values(m: Measurements, reference: Measurements | None = None) -> dict[str, float]:
    """Every indicator's reading: no-reference, or the change from ``reference``."""
    if reference is None:
        return {name: spec[2](m) for name, spec in NO_REFERENCE.items()}
    return {name: spec[2](m, reference) for name, spec in FULL_REFERENCE.items()}


def indicator_scores(
    m: Measurements, reference: Measurements | None = None, thresholds: Thresholds | None = None
) -> dict[str, float]:
    """Continuous severity of every indicator (e.g. "dark" and "bright" separately)."""
    table = thresholds or default_thresholds()
    indicators = table.no_reference if reference is None else table.full_reference
    return {
        name: indicators[name].score(value)
        for name, value in indicator_values(m, reference).items()
    }


def category_scores(
    m: Measurements, reference: Measurements | None = None, thresholds: Thresholds | None = None
) -> dict[str, float]:
    """Continuous severity (0..~5) of every category for one image (and its reference)."""
    specs = NO_REFERENCE if reference is None else FULL_REFERENCE
    scores = dict.fromkeys(CATEGORIES, 0.0)
    for name, score in indicator_scores(m, reference, thresholds).items():
        category = specs[name][0]
        scores[category] = max(scores[category], score)
    scores["Sharpness"] = scores["Blurs"]
    return scores


def severity_word(score: float) -> str:
    return SEVERITIES[min(4, int(score))]


#: A category whose own severity reaches this ("extreme") is present whatever its detector says.
ALWAYS_PRESENT = 4.0


def presence(
    m: Measurements, reference: Measurements | None = None, thresholds: Thresholds | None = None
) -> dict[str, float]:
    """Per category (and Sharpness), how far the image is above the point from which the
    distortion counts as present: >= 0 means present (a yes/no question's Yes, the executor's
    detection).  Without a reference the fitted detector's logit minus its cut, and present
    anyway where the category's own reading is "extreme" (the detectors learn from copies with
    one distortion each, so e.g. blur's lowers the measured noise; a photo both blurred and
    noisy must not hide a blur that extreme); with a reference (or where no detector is fitted)
    the severity minus the calibrated detection score."""
    table = thresholds or default_thresholds()
    scores = category_scores(m, reference, table)
    detectors = table.detectors if reference is None else {}
    readings = indicator_scores(m, None, table) if detectors else {}
    margins = {
        c: (
            max(detectors[c].logit(readings) - detectors[c].cut, scores[c] - ALWAYS_PRESENT)
            if c in detectors
            else scores[c] - table.present_from(c, reference is not None)
        )
        for c in CATEGORIES
    }
    margins["Sharpness"] = margins["Blurs"]
    return margins


def dominance(
    m: Measurements, reference: Measurements | None = None, thresholds: Thresholds | None = None
) -> dict[str, float] | None:
    """Without a reference: the probability of each category being the one the image was
    degraded by (the fitted multinomial model, see :func:`fit_dominance`); None with a reference
    or where no model is fitted (then the largest severity answers)."""
    table = thresholds or default_thresholds()
    if reference is not None or not table.dominance:
        return None
    readings = indicator_scores(m, None, table)
    logits = {c: model.logit(readings) for c, model in table.dominance.items()}
    top = max(logits.values())
    weights = {c: math.exp(v - top) for c, v in logits.items()}
    total = sum(weights.values())
    result = {c: w / total for c, w in weights.items()}
    if "Blurs" in result:
        result["Sharpness"] = result["Blurs"]
    return result


def explain(
    category: str, m: Measurements, score: float, where: str = "", present: bool = True
) -> str:
    """A short visual explanation with the measured value, for the reasoning trail.

    ``present`` False (its detector says clean photos read like this: a colourful photo's
    "slight" desaturation reading) describes the look as clean, so that the trail never
    contradicts an answer that says the distortion is not visible."""
    word = severity_word(score)
    visible = "not visible" if word == "none" else f"{word}"
    if not present and word != "none":
        visible, word = f"{word} reading, usual in clean photos", "none"
    if category in {"Blurs", "Sharpness"}:
        detail = f"edge width {m.blur_sigma:.1f} px"
        look = "edges look crisp" if word == "none" else "edges and fine texture are smeared"
    elif category == "Noise":
        detail = f"noise sigma {m.noise_sigma:.3f} in flat areas"
        look = "flat areas are clean" if word == "none" else "grain is visible in flat areas"
    elif category == "Compression":
        detail = f"8x8 blockiness ratio {m.blockiness:.2f} (1.0 = none)"
        look = "no block artefacts" if word == "none" else "JPEG block edges are visible"
    elif category == "Brightness change":
        detail = (
            f"mean luminance {m.mean_luminance:.2f}, median {m.median_luminance:.2f}, "
            f"clipped highlights {m.bright_fraction:.1%}, crushed shadows "
            f"{m.dark_fraction:.1%}"
        )
        look = (
            "exposure looks right"
            if word == "none"
            else (
                "the image is too dark"
                if m.median_luminance < 0.35
                else "the image is too bright, highlights washed out"
            )
        )
    elif category == "Contrast":
        detail = f"tonal spread {m.contrast:.2f} of the room its level leaves"
        look = "tones span a normal range" if word == "none" else "the image looks flat and grey"
    else:
        detail = f"colourfulness {m.colourfulness:.1f} at mean luminance {m.mean_luminance:.2f}"
        look = "colours look natural" if word == "none" else "colours are washed out"
    return f"{category}: {visible}; {look} ({detail}{', ' + where if where else ''})."
