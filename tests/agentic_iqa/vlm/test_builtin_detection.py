"""Severity boundaries that transfer across degradation processes, and a detection score per
category that keeps yes/no answers No on clean photos with a little natural blur or odd
exposure."""

import json

import numpy as np
import pytest
from PIL import Image

from agentic_iqa import synthetic_test
from agentic_iqa.vlm.builtin import answer
from agentic_iqa.vlm.builtin.measure import measure
from agentic_iqa.vlm.builtin.severity import (
    CATEGORIES,
    THRESHOLDS_FILE,
    Thresholds,
    category_scores,
    default_thresholds,
    detection_cut,
    fit_indicator,
)
from tests.agentic_iqa.conftest import EXAMPLE

YES_NO = {"Blurs": "Is this image blurry? A. Yes B. No",
          "Noise": "Is this image noisy? A. Yes B. No",
          "Brightness change": "Is the brightness of this image wrong? A. Yes B. No"}


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.float32) / 255.0


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.open(EXAMPLE).convert("RGB")


def test_degraded_levels_are_split_half_way_between_their_typical_readings():
    """Two tight clusters (levels 1 and 2 at 1.0 and 2.0) leave a wide gap: the boundary is its
    middle (1.5), not wherever the fewest-errors rule happens to land in it."""
    levels = np.repeat(np.arange(5), 3)
    values = np.array([-1.0, 0.0, 0.5, 0.95, 1.0, 1.05, 1.9, 2.0, 2.1, 3.0, 3.0, 3.0,
                       4.0, 4.0, 4.0])
    indicator = fit_indicator(values, levels, rising=True)
    assert indicator.starts[1] == pytest.approx(1.5)
    assert indicator.starts[2] == pytest.approx(2.5)
    assert indicator.starts[3] == pytest.approx(3.5)
    assert 0.5 < indicator.starts[0] < 0.95  # clean vs slight: the fewest errors


def test_the_detection_cut_sits_above_what_clean_photos_read():
    clean = [0.0] * 6 + [1.2, 1.4, 1.6, 1.8]        # natural blur reads "slight" on 40 %
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
    assert answer._choose_option(question, options, {"Blurs": 2.0}, 3.0,
                                 {"Blurs": 2.0})[0] == "A"


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


@pytest.mark.parametrize("kind, category", [
    ("defocus", "Blurs"), ("shot_noise", "Noise"), ("gamma_dark", "Brightness change"),
    ("curve_contrast", "Contrast"), ("hsv_desaturate", "Color distortions")])
def test_a_clear_distortion_of_the_other_generator_is_detected(photo, kind, category):
    scores = category_scores(measure(pixels(synthetic_test.degrade(photo, kind, 3))))
    assert scores[category] >= default_thresholds().present_from(category)
