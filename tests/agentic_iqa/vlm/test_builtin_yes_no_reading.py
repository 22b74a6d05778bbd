"""The rule by which the offline agent reads which way round a yes/no question asks,
tested as a rule: every negation against every kind of defect, each turned round again by
"not", qualities and their un-words, and respellings.  A defect word asks whether it is there;
a quality word ("sharp", "clean") whether its defect is not; each negation that governs a word
turns that round once ("not free of noise" twice); an attribute ("contrast", "detail") asks
for its defect however it is negated."""

from __future__ import annotations

import pytest

from agentic_iqa.vlm.builtin.answer import (
    GOOD_FROM,
    TOP_FROM,
    absence_asked,
    is_yes_no,
    overall_yes,
    positive_categories,
)

#: A defect named by a noun, and its category.
NOUNS = [
    ("noise", "Noise"),
    ("grain", "Noise"),
    ("blur", "Blurs"),
    ("JPEG artefacts", "Compression"),
    ("colour cast", "Color distortions"),
    ("haze", "Contrast"),
]
#: Ways to ask that a defect be absent, each with the same turned round by one more "not".
ABSENT_AND_NEGATED = [
    ("Is the photo free of {}?", "Is the photo not free of {}?"),
    ("Is the photo free from {}?", "Is the photo not free from {}?"),
    ("Is the photo clear of {}?", "Is the photo not clear of {}?"),
    ("Is the photo without {}?", "Is the photo not without {}?"),
    ("Is the photo devoid of {}?", "Is the photo not devoid of {}?"),
    ("Does the photo lack {}?", "Does the photo not lack {}?"),
    ("Is the photo {}-free?", "Is the photo not {}-free?"),
    ("Is {} absent from the photo?", "Is {} not absent from the photo?"),
    ("Is {} invisible here?", "Is {} not invisible here?"),
    ("Is there no {}?", "Is there not no {}?"),
    ("Does the photo show an absence of {}?", "Does the photo not show an absence of {}?"),
]
#: Quality words of sharpness, and how each is turned round by a prefix.
SHARPNESS_WORDS = ["sharp", "crisp", "in focus", "focused", "clear"]
UN_WORDS = ["unsharp", "unfocused", "unclear", "un-sharp", "non-sharp"]
#: Attributes: their lack is their defect, so any negation still asks whether it is there.
ATTRIBUTES = [
    ("detail", "Sharpness"),
    ("sharpness", "Sharpness"),
    ("contrast", "Contrast"),
    ("focus", "Blurs"),
]


@pytest.mark.parametrize(("absent", "negated"), ABSENT_AND_NEGATED)
@pytest.mark.parametrize(("noun", "category"), NOUNS)
def test_every_negation_asks_for_absence_and_one_more_turns_it_back(
    absent, negated, noun, category
):
    assert absence_asked(absent.format(noun)) == [category]
    assert absence_asked(negated.format(noun)) == []
    assert absence_asked(f"Is there {noun} in the photo?") == []


@pytest.mark.parametrize(("noun", "category"), NOUNS)
def test_negations_reach_every_defect_listed_with_the_first(noun, category):
    other, other_category = ("blur", "Blurs") if category != "Blurs" else ("noise", "Noise")
    for question in (
        f"Is the photo free of {noun} and {other}?",
        f"Is the photo without any {noun} or {other}?",
        f"Is the photo neither {noun}-free nor {other}-free?",
    ):
        expected = [category, other_category] if "neither" not in question else []
        assert absence_asked(question) == expected, question
    # A clause of its own is not under the first one's negation.
    assert absence_asked(f"Is the photo free of {noun}, but does it show {other}?") == [category]


@pytest.mark.parametrize("word", SHARPNESS_WORDS)
def test_a_quality_asks_for_absence_and_not_turns_it_round(word):
    both = ["Blurs", "Sharpness"]
    assert absence_asked(f"Is the photo {word}?") == both
    assert positive_categories(f"Is the photo {word}?") == both
    assert absence_asked(f"Is the photo not {word}?") == []
    assert positive_categories(f"Is the photo not {word}?") == []
    assert absence_asked(f"Is the photo lacking in {word} detail?") == []


@pytest.mark.parametrize("word", UN_WORDS)
def test_an_un_word_asks_for_the_defect_and_not_turns_it_back(word):
    assert absence_asked(f"Is the photo {word}?") == []
    assert positive_categories(f"Is the photo {word}?") == []
    assert absence_asked(f"Is the photo not {word}?") == ["Blurs", "Sharpness"]


def test_clear_of_is_the_negation_not_the_quality_clear():
    assert absence_asked("Is the image clear of noise?") == ["Noise"]
    assert positive_categories("Is the image clear of noise?") == []
    assert absence_asked("Is the image clean of grain?") == ["Noise"]
    assert absence_asked("Is the image clear?") == ["Blurs", "Sharpness"]
    assert absence_asked("Is the image clear and free of noise?") == ["Blurs", "Sharpness", "Noise"]


@pytest.mark.parametrize(("attribute", "category"), ATTRIBUTES)
def test_an_attribute_asks_for_its_defect_however_it_is_negated(attribute, category):
    for question in (
        f"Does the photo lack {attribute}?",
        f"Is there no {attribute}?",
        f"Is the photo without {attribute}?",
        f"Is the {attribute} poor?",
        f"Is there a loss of {attribute}?",
        f"Is there not enough {attribute}?",
    ):
        assert absence_asked(question) == [], question
    # A good word beside it makes it a quality, a defect noun after it a defect.
    assert absence_asked(f"Is there enough {attribute}?") == [category]
    assert absence_asked(f"Is the {attribute} good?") == [category]
    assert absence_asked(f"Is the {attribute} not good?") == []
    assert absence_asked(f"Is the photo free of {attribute} problems?") == [category]


@pytest.mark.parametrize(
    "question",
    [
        "IS THE PHOTO FREE OF NOISE?",
        "is  the photo   noise free?",
        "Is the photo noise-free",
        "Isn\u2019t the photo free of noise?",
        "Answer yes or no: is noise absent from the photo?",
        "Is the photo free of noise or not?",
    ],
)
def test_respellings_read_alike(question):
    assert is_yes_no(question)
    assert absence_asked(question) == ["Noise"]


def test_an_opening_negated_verb_negates_nothing_but_one_later_does():
    assert is_yes_no("Isn't the photo noisy?") and is_yes_no("Doesn't it lack noise?")
    assert absence_asked("Isn't the photo noisy?") == []
    assert absence_asked("Doesn't the photo lack noise?") == ["Noise"]
    assert absence_asked("Is it true that the photo isn't noisy?") == ["Noise"]


def test_overall_words_are_turned_round_by_the_same_rule():
    for score in (1.8, 2.9, 3.0, 3.6, 4.2, 4.8):
        good = score >= GOOD_FROM
        assert overall_yes("Is the photo acceptable?", score)[0] is good
        assert overall_yes("Is the photo unacceptable?", score)[0] is not good
        assert overall_yes("Is the photo not bad?", score)[0] is good
        assert overall_yes("Is the photo not of good quality?", score)[0] is not good
        assert overall_yes("Is the photo excellent?", score)[0] is (score >= TOP_FROM)
        assert overall_yes("Is the photo not excellent?", score)[0] is (score < TOP_FROM)
