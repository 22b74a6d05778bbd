"""Severity boundaries that transfer across degradation processes, and a detection score per
category that keeps yes/no answers No on clean photos with a little natural blur or odd
exposure."""

import json
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.fitting import evaluation_degradations as evaluation
from agentic_iqa.fitting.severity import detection_cut, fit_detector, fit_dominance, fit_indicator
from agentic_iqa.vlm.builtin import answer
from agentic_iqa.vlm.builtin.measure import measure
from agentic_iqa.vlm.builtin.severity import (
    ALWAYS_PRESENT,
    CATEGORIES,
    NO_REFERENCE,
    THRESHOLDS_FILE,
    Logistic,
    Thresholds,
    category_scores,
    default_thresholds,
    dominance,
    indicator_scores,
    presence,
)
from tests.conftest import example_photo

YES_NO = {
    "Blurs": "Is this image blurry? A. Yes B. No",
    "Noise": "Is this image noisy? A. Yes B. No",
    "Brightness change": "Is the brightness of this image wrong? A. Yes B. No",
}


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.float32) / 255.0


def test_degraded_levels_are_split_half_way_between_their_typical_readings():
    """Two tight clusters (levels 1 and 2 at 1.0 and 2.0) leave a wide gap: the boundary is its
    middle (1.5), not wherever the fewest-errors rule happens to land in it."""
    levels = np.repeat(np.arange(5), 3)
    values = np.array(
        [-1.0, 0.0, 0.5, 0.95, 1.0, 1.05, 1.9, 2.0, 2.1, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0]
    )
    indicator = fit_indicator(values, levels, rising=True)
    assert indicator.starts[1] == pytest.approx(1.5)
    assert indicator.starts[2] == pytest.approx(2.5)
    assert indicator.starts[3] == pytest.approx(3.5)
    assert 0.5 < indicator.starts[0] < 0.95  # clean vs slight: the fewest errors


def test_the_detection_cut_sits_above_what_clean_photos_read():
    clean = [0.0] * 6 + [1.2, 1.4, 1.6, 1.8]  # natural blur reads "slight" on 40 %
    present = {1: [1.1, 2.2, 2.3], 2: [2.4, 2.6, 2.8], 3: [3.2, 3.4, 3.6], 4: [4.2] * 3}
    cut = detection_cut(clean, present)
    assert 1.8 < cut <= 2.2
    assert detection_cut([0.0] * 10, present) == pytest.approx(1.0)  # never below "slight"


def test_detection_defaults_to_the_start_of_slight_and_round_trips():
    table = Thresholds({}, {}, detection={"no_reference": {"Blurs": 2.0}})
    assert table.present_from("Blurs") == 2.0
    assert table.present_from("Sharpness") == 2.0
    assert table.present_from("Noise") == 1.0
    assert table.present_from("Blurs", with_reference=True) == 1.0
    again = Thresholds.from_dict(json.loads(table.to_json()))
    assert again.detection == {"no_reference": {"Blurs": 2.0}}


def test_yes_no_answers_yes_only_from_the_detection_score():
    question = YES_NO["Blurs"]
    options = {"A": "Yes", "B": "No"}
    slight = {"Blurs": 1.5}
    assert answer._choose_option(question, options, slight, 3.0)[0] == "A"
    assert answer._choose_option(question, options, slight, 3.0, {"Blurs": 2.0})[0] == "B"
    assert answer._choose_option(question, options, {"Blurs": 2.0}, 3.0, {"Blurs": 2.0})[0] == "A"


def test_shipped_detection_is_calibrated_and_not_below_slight():
    document = json.loads(THRESHOLDS_FILE.read_text())
    for part in ("no_reference", "full_reference"):
        assert set(document["detection"][part]) == set(CATEGORIES)
        assert all(1.0 <= v <= 3.0 for v in document["detection"][part].values())
    assert default_thresholds().present_from("Blurs") > 1.0  # clean photos read some blur


