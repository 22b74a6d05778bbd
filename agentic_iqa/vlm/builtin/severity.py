"""From measurements to the paper's severity words, per distortion category.

Each category has one indicator and four thresholds: where "slight", "moderate", "severe" and
"extreme" begin.  They were calibrated on the first 30 LIVE-C dev photos degraded with
:mod:`agentic_iqa.synthetic` at levels 1-4 (medians below); each threshold sits between the
median indicator of two neighbouring levels, the first one above the 90th percentile of the
undistorted photos where the indicator allows it.

==================  ======================  ========  =====  =====  =====  =====
category            indicator               photos    L1     L2     L3     L4
==================  ======================  ========  =====  =====  =====  =====
Blurs, Sharpness    blur effect             0.32      0.47   0.67   0.82   0.87
Noise               noise sigma             0.0017    0.014  0.030  0.057  0.104
Compression         8x8 blockiness          1.27      1.61   2.25   2.99   5.87
Brightness (dark)   mean luminance          0.39      0.27   0.20   0.12   0.06
Brightness (light)  clipped highlights      0.007     0.10   0.21   0.31   0.48
Contrast            rms / mean luminance    0.62      0.44   0.31   0.19   0.095
Color distortions   colourfulness / mean    93        56     33     14     0
==================  ======================  ========  =====  =====  =====  =====

A continuous score (0 = clean .. 4 = extreme, a little beyond for ranking) interpolates between
the thresholds, so two distortions of the same level can still be ranked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .measure import Measurements

SEVERITIES = ("none", "slight", "moderate", "severe", "extreme")


@dataclass(frozen=True)
class Indicator:
    """Anchors: value of a clean photo, then where levels 1-4 begin; rising = worse if True."""

    clean: float
    starts: tuple[float, float, float, float]
    rising: bool = True

    def score(self, value: float) -> float:
        anchors = np.array([self.clean, *self.starts])
        if not self.rising:
            anchors, value = -anchors, -value
        if value <= anchors[0]:
            return 0.0
        if value >= anchors[-1]:
            beyond = (value - anchors[-1]) / (anchors[-1] - anchors[-2])
            return float(4.0 + min(beyond, 1.0) * 0.99)
        return float(np.interp(value, anchors, np.arange(5.0)))


BLUR = Indicator(0.32, (0.42, 0.57, 0.75, 0.85))
NOISE = Indicator(0.002, (0.008, 0.021, 0.042, 0.078))
BLOCKING = Indicator(1.27, (1.5, 1.9, 2.6, 4.2))
DARK = Indicator(0.39, (0.23, 0.16, 0.09, 0.045), rising=False)
HIGHLIGHTS = Indicator(0.007, (0.08, 0.15, 0.26, 0.40))
CONTRAST = Indicator(0.62, (0.50, 0.37, 0.25, 0.14), rising=False)
COLOUR = Indicator(93.0, (70.0, 42.0, 22.0, 7.0), rising=False)


def category_scores(m: Measurements) -> dict[str, float]:
    """Continuous severity (0..~5) of every category for one image."""
    blur = BLUR.score(m.blur)
    return {
        "Blurs": blur,
        "Sharpness": blur,
        "Noise": NOISE.score(m.noise_sigma),
        "Compression": BLOCKING.score(m.blockiness),
        "Brightness change": max(DARK.score(m.mean_luminance),
                                 HIGHLIGHTS.score(m.bright_fraction)),
        "Contrast": CONTRAST.score(m.rms_contrast / max(m.mean_luminance, 0.02)),
        "Color distortions": COLOUR.score(m.colourfulness / max(m.mean_luminance, 0.02)),
    }


def severity_word(score: float) -> str:
    return SEVERITIES[min(4, int(score))]


def explain(category: str, m: Measurements, score: float) -> str:
    """A short visual explanation with the measured value, for the reasoning trail."""
    word = severity_word(score)
    visible = "not visible" if word == "none" else f"{word}"
    if category in {"Blurs", "Sharpness"}:
        detail = f"blur effect {m.blur:.2f} (crisp photos about 0.32)"
        look = "edges look crisp" if word == "none" else "edges and fine texture are smeared"
    elif category == "Noise":
        detail = f"noise sigma {m.noise_sigma:.3f} in flat areas"
        look = "flat areas are clean" if word == "none" else "grain is visible in flat areas"
    elif category == "Compression":
        detail = f"8x8 blockiness ratio {m.blockiness:.2f} (1.0 = none)"
        look = "no block artefacts" if word == "none" else "JPEG block edges are visible"
    elif category == "Brightness change":
        detail = (f"mean luminance {m.mean_luminance:.2f}, clipped highlights "
                  f"{m.bright_fraction:.1%}, crushed shadows {m.dark_fraction:.1%}")
        look = "exposure looks right" if word == "none" else (
            "the image is too dark" if m.mean_luminance < 0.3 else "highlights are blown out")
    elif category == "Contrast":
        detail = f"RMS contrast {m.rms_contrast:.3f}"
        look = "tones span a normal range" if word == "none" else "the image looks flat and grey"
    else:
        detail = f"colourfulness {m.colourfulness:.1f}"
        look = "colours look natural" if word == "none" else "colours are washed out"
    return f"{category}: {visible}; {look} ({detail})."
