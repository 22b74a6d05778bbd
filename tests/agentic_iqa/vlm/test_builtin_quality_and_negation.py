"""The offline agent's yes/no answers about overall quality follow its own opinion, and a
question asked the negative way ("free of noise?", "without blur?") is answered the right way
round: "Is this image of good quality? A. Yes B. No" is Yes for a LIVE-C photo with MOS 91
and No for one with MOS 3, and "Is the image free of noise?" is never "No: noise is not
visible"."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.query import with_options
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vlm.builtin.answer import (
    GOOD_FROM,
    absence_asked,
    asks_overall_quality,
    overall_yes,
)
from iqa_tools import ToolRegistry, ToolSettings

#: LIVE-C dev photos at the two ends of human opinion (MOS on 0-100).
BEST, WORST = "844.JPG", "673.JPG"


def _agents(**settings) -> Agents:
    client = BuiltinClient()
    return Agents(
        planner=client,
        executor=client,
        summarizer=client,
        registry=ToolRegistry(ToolSettings(device="cpu", tool_cache="memory", **settings)),
    )


def answer(agents: Agents, query: str, image: Path) -> str:
    return run_inprocess(query, str(image), agents=agents)["summarizer_result"].final_answer


@pytest.mark.parametrize(
    ("query", "absent"),
    [
        ("Is the image free of noise?", ["Noise"]),
        ("Is the image free from blur?", ["Blurs"]),
        ("Is the photo without any visible artefacts?", ["Compression"]),
        ("Is there no noise in the sky?", ["Noise"]),
        ("Does the photo lack any grain?", ["Noise"]),
        ("Is the picture blur-free?", ["Blurs"]),
        ("Is the image free of noise and blur?", ["Noise", "Blurs"]),
        ("Is the photo not blurry?", ["Blurs"]),
        ("Is the image free of contrast problems?", ["Contrast"]),
        # A negated quality asks whether the defect is there; a positive word asks for absence.
        ("Does the image lack sharpness?", []),
        ("Does the image lack the contrast it needs?", []),
        ("Is the photo not sharp?", []),
        ("Is the car sharp?", ["Blurs", "Sharpness"]),
        ("Is this image blurry?", []),
        ("Does this image have too little contrast?", []),
    ],
)
def test_what_a_question_asks_to_be_absent(query, absent):
    assert absence_asked(query) == absent


@pytest.mark.parametrize(
    ("query", "image", "expected"),
    [
        ("Is the image free of noise?", "clean", "Yes:"),
        ("Is the image free of noise?", "noisy", "No:"),
        ("Is the image free from blur?", "blurred", "No:"),
        ("Is the image free from blur?", "clean", "Yes:"),
        ("Is the photo without any visible blur?", "blurred", "No:"),
        ("Is the picture noise-free?", "noisy", "No:"),
    ],
)
def test_a_negatively_phrased_question_is_answered_the_right_way_round(
    agents, photos, query, image, expected
):
    said = answer(agents, query, photos[image])
    assert said.startswith(expected), said
    # The finding after Yes/No agrees with it: never "No: noise is not visible".
    if expected == "No:":
        assert "not visible" not in said, said
    else:
        assert said.startswith("Yes: no ") and said.endswith("is visible"), said


@pytest.mark.parametrize(
    ("question", "image", "letter"),
    [
        ("Is the image free of noise?", "noisy", "B"),
        ("Is the image free of noise?", "clean", "A"),
        ("Is the image free from blur?", "blurred", "B"),
        ("Is the image free from blur?", "clean", "A"),
    ],
)
def test_with_yes_no_options_a_negative_question_picks_the_right_letter(
    agents, photos, question, image, letter
):
    assert answer(agents, with_options(question, ["Yes", "No"]), photos[image]) == letter


def test_overall_quality_yes_no_splits_the_fair_level_at_the_middle_of_the_scale():
    assert asks_overall_quality("Is this image of good quality?")
    assert asks_overall_quality("Is the photo usable?")
    assert not asks_overall_quality("Is there a dog in the picture?")
    assert GOOD_FROM == 3.0
    for score, good in ((4.2, True), (3.4, True), (3.0, True), (2.9, False), (1.8, False)):
        assert overall_yes("Is this image of good quality?", score)[0] is good
        assert overall_yes("Is the image of poor quality?", score)[0] is not good
        assert overall_yes("Is this image not of good quality?", score)[0] is not good
    assert overall_yes("Is this an excellent photo?", 3.6)[0] is False
    assert overall_yes("Is this an excellent photo?", 4.7)[0] is True
    yes, why = overall_yes("Is this image of good quality?", 3.46)
    assert yes and "Fair" in why and "at or above the middle" in why


@pytest.mark.data
def test_good_quality_follows_the_opinion_on_real_photos_at_both_ends_of_mos(
    livec_dir, weights_dir
):
    """MOS 91 is Yes and MOS 3 No, as options and as a free question, and "poor quality" the
    other way round: the letter follows the builtin's own opinion of the photo."""
    agents = _agents(weights_dir=str(weights_dir))
    best, worst = livec_dir / "images" / BEST, livec_dir / "images" / WORST
    good = with_options("Is this image of good quality?", ["Yes", "No"])
    poor = with_options("Is this image of poor quality?", ["Yes", "No"])
    assert answer(agents, good, best) == "A"
    assert answer(agents, good, worst) == "B"
    assert answer(agents, poor, best) == "B"
    assert answer(agents, poor, worst) == "A"
    assert answer(agents, "Is this image of good quality?", best).startswith("Yes:")
    assert answer(agents, "Is this image of good quality?", worst).startswith("No:")
