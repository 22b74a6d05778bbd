"""The builtin backend's measurements respond to the distortion they are meant for."""

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.synthetic import degrade
from agentic_iqa.vlm.builtin.measure import measure
from agentic_iqa.vlm.builtin.severity import category_scores, severity_word
from tests.agentic_iqa.conftest import EXAMPLE


def scores_of(image: Image.Image) -> dict[str, float]:
    return category_scores(measure(np.asarray(image, dtype=np.float32) / 255.0))


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.open(EXAMPLE).convert("RGB")


@pytest.mark.parametrize("kind, category", [
    ("blur", "Blurs"), ("noise", "Noise"), ("jpeg", "Compression"),
    ("dark", "Brightness change"), ("contrast", "Contrast"), ("desaturate", "Color distortions"),
])
def test_each_indicator_grows_with_its_distortion_level(photo, kind, category):
    values = [scores_of(degrade(photo, kind, level))[category] for level in (0, 1, 2, 3, 4)]
    assert values == sorted(values)
    assert values[4] >= 3.0 > values[0]


def test_extreme_distortions_are_the_top_category(photo):
    for kind, category in (("blur", "Blurs"), ("noise", "Noise"), ("jpeg", "Compression")):
        scores = scores_of(degrade(photo, kind, 4))
        assert max(scores, key=scores.get) in {category, "Sharpness"}


def test_severity_words():
    assert [severity_word(s) for s in (0.0, 1.2, 2.5, 3.9, 4.7)] == [
        "none", "slight", "moderate", "severe", "extreme"]