def test_the_real_photo_is_not_called_blurry_noisy_or_badly_exposed(photo):
    scores = category_scores(measure(pixels(photo)))
    table = default_thresholds().detection_table()
    for category, question in YES_NO.items():
        letter = answer._choose_option(question, {"A": "Yes", "B": "No"}, scores, 3.0, table)[0]
        assert letter == "B", (category, scores[category], table[category])


@pytest.mark.parametrize(
    "kind, category",
    [
        ("defocus", "Blurs"),
        ("shot_noise", "Noise"),
        ("gamma_dark", "Brightness change"),
        ("curve_contrast", "Contrast"),
        ("hsv_desaturate", "Color distortions"),
    ],
)
def test_a_clear_distortion_of_the_other_generator_is_detected(photo, kind, category):
    scores = category_scores(measure(pixels(evaluation.degrade(photo, kind, 3))))
    assert scores[category] >= default_thresholds().present_from(category)


# -- detectors and the "which distortion" model over all indicator scores --------------------


def _readings(**values: float) -> dict[str, float]:
    return {name: values.get(name, 0.0) for name in NO_REFERENCE}


def test_a_detector_uses_the_other_readings_too():
    """Blur also lowers the measured noise: clean photos with a soft look but their grain intact
    are told from blurred copies only with the noise reading, and the fitted detector does."""
    rng = np.random.default_rng(0)
    clean = [_readings(blur=b, noise=1.0) for b in rng.uniform(0.0, 2.0, 60)]
    blurred = [_readings(blur=b, noise=0.0) for b in rng.uniform(1.0, 3.0, 60)]
    detector = fit_detector(
        clean + blurred, [False] * 60 + [True] * 60, [0] * 60 + [1, 2, 3, 4] * 15
    )
    assert detector.weights["blur"] > 0.0 > detector.weights["noise"]
    margins = [detector.logit(r) - detector.cut for r in clean + blurred]
    assert sum(m >= 0 for m in margins[:60]) == 0 and sum(m >= 0 for m in margins[60:]) == 60


def test_the_which_model_names_the_category_whose_readings_stand_out():
    rng = np.random.default_rng(1)
    rows, labels = [], []
    for category, name in (
        ("Blurs", "blur"),
        ("Noise", "noise"),
        ("Color distortions", "colour"),
        ("Brightness change", "dark"),
    ):
        for _ in range(30):
            rows.append(_readings(**{name: rng.uniform(1.0, 4.0), "bright": rng.uniform(0, 1)}))
            labels.append(category)
    model = fit_dominance(rows, labels)
    assert set(model) == {"Blurs", "Noise", "Color distortions", "Brightness change"}
    table = replace(default_thresholds(), dominance=model)
    logits = {c: m.logit(_readings(colour=3.0, bright=0.5)) for c, m in table.dominance.items()}
    assert max(logits, key=logits.__getitem__) == "Color distortions"


def test_detectors_and_the_which_model_round_trip_and_decide_without_a_reference():
    blur = Logistic({"blur": 2.0}, -1.0, cut=1.0)  # present from a blur score of 1.0
    table = replace(
        default_thresholds(),
        detectors={"Blurs": blur},
        dominance={"Blurs": Logistic({"blur": 1.0}, 0.0), "Noise": Logistic({"noise": 1.0}, 0.0)},
    )
    again = Thresholds.from_dict(json.loads(table.to_json()))
    assert again.detectors == table.detectors and again.dominance == table.dominance
    photo = measure(pixels(example_photo()))
    readings = indicator_scores(photo, None, table)
    margins = presence(photo, None, table)
    assert margins["Blurs"] == pytest.approx(
        max(
            2.0 * readings["blur"] - 2.0,
            category_scores(photo, None, table)["Blurs"] - ALWAYS_PRESENT,
        )
    )
    assert margins["Sharpness"] == margins["Blurs"]
    # No detector for Noise: the severity against the detection score, as before.
    assert margins["Noise"] == pytest.approx(
        category_scores(photo, None, table)["Noise"] - table.present_from("Noise")
    )
    # With a reference the change readings decide; no "which" model there.
    with_reference = presence(photo, photo, table)
    assert with_reference["Blurs"] == pytest.approx(-table.present_from("Blurs", True))
    assert dominance(photo, photo, table) is None
    probabilities = dominance(photo, None, table)
    assert set(probabilities) == {"Blurs", "Noise", "Sharpness"}
    assert probabilities["Blurs"] + probabilities["Noise"] == pytest.approx(1.0)


