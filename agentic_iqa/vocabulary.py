"""The agent's words and their synonyms: distortion categories, severities, quality levels.

A model writes "blur", "Motion blur" or "blurry" for the category "Blurs", "Moderate" or "medium"
for the severity "moderate"; a user writes "out of focus".  Every reader of model output and of
queries maps them here, to the one spelling the state stores, so that a right answer is never
refused for its wording.  A word that names no category (or two) is refused, never guessed.

Pure data and string functions; the seven categories themselves are the tool catalogue's.
"""

from __future__ import annotations

import functools
import math
import re

from iqa_tools import DISTORTION_CATEGORIES

#: Words and phrases that name a distortion category (matched as whole words, lower case).
DISTORTION_TERMS: dict[str, tuple[str, ...]] = {
    "Blurs": (
        "blur",
        "blurs",
        "blurry",
        "blurred",
        "blurriness",
        "out of focus",
        "out-of-focus",
        "defocus",
        "defocused",
        "unfocused",
        "motion blur",
        "fuzzy",
        "smeared",
        "soft focus",
        "in focus",
        "in-focus",
        "focused",
        "unsharp",
    ),
    "Noise": (
        "noise",
        "noisy",
        "grain",
        "grainy",
        "graininess",
        "speckle",
        "speckled",
        "noisiness",
    ),
    "Compression": (
        "compression",
        "compressed",
        "jpeg",
        "jpg",
        "artifact",
        "artifacts",
        "artefact",
        "artefacts",
        "blocky",
        "blockiness",
        "blocking",
        "pixelated",
        "pixelation",
        "banding",
        "ringing",
    ),
    "Brightness change": (
        "brightness",
        "bright",
        "too bright",
        "dark",
        "darkness",
        "too dark",
        "dim",
        "exposure",
        "exposed",
        "overexposed",
        "overexposure",
        "underexposed",
        "underexposure",
        "lighting",
        "illumination",
        "brightness change",
        "low light",
        "low-light",
        "underlit",
        "over-exposed",
        "over-exposure",
        "under-exposed",
        "under-exposure",
        "blown highlights",
        "blown-out highlights",
        "clipped highlights",
        "blown out",
        "blown-out",
    ),
    "Contrast": ("contrast", "washed out", "washed-out", "hazy", "haze", "faded", "flat"),
    "Color distortions": (
        "color",
        "colour",
        "colors",
        "colours",
        "colored",
        "coloured",
        "saturation",
        "saturated",
        "desaturated",
        "oversaturated",
        "tint",
        "color cast",
        "colour cast",
        "white balance",
        "hue",
        "color distortion",
        "color distortions",
        "colour distortion",
    ),
    "Sharpness": (
        "sharp",
        "sharpness",
        "crisp",
        "crispness",
        "clarity",
        "detail",
        "details",
        "oversharpened",
        "over-sharpened",
        "oversharpening",
        "over-sharpening",
        "sharpening",
    ),
}

#: Words that ask whether a distortion is *absent* ("Is the car sharp?", "Is the flower in
#: focus?", "Are the colours vivid?"): a yes/no question with one of them is answered Yes when
#: its categories are not visible.  Sharp and in focus name both kinds of lost detail.  ("Noise
#: free" is not here: "free" after any defect word turns it round, as "free of" before one does.)
POSITIVE_TERMS: dict[str, tuple[str, ...]] = {
    "Blurs": ("in focus", "in-focus", "focused", "sharp", "crisp", "clear"),
    "Sharpness": ("in focus", "in-focus", "focused", "sharp", "crisp", "clear", "detailed"),
    "Noise": ("clean", "noiseless"),
    "Brightness change": (
        "well exposed",
        "well-exposed",
        "well lit",
        "well-lit",
        "properly exposed",
        "correctly exposed",
    ),
    "Contrast": ("good contrast", "contrasty", "punchy"),
    "Color distortions": (
        "vivid",
        "colourful",
        "colorful",
        "natural colours",
        "natural colors",
        "true to life",
        "lifelike",
    ),
}

#: Nouns that name a quality, not a defect: alone they name their category but say nothing of
#: which way round ("Does it lack contrast?", "Is there no detail?" ask whether the defect is
#: there, as "Is the contrast low?" does).  A good word beside one makes it a quality
#: ("enough detail", "Is the exposure correct?"), a bad word a defect ("low contrast").
ATTRIBUTE_TERMS: dict[str, tuple[str, ...]] = {
    "Blurs": ("focus",),
    "Sharpness": ("sharpness", "crispness", "clarity", "detail", "details", "definition"),
    "Contrast": ("contrast",),
    "Brightness change": ("brightness", "exposure", "lighting", "illumination"),
    "Color distortions": (
        "color",
        "colour",
        "colors",
        "colours",
        "saturation",
        "hue",
        "white balance",
    ),
}
#: Words that, before an attribute or after it ("Is the contrast good?"), make it a quality.
GOOD_QUALIFIERS: tuple[str, ...] = (
    "good",
    "enough",
    "sufficient",
    "adequate",
    "plenty of",
    "lots of",
    "fine",
    "rich",
    "great",
    "excellent",
    "proper",
    "correct",
    "natural",
    "accurate",
    "balanced",
    "normal",
    "right",
    "ok",
    "okay",
    "decent",
    "nice",
    "acceptable",
)
#: Words that, in the same places, make it a defect ("low contrast", "Is the exposure wrong?").
BAD_QUALIFIERS: tuple[str, ...] = (
    "low",
    "poor",
    "bad",
    "wrong",
    "little",
    "reduced",
    "weak",
    "insufficient",
    "inadequate",
    "incorrect",
    "unnatural",
)
#: Nouns that, after an attribute, make it a defect ("contrast problems", "exposure issues").
DEFECT_HEADS: tuple[str, ...] = (
    "issue",
    "issues",
    "problem",
    "problems",
    "loss",
    "distortion",
    "distortions",
    "cast",
    "casts",
    "shift",
    "shifts",
    "defect",
    "defects",
    "error",
    "errors",
    "artifact",
    "artifacts",
    "artefact",
    "artefacts",
    "change",
    "changes",
)

