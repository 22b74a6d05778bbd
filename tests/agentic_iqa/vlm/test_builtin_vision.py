"""The builtin backend's measurements respond to the distortion they are meant for, keep
exposure and contrast apart, measure named regions on their crop, and do not cite evidence a
tool cannot give."""

import json
import math

import numpy as np
import pytest
from PIL import Image, ImageFilter

from agentic_iqa.agents.fusion import fuse
from agentic_iqa.fitting import evaluation_degradations as evaluation
from agentic_iqa.fitting.degradations import degrade
from agentic_iqa.fitting.opinion import fit, fusion_target
from agentic_iqa.fitting.severity import fit_indicator
from agentic_iqa.vlm.builtin import answer
from agentic_iqa.vlm.builtin.measure import measure
from agentic_iqa.vlm.builtin.opinion import (
    WEIGHTS_FILE,
    OpinionModels,
    default_models,
)
from agentic_iqa.vlm.builtin.severity import (
    THRESHOLDS_FILE,
    Indicator,
    category_scores,
    indicator_scores,
    severity_word,
)
from agentic_iqa.vlm.builtin.vision import analyse, detect
from tests.agentic_iqa.conftest import EXAMPLE


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.float32) / 255.0


def scores_of(image: Image.Image, reference: Image.Image | None = None) -> dict[str, float]:
    return category_scores(
        measure(pixels(image)), measure(pixels(reference)) if reference is not None else None
    )


@pytest.mark.parametrize(
    "kind, category",
    [
        ("blur", "Blurs"),
        ("noise", "Noise"),
        ("jpeg", "Compression"),
        ("dark", "Brightness change"),
        ("contrast", "Contrast"),
        ("desaturate", "Color distortions"),
    ],
)
def test_each_indicator_grows_with_its_distortion_level(photo, kind, category):
    values = [scores_of(degrade(photo, kind, level))[category] for level in (0, 1, 2, 3, 4)]
    assert values == sorted(values)
    assert values[4] >= 3.0 > values[0]


@pytest.mark.parametrize("kind", sorted(evaluation.DEGRADATIONS))
def test_severity_is_monotone_in_the_test_generators_level(photo, kind):
    """The other generator (never calibrated on) still moves its category the right way (for
    brightening, the too-bright side: this photo starts on the dark side of normal)."""
    category = evaluation.DEGRADATIONS[kind][0]

    def severity(image: Image.Image) -> float:
        if kind == "gamma_bright":
            return indicator_scores(measure(pixels(image)))["bright"]
        return scores_of(image)[category]

    values = [severity(evaluation.degrade(photo, kind, level)) for level in (0, 1, 2, 3, 4)]
    assert values == sorted(values)
    assert values[4] >= values[0] + 2.0


def test_test_generator_is_deterministic_and_keeps_the_size(photo):
    for kind in evaluation.DEGRADATIONS:
        first = evaluation.degrade(photo, kind, 2)
        assert first.size == photo.size
        assert np.array_equal(pixels(first), pixels(evaluation.degrade(photo, kind, 2)))
    with pytest.raises(ValueError):
        evaluation.degrade(photo, "blur", 1)  # a calibration kind, not a test kind


def test_extreme_distortions_are_the_top_category(photo):
    for kind, category in (("blur", "Blurs"), ("noise", "Noise"), ("jpeg", "Compression")):
        scores = scores_of(degrade(photo, kind, 4))
        assert max(scores, key=scores.get) in {category, "Sharpness"}


@pytest.mark.parametrize(
    "darkened", [lambda p: degrade(p, "dark", 3), lambda p: evaluation.degrade(p, "gamma_dark", 3)]
)
def test_a_darkened_image_is_a_brightness_change_not_low_contrast(photo, darkened):
    clean, dark = scores_of(photo), scores_of(darkened(photo))
    assert dark["Brightness change"] >= clean["Brightness change"] + 1.5
    assert dark["Contrast"] <= clean["Contrast"] + 0.25  # no lower contrast read into it
    assert max(dark, key=dark.get) == "Brightness change"


@pytest.mark.parametrize(
    "flattened",
    [lambda p: degrade(p, "contrast", 3), lambda p: evaluation.degrade(p, "curve_contrast", 3)],
)
def test_a_contrast_reduced_image_is_low_contrast_not_a_brightness_change(photo, flattened):
    clean, flat = scores_of(photo), scores_of(flattened(photo))
    assert flat["Contrast"] >= clean["Contrast"] + 1.5
    assert flat["Brightness change"] <= clean["Brightness change"] + 0.25
    assert max(flat, key=flat.get) == "Contrast"


