"""The offline agent answers a yes/no question with Yes or No, the right way round: "Is it
blurry?" is Yes on a blurred photo, "Is it sharp?" and "Is it in focus?" are No there."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.fitting.degradations import degrade
from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.query import with_options
from agentic_iqa.vlm.builtin.answer import is_yes_no, positive_categories


def answer(agents: Agents, query: str, image: Path) -> str:
    return run_inprocess(query, str(image), agents=agents)["summarizer_result"].final_answer


def test_questions_are_told_yes_no_and_which_way_round():
    assert is_yes_no("Is the flower in focus?") and is_yes_no("does it look noisy")
    assert not is_yes_no("Rate the quality of this image.")
    assert not is_yes_no("Which distortion is the worst?")
    assert set(positive_categories("Is the car sharp?")) == {"Blurs", "Sharpness"}
    assert positive_categories("Is the flower in focus?")[:1] == ["Blurs"]
    assert positive_categories("Are the colours vivid?") == ["Color distortions"]
    assert positive_categories("Is this image blurry?") == []


@pytest.mark.parametrize(
    ("query", "on_blurred", "on_clean"),
    [
        ("Is this image blurry?", "Yes", "No"),
        ("Is the photo sharp?", "No", "Yes"),
        ("Is the picture in focus?", "No", "Yes"),
    ],
)
def test_a_yes_no_question_gets_yes_or_no_the_right_way_round(
    agents, photos, query, on_blurred, on_clean
):
    assert answer(agents, query, photos["blurred"]).startswith(on_blurred + ":")
    assert answer(agents, query, photos["clean"]).startswith(on_clean + ":")


def test_with_yes_and_no_options_the_letter_follows_the_same_reading(agents, photos):
    query = with_options("Is the photo sharp?", ["Yes", "No"])
    assert answer(agents, query, photos["blurred"]) == "B"
    assert answer(agents, query, photos["clean"]) == "A"


def test_a_yes_no_question_about_overall_quality_starts_with_yes_or_no(agents, photos):
    for query in ("Is this a good photo?", "Is the image of poor quality?"):
        first = answer(agents, query, photos["clean"]).split(":")[0]
        assert first in {"Yes", "No"}
    good = answer(agents, "Is this a good photo?", photos["clean"]).split(":")[0]
    poor = answer(agents, "Is the image of poor quality?", photos["clean"]).split(":")[0]
    assert good != poor


def test_a_question_that_is_not_yes_no_gets_the_finding_without_yes_or_no(agents, photos):
    severe = answer(agents, "How severe is the blur in this image?", photos["blurred"])
    assert severe.split()[0] in {"Slight", "Moderate", "Severe", "Extreme"}
    assert severe.endswith("blur") and not severe.startswith(("Yes", "No:"))
    clean = answer(agents, "How would you describe the sharpness?", photos["clean"])
    assert clean == "No loss of sharpness is visible"


def test_the_trail_never_calls_visible_what_the_answer_calls_not_visible(agents, photos, tmp_path):
    """A reading its detector puts among clean photos' (a colourful photo's "slight"
    desaturation) is described as such, not as a visible distortion; a washed-out copy is."""
    washed = tmp_path / "washed.png"
    degrade(Image.open(photos["clean"]), "desaturate", 4).save(washed)
    for image, expected in ((photos["clean"], "No:"), (washed, "Yes:")):
        state = run_inprocess("Are the colours washed out?", str(image), agents=agents)
        (item,) = state["executor_evidence"].distortion_analysis["Global"]
        assert state["summarizer_result"].final_answer.startswith(expected)
        if expected == "No:":
            assert "washed out" not in item.explanation
            assert "usual in clean photos; colours look natural" in item.explanation
        else:
            assert "usual in clean photos" not in item.explanation
            assert "colours are washed out" in item.explanation
