"""The most an image can be rated with the damage measured on it: a ceiling on the opinion.

The fitted opinion (:mod:`.opinion`) reads natural-scene statistics that authentic photos vary
in, and degradations far from those photos fool it: JPEG smoothing and added grain move the
statistics the way a cleaner photo's would, so a photo saved at JPEG quality 3 (blocks
everywhere) rated "Fair", and quality 10 above quality 30.  The severity readings
(:mod:`.severity`) do not have that failure: each is one monotone measurement of one kind of
damage (edge width, noise in flat areas, 8x8 blockiness), calibrated on degraded photos.  So the
opinion is kept where it is below what the worst of those readings allows, and the ceiling
takes over where it is not.

The ceiling maps the paper's severity words onto its quality levels, a level per word: on the
continuous severity s (0 clean, its integer part the word) it is :data:`TOP` − s until "severe"
begins, so "slight" damage allows at most 4 (Good), "moderate" at most 3 (Fair); then it falls
half as fast, "severe" to 2 .. 1.5 (Poor) and "extreme" to 1.5 .. 1 (Bad) at the top of the
scale (s = 5), so it keeps falling as the damage grows.  A floor a sixteenth of the way up to
the ceiling keeps two copies that the opinion puts at the bottom of the scale (1.0) apart.

Only blur, noise and compression count: exposure, contrast and colour readings confuse the scene
with a distortion far more often (a dark or muted photo).  Noise counts from "moderate"
(:data:`NOISE_FROM`) up: a slight noise reading is what clean, finely textured photos
(foliage, gravel) give, and capping them cost the opinion's SRCC on LIVE-C.  Chosen on the
livec-dev photos (SRCC with MOS 0.675 so, 0.666 counting all noise, 0.663 with no ceiling);
on the 200 livec-extra photos, never fitted on but read before, 0.595 against 0.588 and 0.608:
the ceiling costs 0.013 there, the price of rating heavy damage as the damage it is.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The categories whose severity bounds the opinion.
DAMAGE = ("Blurs", "Noise", "Compression")
#: The ceiling at severity 0: the top of the scale.
TOP = 5.0
#: Where "severe" begins on the continuous severity scale (:data:`.severity.SEVERITIES`).
SEVERE = 3.0
#: The floor is this part of the way up to the ceiling (:func:`floor`).
FLOOR_PART = 16.0
#: The largest continuous severity (:meth:`.severity.Indicator.score` stops just below it).
LARGEST = 5.0
#: The noise severity from which noise bounds the opinion: "moderate" (the module docstring).
NOISE_FROM = 2.0


def ceiling(severity: float) -> float:
    """The highest opinion (1-5) an image whose worst damage has ``severity`` may get."""
    if severity < 0:
        raise ValueError(f"a severity is at least 0, not {severity}")
    s = min(severity, LARGEST)
    if s <= SEVERE:
        return TOP - s
    top_of_severe = TOP - SEVERE
    return top_of_severe - (top_of_severe - 1.0) * (s - SEVERE) / (LARGEST - SEVERE)


def worst(scores: Mapping[str, float]) -> tuple[str, float]:
    """The damage category with the largest severity in ``scores`` that bounds the opinion
    (noise from :data:`NOISE_FROM`), and that severity."""
    counted = {category: float(scores.get(category, 0.0)) for category in DAMAGE}
    if counted["Noise"] < NOISE_FROM:
        counted["Noise"] = 0.0
    category = max(DAMAGE, key=counted.__getitem__)
    return category, counted[category]


def floor(severity: float) -> float:
    """The lowest opinion an image whose worst damage has ``severity`` gets: a sixteenth of
    the way from the bottom of the scale to the ceiling, so two copies the opinion puts at the
    bottom (1.0) still rank by their damage."""
    return 1.0 + (ceiling(severity) - 1.0) / FLOOR_PART


def bounded(opinion: float, scores: Mapping[str, float]) -> float:
    """``opinion`` kept between the floor and the ceiling of the worst damage in ``scores``."""
    severity = worst(scores)[1]
    return max(floor(severity), min(opinion, ceiling(severity)))
