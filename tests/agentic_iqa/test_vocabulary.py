"""Every synonym and inflection the vocabulary lists is read: each of a listed term's inflected
forms (plural, third person, past, -ing, comparative and superlative), written by the ordinary
spelling rules of English, maps to the term's category and no other, in a plan, a detection
reply and an analysis alike; words that only look like one map to none.

The forms are made here from each term's dictionary form and word class (the table below), by
the textbook rules, independently of the stemmer under test (``vocabulary.inflection_stem``)."""

from __future__ import annotations

import json
import re

import pytest

from agentic_iqa.agents import executor
from agentic_iqa.query import distortion_words
from agentic_iqa.state import PlannerOutput
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from agentic_iqa.vocabulary import (
    DISTORTION_TERMS,
    canonical_distortion,
    inflection_stem,
)

#: Each one-word term of the vocabulary: its dictionary form and its word classes ("n" noun, "v"
#: verb, "a" adjective that takes -er and -est); "" for a word without regular inflections.
LEMMAS: dict[str, tuple[str, str]] = {
    # Blurs
    "blur": ("blur", "nv"),
    "blurs": ("blur", "nv"),
    "blurry": ("blurry", "a"),
    "blurred": ("blur", "v"),
    "blurriness": ("blurriness", ""),
    "defocus": ("defocus", "nv"),
    "defocused": ("defocus", "v"),
    "unfocused": ("unfocused", ""),
    "fuzzy": ("fuzzy", "a"),
    "smeared": ("smear", "nv"),
    "focused": ("focus", "v"),
    "unsharp": ("unsharp", ""),
    # Noise
    "noise": ("noise", "n"),
    "noisy": ("noisy", "a"),
    "grain": ("grain", "n"),
    "grainy": ("grainy", "a"),
    "graininess": ("graininess", ""),
    "speckle": ("speckle", "nv"),
    "speckled": ("speckle", "nv"),
    "noisiness": ("noisiness", ""),
    # Compression
    "compression": ("compression", "n"),
    "compressed": ("compress", "v"),
    "jpeg": ("jpeg", "n"),
    "jpg": ("jpg", ""),
    "artifact": ("artifact", "n"),
    "artifacts": ("artifact", "n"),
    "artefact": ("artefact", "n"),
    "artefacts": ("artefact", "n"),
    "blocky": ("blocky", "a"),
    "blockiness": ("blockiness", ""),
    "blocking": ("block", "v"),
    "pixelated": ("pixelate", "v"),
    "pixelation": ("pixelation", "n"),
    "banding": ("band", "v"),
    "ringing": ("ring", "v"),
    # Brightness change
    "brightness": ("brightness", ""),
    "bright": ("bright", "a"),
    "dark": ("dark", "a"),
    "darkness": ("darkness", ""),
    "dim": ("dim", "av"),
    "exposure": ("exposure", "n"),
    "exposed": ("expose", "v"),
    "overexposed": ("overexpose", "v"),
    "overexposure": ("overexposure", "n"),
    "underexposed": ("underexpose", "v"),
    "underexposure": ("underexposure", "n"),
    "lighting": ("lighting", "n"),
    "illumination": ("illumination", "n"),
    "underlit": ("underlit", ""),
    # Contrast
    "contrast": ("contrast", "nv"),
    "hazy": ("hazy", "a"),
    "haze": ("haze", "nv"),
    "faded": ("fade", "v"),
    "flat": ("flat", "a"),
    # Color distortions
    "color": ("color", "nv"),
    "colour": ("colour", "nv"),
    "colors": ("color", "nv"),
    "colours": ("colour", "nv"),
    "colored": ("color", "v"),
    "coloured": ("colour", "v"),
    "saturation": ("saturation", "n"),
    "saturated": ("saturate", "v"),
    "desaturated": ("desaturate", "v"),
    "oversaturated": ("oversaturate", "v"),
    "tint": ("tint", "nv"),
    "hue": ("hue", "n"),
    # Sharpness
    "sharp": ("sharp", "a"),
    "sharpness": ("sharpness", ""),
    "crisp": ("crisp", "a"),
    "crispness": ("crispness", ""),
    "clarity": ("clarity", "n"),
    "detail": ("detail", "nv"),
    "details": ("detail", "nv"),
    "oversharpened": ("oversharpen", "v"),
    "oversharpening": ("oversharpen", "v"),
    "sharpening": ("sharpen", "v"),
}