#: Words that, in a model's *label* for a distortion ("low contrast", "JPEG artifacts"), only
#: qualify it; they never decide the category.
_LABEL_QUALIFIERS = frozenset(
    {
        "low",
        "high",
        "loss",
        "of",
        "lack",
        "poor",
        "excessive",
        "strong",
        "slight",
        "severe",
        "heavy",
        "mild",
        "distortion",
        "distortions",
        "change",
        "changes",
        "issue",
        "issues",
        "level",
        "levels",
        "problem",
        "problems",
        "the",
        "a",
        "an",
        "and",
        "in",
        "image",
        "over",
        "under",
        "too",
        "some",
        "visible",
        "degradation",
        "reduced",
        "increased",
        "shift",
        "balance",
        "cast",
    }
)

SEVERITIES: tuple[str, ...] = ("none", "slight", "moderate", "severe", "extreme")

#: Other words models use for a severity, lower case.
SEVERITY_SYNONYMS: dict[str, str] = {
    "no": "none",
    "not visible": "none",
    "invisible": "none",
    "absent": "none",
    "nil": "none",
    "negligible": "none",
    "not present": "none",
    "0": "none",
    "mild": "slight",
    "minor": "slight",
    "low": "slight",
    "light": "slight",
    "small": "slight",
    "slightly": "slight",
    "minimal": "slight",
    "weak": "slight",
    "1": "slight",
    "medium": "moderate",
    "moderately": "moderate",
    "average": "moderate",
    "noticeable": "moderate",
    "2": "moderate",
    "high": "severe",
    "strong": "severe",
    "heavy": "severe",
    "significant": "severe",
    "serious": "severe",
    "major": "severe",
    "severely": "severe",
    "3": "severe",
    "very severe": "extreme",
    "very high": "extreme",
    "critical": "extreme",
    "extremely": "extreme",
    "4": "extreme",
}

#: The five quality levels of scoring mode, in score order: "Bad" is c = 1, "Excellent" c = 5.
QUALITY_LEVELS: tuple[str, ...] = ("Bad", "Poor", "Fair", "Good", "Excellent")


def _words(text: str) -> str:
    return re.sub(r"[\s_]+", " ", re.sub(r"[^\w\s-]", " ", text.casefold())).strip()


def _whole(text: str, term: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text) is not None


@functools.lru_cache(maxsize=4096)
def canonical_distortion(name: str) -> str:
    """The category ``name`` stands for, spelled as in :data:`DISTORTION_CATEGORIES`.

    Cached (an answer, not a refusal: see ``state.fields``), since one costs a
    few hundred regular-expression searches.

    Accepts the category in any case ("noise"), a synonym or inflection ("blur", "blurry",
    "out of focus"), and a short label around one ("motion blur", "JPEG compression artifacts",
    "low contrast").  A label naming two categories or none raises ``ValueError``.
    """
    text = _words(name)
    for category in DISTORTION_CATEGORIES:
        if text == category.casefold():
            return category
    for category, terms in DISTORTION_TERMS.items():
        if text in terms or text.rstrip("s") in terms:
            return category
    found = {
        category
        for category, terms in DISTORTION_TERMS.items()
        if any(_whole(text, term) for term in terms)
    }
    found |= {category for category in DISTORTION_CATEGORIES if _whole(text, category.casefold())}
    leftover = [
        word
        for word in re.split(r"[\s-]+", text)
        if word
        and word not in _LABEL_QUALIFIERS
        and not any(_whole(word, t) for terms in DISTORTION_TERMS.values() for t in terms)
    ]
    if len(found) == 1 and len(leftover) <= 1:
        return found.pop()
    raise ValueError(
        f"unknown distortion category {name!r}; valid categories: "
        + ", ".join(DISTORTION_CATEGORIES)
        + (f" (it names several: {', '.join(sorted(found))})" if len(found) > 1 else "")
    )


def canonical_severity(word: str) -> str:
    """``word`` as one of :data:`SEVERITIES` ("Moderate", "medium" -> "moderate")."""
    text = _words(word)
    if text in SEVERITIES:
        return text
    if text in SEVERITY_SYNONYMS:
        return SEVERITY_SYNONYMS[text]
    found = {severity for severity in SEVERITIES if _whole(text, severity)}
    if len(found) == 1:  # "moderate blur", "severe (clearly visible)"
        return found.pop()
    raise ValueError(f"unknown severity {word!r}; valid: {', '.join(SEVERITIES)}")


def level_of(score: float) -> int:
    """The quality level (1 = Bad ... 5 = Excellent) a score in [1, 5] falls in, halves up:
    2.5 is Fair, 3.5 Good (Python's ``round`` would give Poor and Good)."""
    return min(5, max(1, math.floor(score + 0.5)))


def level_name(score: float) -> str:
    """The name of :func:`level_of` ``score``."""
    return QUALITY_LEVELS[level_of(score) - 1]


__all__ = [
    "ATTRIBUTE_TERMS",
    "BAD_QUALIFIERS",
    "DEFECT_HEADS",
    "DISTORTION_CATEGORIES",
    "DISTORTION_TERMS",
    "GOOD_QUALIFIERS",
    "POSITIVE_TERMS",
    "QUALITY_LEVELS",
    "SEVERITIES",
    "SEVERITY_SYNONYMS",
    "canonical_distortion",
    "canonical_severity",
    "level_name",
    "level_of",
]