def test_with_a_reference_the_change_is_measured(photo):
    for kind, category in (
        ("defocus", "Blurs"),
        ("shot_noise", "Noise"),
        ("gamma_dark", "Brightness change"),
        ("curve_contrast", "Contrast"),
        ("hsv_desaturate", "Color distortions"),
    ):
        scores = scores_of(evaluation.degrade(photo, kind, 3), photo)
        assert max(scores, key=scores.get) in {category, "Sharpness"}, (kind, scores)
    assert max(scores_of(photo, photo).values()) == 0.0


def test_severity_words():
    assert [severity_word(s) for s in (0.0, 1.2, 2.5, 3.9, 4.7)] == [
        "none",
        "slight",
        "moderate",
        "severe",
        "extreme",
    ]


def test_calibrated_indicator_is_monotone_and_separates_levels():
    rng = np.random.default_rng(0)
    levels = np.repeat(np.arange(5), 40)
    values = levels * 1.0 + rng.normal(0, 0.2, levels.size)
    rising = fit_indicator(values, levels, rising=True)
    assert list(rising.starts) == sorted(rising.starts)
    assert [int(rising.score(v)) for v in (0.0, 1.0, 2.0, 3.0, 4.0)] == [0, 1, 2, 3, 4]
    falling = fit_indicator(-values, levels, rising=False)
    assert [int(falling.score(-v)) for v in (0.0, 1.0, 2.0, 3.0, 4.0)] == [0, 1, 2, 3, 4]
    assert Indicator(0.0, (1.0, 2.0, 3.0, 4.0)).score(100.0) < 5.0


def test_shipped_parameters_say_what_they_were_fitted_on():
    """The severity thresholds were calibrated on FIT only; the overall opinion was fitted on
    all 250 dev photos, and says so: every dev photo is in-sample for
    scoring (its SHA-256 is in fitted_images.json, so `eval compare` warns)."""
    opinion = json.loads(WEIGHTS_FILE.read_text())["metadata"]
    severity = json.loads(THRESHOLDS_FILE.read_text())["metadata"]
    assert "sha256" in severity["split_rule"] and "HELD-OUT" in severity["split_rule"]
    assert severity["fit_photos"] + severity["held_out_photos"] == 250
    assert severity["calibration_photos"] <= severity["fit_photos"] < 250
    assert opinion["photos"] == 250 and "HELD-OUT" in opinion["in_sample"]
    assert "opinion_selection.py" in opinion["selected_by"]
    fitted = json.loads(WEIGHTS_FILE.with_name("fitted_images.json").read_text())
    assert fitted["sets"]["livec-dev"]["count"] == 250 == len(fitted["sha256"])
    models = default_models()
    assert isinstance(models, OpinionModels)
    weights = models.for_tools(["BRISQUE"]).weights
    assert "tool_mean" in weights and any(name.startswith("s2_") for name in weights)