VOWELS = "aeiou"


def _doubles(word: str) -> bool:
    """One syllable ending consonant-vowel-consonant: the consonant doubles ("blur", "dim")."""
    return (
        len(re.findall(r"[aeiouy]+", word)) == 1
        and len(word) >= 3
        and word[-1] not in VOWELS + "wxy"
        and word[-2] in VOWELS
        and word[-3] not in VOWELS
    )


def plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in VOWELS:
        return word[:-1] + "ies"
    return word + "s"


def suffixed(word: str, suffix: str) -> str:
    """``word`` + "ed", "ing", "er" or "est" by the spelling rules: a silent e dropped, y after a
    consonant to i, a short syllable's consonant doubled."""
    if word.endswith("e") and suffix != "ing":
        return word + suffix[1:]
    if word.endswith("e") and not word.endswith("ee"):
        return word[:-1] + suffix
    if word.endswith("y") and word[-2] not in VOWELS and suffix != "ing":
        return word[:-1] + "i" + suffix
    if _doubles(word):
        return word + word[-1] + suffix
    return word + suffix


def inflections(lemma: str, classes: str) -> set[str]:
    forms = {lemma}
    if "n" in classes or "v" in classes:
        forms.add(plural(lemma))
    if "v" in classes:
        forms |= {suffixed(lemma, "ed"), suffixed(lemma, "ing")}
    if "a" in classes:
        forms |= {suffixed(lemma, "er"), suffixed(lemma, "est")}
    return forms


def test_the_spelling_rules_make_the_forms_of_english():
    assert inflections("smear", "nv") == {"smear", "smears", "smeared", "smearing"}
    assert inflections("blur", "nv") == {"blur", "blurs", "blurred", "blurring"}
    assert inflections("noisy", "a") == {"noisy", "noisier", "noisiest"}
    assert inflections("dim", "av") == {"dim", "dims", "dimmed", "dimming", "dimmer", "dimmest"}
    assert inflections("fade", "v") == {"fade", "fades", "faded", "fading"}
    assert inflections("compress", "v") == {"compress", "compresses", "compressed", "compressing"}
    assert inflections("focus", "v") == {"focus", "focuses", "focused", "focusing"}


ONE_WORD = {
    term: category
    for category, terms in DISTORTION_TERMS.items()
    for term in terms
    if not re.search(r"[\s-]", term)
}


def test_every_one_word_term_has_its_dictionary_form_here():
    """A term added to the vocabulary gets its forms checked: it must be added above."""
    assert set(ONE_WORD) == set(LEMMAS)


def _forms() -> list[tuple[str, str, str]]:
    return [
        (term, form, category)
        for term, category in ONE_WORD.items()
        for form in sorted(inflections(*LEMMAS[term]) | {term})
    ]


@pytest.mark.parametrize(("term", "form", "category"), _forms())
def test_every_inflection_of_a_term_maps_to_its_category(term, form, category):
    assert canonical_distortion(form) == category, (term, form)
    assert canonical_distortion(form.capitalize()) == category
    assert canonical_distortion(f"slight {form}") == category  # a qualifier around it


def test_no_inflection_belongs_to_two_categories():
    owners: dict[str, set[str]] = {}
    for _, form, category in _forms():
        owners.setdefault(form, set()).add(category)
    assert {form: c for form, c in owners.items() if len(c) > 1} == {}


