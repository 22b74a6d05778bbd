"""The builtin reads how a JPEG file was encoded (its quality, from its quantisation tables) and
charges its estimate for the damage its opinion does not see."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.vlm.builtin import damage
from agentic_iqa.vlm.builtin.encoding import ijg_table, jpeg_quality, quality_of_table
from tests.agentic_iqa.conftest import EXAMPLE


def _photo() -> Image.Image:
    return Image.open(EXAMPLE).convert("RGB").resize((96, 64))


@pytest.mark.parametrize("quality", [1, 3, 10, 25, 49, 50, 51, 75, 90, 95, 100])
@pytest.mark.parametrize(
    "options",
    [{}, {"subsampling": 0}, {"progressive": True}, {"optimize": True}],
    ids=["default", "4:4:4", "progressive", "optimized"],
)
def test_the_quality_a_file_was_saved_at_is_read_back(tmp_path: Path, quality, options) -> None:
    path = tmp_path / f"q{quality}.jpg"
    _photo().save(path, quality=quality, **options)
    assert jpeg_quality(path) == quality


def test_a_file_of_another_format_or_unreadable_has_no_jpeg_quality(tmp_path: Path) -> None:
    png, broken, renamed = tmp_path / "a.png", tmp_path / "b.jpg", tmp_path / "c.jpg"
    _photo().save(png)
    broken.write_bytes(b"\xff\xd8\xff not a jpeg at all")
    _photo().save(renamed, format="PNG")  # a PNG named .jpg: its content decides
    assert jpeg_quality(png) is None and jpeg_quality(broken) is None
    assert jpeg_quality(renamed) is None


def test_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "a.jpg"
    _photo().save(path, quality=90)
    assert jpeg_quality(path) == 90
    buffer = io.BytesIO()
    _photo().save(buffer, format="JPEG", quality=20)
    path.write_bytes(buffer.getvalue())
    assert jpeg_quality(path) == 20


def test_an_encoders_own_tables_read_as_the_nearest_standard_quality(tmp_path: Path) -> None:
    """A camera's tables are not libjpeg's: the quality whose table is nearest in log ratio."""
    own = np.clip(ijg_table(60) * np.exp(np.linspace(-0.15, 0.15, 64)), 1, 255).round()
    assert abs(quality_of_table(own) - 60) <= 3
    path = tmp_path / "camera.jpg"
    _photo().save(path, qtables=[[int(v) for v in own]] * 2)
    assert abs(jpeg_quality(path) - 60) <= 3  # type: ignore[operator]
    assert quality_of_table([255] * 64) <= 3 and quality_of_table([1] * 64) == 100


def test_the_ijg_table_grows_as_the_quality_falls_and_bad_input_is_refused() -> None:
    sums = [ijg_table(q).sum() for q in range(1, 101)]
    assert all(b <= a for a, b in zip(sums, sums[1:], strict=False)) and sums[0] > sums[-1]
    assert ijg_table(50).tolist()[:3] == [16, 11, 10] and set(ijg_table(100)) == {1}
    for bad in (0, 101):
        with pytest.raises(ValueError, match="1 to 100"):
            ijg_table(bad)
    with pytest.raises(ValueError, match="64 divisors"):
        quality_of_table([8] * 63)
    with pytest.raises(ValueError, match="64 divisors"):
        quality_of_table([0] * 64)


# -- the charge --------------------------------------------------------------------------------

CLEAN = {"Blurs": 0.0, "Noise": 0.0, "Compression": 0.0}


def test_nothing_is_charged_a_clean_photo_saved_at_75_or_better_or_not_a_jpeg() -> None:
    for quality in (None, 75, 90, 100):
        assert damage.charge(CLEAN, quality) == 0.0
    # light blur and noise, what authentic photos vary in, are the opinion's to judge
    assert damage.charge({"Blurs": 2.0, "Noise": 1.5}, None) == 0.0
    assert damage.charged(3.7, CLEAN, 90) == 3.7


def test_the_charge_grows_with_each_damage_alone() -> None:
    qualities = [74, 60, 50, 30, 10, 3, 1]
    charges = [damage.charge(CLEAN, q) for q in qualities]
    assert all(b > a for a, b in zip(charges, charges[1:], strict=False))
    assert damage.charge(CLEAN, 50) == pytest.approx(2.2 * np.log(1.5))
    for category, start in (("Blurs", 2.0), ("Noise", 1.5)):
        steps = [damage.charge({category: start + d}, None) for d in (0.0, 0.1, 1.0, 2.0)]
        assert steps[0] == 0.0 and all(b > a for a, b in zip(steps, steps[1:], strict=False))
    # a colour or exposure reading is not damage the estimate is charged for
    assert damage.charge({"Color distortions": 4.0, "Brightness change": 4.0}, None) == 0.0


def test_an_estimate_charged_below_the_scale_stays_on_it_and_keeps_its_order() -> None:
    assert damage.onto_scale(1.25) == 1.25 and damage.onto_scale(4.2) == 4.2
    values = [1.25, 1.0, 0.5, -1.0, -10.0, -1e3, -1e6]
    mapped = [damage.onto_scale(v) for v in values]
    assert all(1.0 < m <= 1.25 for m in mapped)
    assert all(b < a for a, b in zip(mapped, mapped[1:], strict=False))


def test_a_blur_reading_at_its_top_is_ranked_on_by_the_gradient() -> None:
    top = {"Blurs": damage.BLUR_TOP}
    sharper, softer = damage.charged(1.0, top, None, 0.04), damage.charged(1.0, top, None, 0.03)
    assert softer < sharper
    below_top = {"Blurs": 3.0}
    assert damage.charged(2.0, below_top, None, 0.04) == damage.charged(2.0, below_top, None, 0.03)