# -- regions ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def half_blurred(photo, tmp_path_factory) -> str:
    """The photo with its right half heavily blurred."""
    image = photo.copy()
    width, height = image.size
    right = image.crop((width // 2, 0, width, height)).filter(ImageFilter.GaussianBlur(6))
    image.paste(right, (width // 2, 0))
    path = tmp_path_factory.mktemp("regions") / "half_blurred.png"
    image.save(path)
    return str(path)


def test_a_named_region_is_measured_on_its_crop(half_blurred):
    query = "Is the right half blurry compared to the left half?"
    result = analyse(half_blurred, {"right half": ["Blurs"], "left half": ["Blurs"]}, query)
    levels = {
        key: ["none", "slight", "moderate", "severe", "extreme"].index(items[0]["severity"])
        for key, items in result.items()
    }
    assert levels["right half"] >= 3 and levels["left half"] <= 1
    assert "measured on the right half" in result["right half"][0]["explanation"]
    assert "measured on the left half" in result["left half"][0]["explanation"]
    detected = detect(half_blurred, ["right half", "left half"], query)
    assert detected["right half"][0] == "Blurs"


def test_an_object_gets_the_whole_image_and_says_so(half_blurred):
    result = analyse(half_blurred, {"car": ["Blurs"]}, "Is the car blurry?")
    explanation = result["car"][0]["explanation"]
    assert "measured on the whole image: the offline backend cannot locate 'the car'" in explanation


def test_a_quadrant_query_answers_from_the_quadrant(half_blurred):
    context = {
        "query": "Is the top-left corner blurry?",
        "image_path": half_blurred,
        "plan": {"plan": {"distortion_analysis": True}, "query_scope": ["top-left corner"]},
        "distortion_analysis": analyse(
            half_blurred, {"top-left corner": ["Blurs"]}, "Is the top-left corner blurry?"
        ),
        "quality_scores": None,
    }
    reply = answer.explain(context)
    assert reply["final_answer"].startswith("No")
    assert "measured on the top-left quarter" in reply["quality_reasoning"]
    context["query"] = "Is the top-right corner blurry?"
    context["plan"]["query_scope"] = ["top-right corner"]
    context["distortion_analysis"] = analyse(
        half_blurred, {"top-right corner": ["Blurs"]}, context["query"]
    )
    assert answer.explain(context)["final_answer"].startswith("Yes")


# -- evidence a tool cannot give --------------------------------------------------------------


def noise_context(image: str, tool: str, score: float, query: str = "Is the image noisy?"):
    return {
        "query": query,
        "image_path": image,
        "plan": {
            "plan": {"distortion_analysis": True, "tool_execution": True},
            "query_scope": "Global",
        },
        "distortion_analysis": analyse(image, {"Global": ["Noise"]}, query),
        "quality_scores": {"Global": {"Noise": [tool, score]}},
    }


def test_a_saturated_tool_score_is_not_cited_as_the_reason():
    reply = answer.explain(noise_context(str(EXAMPLE), "PIQE", 1.0))
    assert reply["final_answer"] == "No: noise is not visible"
    reasoning = reply["quality_reasoning"]
    assert "PIQE rates" not in reasoning
    assert "Not used as evidence: PIQE 1.00/5" in reasoning and "end of its scale" in reasoning
    assert "noise sigma" in reasoning  # the measurement that did answer is shown
    assert answer.saturated("PIQE", 1.0) and answer.saturated("BRISQUE", 3.33)
    assert not answer.saturated("BRISQUE", 2.6)


def test_a_tool_that_does_not_measure_the_asked_distortion_is_not_cited():
    reasoning = answer.explain(noise_context(str(EXAMPLE), "BRISQUE", 2.6))["quality_reasoning"]
    assert "BRISQUE rates" not in reasoning
    assert (
        "BRISQUE 2.60/5 for the whole image (an overall-quality score; it does not measure "
        "noise)" in reasoning
    )
    # An overall question may cite it; a tool whose strengths list the distortion is cited too.
    overall = noise_context(str(EXAMPLE), "BRISQUE", 2.6, "How is the quality of this photo?")
    assert "BRISQUE rates the whole image 2.60/5." in answer.explain(overall)["quality_reasoning"]
    assert (
        "QAlign rates the whole image 3.10/5."
        in answer.explain(noise_context(str(EXAMPLE), "QAlign", 3.1))["quality_reasoning"]
    )


def test_the_opinion_is_a_gaussian_around_the_estimate_and_fuses_as_fitted():
    context = noise_context(str(EXAMPLE), "BRISQUE", 2.2, "Rate the quality of this image.")
    estimate = answer.quality_estimate(context)
    letters = answer.level_probabilities(context)
    probabilities = {5 - "ABCDE".index(letter): p for letter, p in letters.items()}
    assert math.isclose(sum(letters.values()), 1.0)
    assert max(probabilities, key=probabilities.get) == round(estimate)
    # The paper's fusion lands on the precision-weighted mean of the tool and the opinion
    # (what opinion.fusion_target inverts when fitting).
    precision = 1 / answer.OPINION_SIGMA**2
    centre = (2.0 * 2.2 + precision * estimate) / (2.0 + precision)
    weights = {c: math.exp(-((c - centre) ** 2) * (2.0 + precision) / 2) for c in range(1, 6)}
    expected = sum(c * w for c, w in weights.items()) / sum(weights.values())
    assert fuse([2.2], probabilities) == pytest.approx(expected, abs=1e-6)
    assert fusion_target(centre, 2.2, answer.OPINION_SIGMA) == pytest.approx(estimate)


def test_damage_beyond_the_fitted_range_still_lowers_the_opinion():
    model = fit(
        [{"blur": b} for b in np.linspace(0, 1, 50)], list(np.linspace(4, 3.5, 50)), ridge=0.0
    )
    assert model.predict({"blur": 3.0}, None) < model.predict({"blur": 1.0}, None) - 0.9
    assert model.predict({"blur": -5.0}, None) == pytest.approx(
        model.predict({"blur": model.lows["blur"]}, None)
    )