@pytest.mark.parametrize(
    ("written", "category"),
    [
        ("motion blurred", "Blurs"),
        ("motion-blurring", "Blurs"),
        ("washing out", "Contrast"),
        ("washes out", "Contrast"),
        ("colour casts", "Color distortions"),
        ("clipping highlights", "Brightness change"),
        ("over-exposing", "Brightness change"),
        ("over-sharpened edges", "Sharpness"),
        ("jpeg-compressed", "Compression"),
        ("heavy smearing", "Blurs"),
        ("blurry and smearing", "Blurs"),
        ("light noise", "Noise"),  # "light" a severity here, not "lighting"
    ],
)
def test_labels_of_several_words_read_their_inflected_terms(written, category):
    assert canonical_distortion(written) == category


@pytest.mark.parametrize(
    "written",
    [
        "blurb",
        "blurt",
        "noisette",
        "nosy",
        "compressor",
        "fad",
        "fads",
        "dime",
        "dimes",
        "string",
        "speed",
        "red",
        "bandage",
        "ringer",
        "blocker",
        "sharpie",
        "hazel",
        "lightning",
        "exposition",
        "smearing and noisier",  # two categories: refused
    ],
)
def test_words_that_only_look_like_an_inflection_map_to_none(written):
    with pytest.raises(ValueError, match="unknown distortion category"):
        canonical_distortion(written)


@pytest.mark.parametrize(
    ("word", "stem"),
    [
        ("smear", "smear"),
        ("smeared", "smear"),
        ("smearing", "smear"),
        ("smears", "smear"),
        ("blurred", "blur"),
        ("blurring", "blur"),
        ("faded", "fade"),
        ("fading", "fade"),
        ("fad", "fad"),
        ("focus", "focus"),
        ("focuses", "focus"),
        ("compresses", "compress"),
        ("pixelated", "pixelat"),
        ("pixelate", "pixelat"),
        ("speed", "speed"),
        ("string", "string"),
    ],
)
def test_the_stem_takes_off_inflections_only(word, stem):
    assert inflection_stem(word) == stem


def test_a_plan_keeps_an_inflected_label():
    plan = PlannerOutput.model_validate(
        {
            "query_type": "IQA",
            "query_scope": ["car"],
            "distortion_source": "Explicit",
            "distortions": {"car": ["smearing"], "sky": ["noisier", "lens flare"]},
            "reference_mode": "No-Reference",
            "required_tool": None,
            "plan": {
                "distortion_detection": False,
                "distortion_analysis": True,
                "tool_selection": False,
                "tool_execution": False,
            },
        }
    )
    assert plan.distortions == {"car": ["Blurs"], "sky": ["Noise"]}


class Detecting:
    """A detection model that answers ``reply``."""

    backend, model = "stub", "stub"

    def __init__(self, reply: dict) -> None:
        self.reply = reply

    def complete(self, request: VLMRequest) -> VLMResponse:
        return VLMResponse(json.dumps(self.reply), self.model)


def test_a_detection_reply_keeps_an_inflected_label():
    plan = PlannerOutput.model_validate(
        {
            "query_type": "IQA",
            "query_scope": ["car"],
            "distortion_source": "Inferred",
            "reference_mode": "No-Reference",
            "plan": {
                "distortion_detection": True,
                "distortion_analysis": True,
                "tool_selection": True,
                "tool_execution": True,
            },
        }
    )
    notes: list[str] = []
    found = executor.detect_distortions(
        Detecting({"distortion_set": {"car": ["smearing", "overexposing", "grainier"]}}),
        "How does the car look?",
        "image.png",
        None,
        plan,
        notes=notes,
    )
    assert found == {"car": ["Blurs", "Brightness change", "Noise"]} and notes == []


def test_content_words_in_a_query_keep_their_reading():
    """The query's words are read as before: an inflection of an ambiguous word before a noun
    ("the darker car") names nothing, and "smearing" in a question is left to the model."""
    words = distortion_words("Is the darker car blurry?")
    assert words.certain == ("Blurs",) and words.possible == ()
    assert distortion_words("Is the dark car blurry?").possible == ()
