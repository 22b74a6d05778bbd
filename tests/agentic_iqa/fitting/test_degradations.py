"""The calibration generator's shapes: every process of every kind keeps the size, is
deterministic, leaves level 0 as the default shape does, and moves its own reading the right
way level by level; the calibration rotates the shapes over photos and levels."""

from collections import Counter

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.fitting import degradations as synthetic
from agentic_iqa.vlm.builtin.measure import measure
from agentic_iqa.vlm.builtin.severity import NO_REFERENCE
from tests.agentic_iqa.conftest import EXAMPLE

#: The no-reference reading each kind moves, and the way it moves (+1 rising).
READING = {
    "blur": ("blur", 1),
    "noise": ("noise", 1),
    "jpeg": ("blocking", 1),
    "dark": ("dark", -1),
    "bright": ("bright", 1),
    "contrast": ("contrast", -1),
    "desaturate": ("colour", -1),
}


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.float32) / 255.0


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.open(EXAMPLE).convert("RGB").resize((192, 192))


def test_every_kind_has_shapes_the_default_first():
    assert set(synthetic.SHAPES) == set(synthetic.DEGRADATIONS)
    assert all(2 <= len(shapes) <= 3 for shapes in synthetic.SHAPES.values())
    with pytest.raises(ValueError):
        synthetic.degrade(Image.new("RGB", (16, 16)), "blur", 1, "disk")


@pytest.mark.parametrize(
    "kind, shape", [(k, s) for k, shapes in synthetic.SHAPES.items() for s in shapes]
)
def test_each_shape_grows_its_reading_with_the_level(photo, kind, shape):
    name, direction = READING[kind]
    reading = NO_REFERENCE[name][2]
    images = [synthetic.degrade(photo, kind, level, shape) for level in (0, 1, 2, 3, 4)]
    assert all(image.size == photo.size for image in images)
    assert np.array_equal(pixels(images[2]), pixels(synthetic.degrade(photo, kind, 2, shape)))
    assert np.array_equal(pixels(images[0]), pixels(synthetic.degrade(photo, kind, 0)))
    values = [direction * reading(measure(pixels(image))) for image in images]
    assert values == sorted(values), values
    assert values[4] > values[1] > values[0]


def test_default_shape_is_the_historical_process(photo):
    assert np.array_equal(
        pixels(synthetic.degrade(photo, "dark", 2)), pixels(synthetic.darken(photo, 2))
    )
    assert np.array_equal(
        pixels(synthetic.degrade(photo, "bright", 3, "clip")), pixels(synthetic.brighten(photo, 3))
    )


def test_calibration_rotates_the_shapes():
    names = [f"photo{i}.bmp" for i in range(60)]
    for kind, shapes in synthetic.SHAPES.items():
        for level in synthetic.LEVELS:
            used = Counter(synthetic.calibration_shape(n, kind, level) for n in names)
            assert set(used) == set(shapes)
        per_photo = {
            synthetic.calibration_shape(names[0], kind, level) for level in synthetic.LEVELS
        }
        assert len(per_photo) == len(shapes)
