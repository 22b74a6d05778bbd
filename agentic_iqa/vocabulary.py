"""The agent's words and their synonyms: distortion categories, severities, quality levels.

A model writes "blur", "Motion blur" or "blurry" for the category "Blurs", "Moderate" or "medium"
for the severity "moderate"; a user writes "out of focus".  Every reader of model output and of
queries maps them here, to the one spelling the state stores, so that a right answer is never
refused for its wording.  Every inflection of a listed word is read as the word ("smearing" as
"smeared", "noisier" as "noisy"): derived by rule (:func:`inflection_stem`), not listed.  A word
that names no category (or two) is refused, never guessed.

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


_VOWELS = frozenset("aeiou")


def _pattern(word: str) -> str:
    """Return ``word`` as consonants and vowels ("c", "v"): "y" after a consonant is a vowel."""
    marks: list[str] = []
    for index, letter in enumerate(word):
        vowel = letter in _VOWELS or (letter == "y" and index > 0 and marks[-1] == "c")
        marks.append("v" if vowel else "c")
    return "".join(marks)


def _measure(word: str) -> int:
    """Return Porter's measure of ``word``: how many vowel-consonant runs it has ("blur" 1,
    "expos" 2, "tree" 0)."""
    return re.sub(r"(.)\1+", r"\1", _pattern(word)).count("vc")


def _short_syllable(word: str) -> bool:
    """Tell whether ``word`` ends consonant-vowel-consonant, the last not w, x or y ("fad", "haz":
    a silent "e" was taken off)."""
    return _pattern(word)[-3:] == "cvc" and word[-1] not in "wxy"


def inflection_stem(word: str) -> str:
    """Return ``word`` without its inflection, so that the forms of one word share a stem.

    Plurals and third persons (-s, -es, -ies), past forms (-ed, -ied) and -ing forms are taken
    off by Porter's rules: a doubled consonant is undoubled ("blurred", "blurring": "blur"), a
    silent "e" comes back where the stem is one short syllable ("faded", "fade": "fade", while
    "fad" stays "fad"), and a final silent "e" is dropped elsewhere ("noise", "noised": "nois";
    "smear", "smears", "smeared", "smearing": "smear").  Words whose ending only looks like one
    keep it: "focus", "compress", "speed", "string", "red".  Comparatives are not stems: see
    :func:`distortion_word_key`."""
    w = word.casefold()
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        w = w[:-1]
    if w.endswith("ied") and len(w) > 4:
        w = w[:-3] + "y"
    elif not w.endswith("eed"):
        for suffix in ("ing", "ed"):
            stem = w[: -len(suffix)]
            if w.endswith(suffix) and "v" in _pattern(stem) and len(stem) >= 2:
                if stem.endswith(("at", "bl", "iz")):
                    stem += "e"
                elif len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "lsz" + "aeiou":
                    stem = stem[:-1]
                elif _measure(stem) == 1 and _short_syllable(stem):
                    stem += "e"
                w = stem
                break
    if w.endswith("e") and len(w) > 2:
        rest = w[:-1]
        if _measure(rest) > 1 or (_measure(rest) == 1 and not _short_syllable(rest)):
            w = rest
    return w


def _comparable(term: str) -> bool:
    """Tell whether the one-word ``term`` takes -er and -est: an adjective in -y ("noisy") or a
    word of one syllable ("dark", "dim", "sharp"), not a past or -ing form."""
    if " " in term or "-" in term or term.endswith(("ed", "ing")):
        return False
    return term.endswith("y") or _measure(term) == 1


def distortion_word_key(word: str) -> str:
    """Return the key a word of a distortion label is matched by: its :func:`inflection_stem`, and
    for a comparative or superlative ("noisier", "darkest", "dimmer") the stem of the listed word
    it grades, when that word takes one (:func:`_comparable`); "ringer" and "blocker" grade no
    listed word ("ringing" and "blocky" are listed), so stay themselves."""
    w = word.casefold()
    for suffix, ending in (("iest", "y"), ("ier", "y"), ("est", ""), ("er", "")):
        if not w.endswith(suffix) or len(w) - len(suffix) < 2:
            continue
        base = w[: -len(suffix)] + ending
        candidates = [base, base + "e"]
        if len(base) > 2 and base[-1] == base[-2]:
            candidates.insert(0, base[:-1])  # "dimmer", "flatter"
        for candidate in candidates:
            if candidate in _ONE_WORD_TERMS and _comparable(candidate):
                return inflection_stem(candidate)
        break
    return inflection_stem(w)


def _words(text: str) -> str:
    return re.sub(r"[\s_]+", " ", re.sub(r"[^\w\s-]", " ", text.casefold())).strip()


def _whole(text: str, term: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text) is not None


#: The vocabulary's one-word terms, each with its category.
_ONE_WORD_TERMS: dict[str, str] = {
    term: category
    for category, terms in DISTORTION_TERMS.items()
    for term in terms
    if not re.search(r"[\s-]", term)
}


@functools.lru_cache(maxsize=1)
def _term_keys() -> dict[tuple[str, ...], str]:
    """Return each listed term's words as keys (:func:`distortion_word_key`) and its category."""
    return {
        tuple(distortion_word_key(word) for word in re.split(r"[\s-]+", term)): category
        for category, terms in DISTORTION_TERMS.items()
        for term in terms
    }


def inflected_categories(text: str) -> tuple[set[str], list[str]]:
    """Return the categories the words of a label name by any inflection of a listed term
    ("smearing", "noisier", "motion-blurred", "jpeg-compressed"), and its words no term covers."""
    words = [word for word in re.split(r"[\s-]+", _words(text)) if word]
    keys = [distortion_word_key(word) for word in words]
    covered = [False] * len(words)
    found: set[str] = set()
    for term, category in _term_keys().items():
        width = len(term)
        for start in range(len(keys) - width + 1):
            if tuple(keys[start : start + width]) == term:
                found.add(category)
                covered[start : start + width] = [True] * width
    leftover = [w for w, c in zip(words, covered, strict=True) if not c]
    return found, [word for word in leftover if word not in _LABEL_QUALIFIERS]


@functools.lru_cache(maxsize=4096)
def canonical_distortion(name: str) -> str:
    """The category ``name`` stands for, spelled as in :data:`DISTORTION_CATEGORIES`.

    Cached (an answer, not a refusal: see ``state.fields``), since one costs a
    few hundred regular-expression searches.

    Accepts the category in any case ("noise"), a synonym or inflection ("blur", "blurry",
    "out of focus"), and a short label around one ("motion blur", "JPEG compression artifacts",
    "low contrast").  Every inflection of a listed term is read as the term
    (:func:`inflected_categories`: "smearing" and "smears" as "smeared", "noisier" as "noisy",
    "compress" as "compressed"), where the label names no term as written.  A label naming two
    categories or none raises ``ValueError``.
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
    if not found:  # no term as written: one inflected ("smearing", "noisier", "compress")
        found, leftover = inflected_categories(text)
        if len(found) == 1 and len(leftover) <= 1:
            return found.pop()
    elif len(found) == 1:  # "blurry and smearing": the other words inflect the same category
        (category,) = found
        rest = [word for word in leftover if inflected_categories(word)[0] != {category}]
        if len(rest) <= 1:
            return category
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
    "distortion_word_key",
    "inflected_categories",
    "inflection_stem",
    "canonical_severity",
    "level_name",
    "level_of",
]