def test_an_extreme_reading_is_present_whatever_the_detector_says():
    never = Logistic({"blur": 0.0}, -10.0, cut=0.0)
    table = replace(default_thresholds(), detectors={"Blurs": never})
    photo = example_photo()
    smeared = measure(pixels(evaluation.degrade(photo, "defocus", 4)))
    assert category_scores(smeared, None, table)["Blurs"] >= ALWAYS_PRESENT
    assert presence(smeared, None, table)["Blurs"] >= 0.0
    assert presence(measure(pixels(photo)), None, table)["Blurs"] < 0.0


def test_which_distortion_follows_the_analysis_and_the_model_only_breaks_a_tie():
    """The option picked is the one the analysis rates most severe, even where the "which"
    model finds another more likely; that model decides only between equal severities."""
    question = (
        "Which distortion is most severe in this image? A. Blur B. Noise C. Colour distortion"
    )
    options = {"A": "Blur", "B": "Noise", "C": "Colour distortion"}
    severity = {"Blurs": 1.2, "Noise": 0.3, "Color distortions": 1.0}
    likely = {"Blurs": 0.2, "Noise": 0.1, "Color distortions": 0.7}
    assert answer._choose_option(question, options, severity, 3.0)[0] == "A"
    assert answer._choose_option(question, options, severity, 3.0, dominant=likely)[0] == "A"
    tied = {"Blurs": 1.2, "Noise": 0.3, "Color distortions": 1.2}
    assert answer._choose_option(question, options, tied, 3.0, dominant=likely)[0] == "C"
    assert answer._choose_option(question, options, tied, 3.0)[0] == "A"  # then the first
    least = question.replace("most", "least")
    assert answer._choose_option(least, options, severity, 3.0, dominant=likely)[0] == "B"
    yes_no = "Is this image blurry? A. Yes B. No"
    assert (
        answer._choose_option(
            yes_no, {"A": "Yes", "B": "No"}, {"Blurs": 3.0}, 3.0, present={"Blurs": -0.5}
        )[0]
        == "B"
    )
    assert (
        answer._choose_option(
            yes_no, {"A": "Yes", "B": "No"}, {"Blurs": 0.5}, 3.0, present={"Blurs": 0.1}
        )[0]
        == "A"
    )


def test_shipped_detectors_and_which_model_cover_every_category():
    table = default_thresholds()
    assert set(table.detectors) == set(CATEGORIES)
    assert set(table.dominance) == set(CATEGORIES)
    for category, own in (
        ("Blurs", "blur"),
        ("Noise", "noise"),
        ("Compression", "blocking"),
        ("Contrast", "contrast"),
        ("Color distortions", "colour"),
    ):
        assert table.detectors[category].weights[own] > 0.5, category


def test_the_real_photo_is_clean_to_the_detectors():
    margins = presence(measure(pixels(example_photo())))
    for category in CATEGORIES:
        assert margins[category] < 0.0, (category, margins[category])


@pytest.mark.parametrize(
    "kind, category",
    [
        ("defocus", "Blurs"),
        ("motion", "Blurs"),
        ("shot_noise", "Noise"),
        ("jpeg_offgrid", "Compression"),
        ("gamma_dark", "Brightness change"),
        ("gamma_bright", "Brightness change"),
        ("curve_contrast", "Contrast"),
        ("hsv_desaturate", "Color distortions"),
    ],
)
def test_a_clear_distortion_of_the_other_generator_is_detected_and_named(kind, category):
    degraded = measure(pixels(evaluation.degrade(example_photo(), kind, 3)))
    assert presence(degraded)[category] >= 0.0
    probabilities = dominance(degraded)
    assert max(CATEGORIES, key=probabilities.__getitem__) == category, probabilities
