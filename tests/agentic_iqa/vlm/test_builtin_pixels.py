"""The builtin backend measures a large photo at most FEATURE_LONG_SIDE pixels on its
long side, decoded reduced (its full-size float copy never exists), and an image within the
cap exactly as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.vlm.builtin.opinion_features import opinion_features
from agentic_iqa.vlm.builtin.pixels import FEATURE_LONG_SIDE, feature_pixels, reduced
from agentic_iqa.vlm.builtin.vision import measurements
from iqa_tools.images import load_image, read_image
from tests.conftest import REPO


def _photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """A smooth random field with a gradient and grain."""
    rng = np.random.default_rng(seed)
    field = Image.fromarray(
        rng.integers(0, 256, (height // 64 + 2, width // 64 + 2, 3), dtype=np.uint8)
    ).resize((width, height), Image.Resampling.BICUBIC)
    values = np.asarray(field, np.int16)
    values += (np.arange(width, dtype=np.int16) * 60 // width - 30)[None, :, None]
    values += rng.integers(-8, 9, values.shape, dtype=np.int16)
    return Image.fromarray(np.clip(values, 0, 255).astype(np.uint8))


def test_an_image_within_the_cap_is_measured_on_exactly_its_pixels(tmp_path: Path) -> None:
    path = tmp_path / "p.jpg"
    _photo(1024, 700).save(path, quality=92)
    seen = feature_pixels(path)
    assert np.array_equal(seen, load_image(path).pixels)
    assert not seen.flags.writeable  # shared between the step's measurements


@pytest.mark.parametrize("suffix", ["jpg", "png"])
def test_a_large_photo_is_measured_reduced_to_the_cap(tmp_path: Path, suffix: str) -> None:
    photo = _photo(3001, 2000)
    path = tmp_path / f"p.{suffix}"
    photo.save(path, **({"quality": 92} if suffix == "jpg" else {}))
    seen = feature_pixels(path)
    assert seen.shape == (682, FEATURE_LONG_SIDE, 3) and seen.dtype == np.float32
    # The same picture as the whole photo area-averaged: only decoding noise apart.
    expected = (
        np.asarray(photo.resize((FEATURE_LONG_SIDE, 682), Image.Resampling.BOX), np.float32) / 255
    )
    assert float(np.abs(seen - expected).mean()) < 0.01
    assert seen.min() >= 0.0 and seen.max() <= 1.0


def test_a_turned_jpeg_is_reduced_upright(tmp_path: Path) -> None:
    """EXIF orientation 6 (a portrait shot held sideways): measured as a person sees it."""
    photo = _photo(3000, 2000, seed=3)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "turned.jpg"
    photo.save(path, quality=92, exif=exif.tobytes())
    seen = feature_pixels(path)
    assert seen.shape == (FEATURE_LONG_SIDE, 683, 3)
    upright = load_image(path).pixels  # the tools' own decode, EXIF applied
    expected = (
        np.asarray(
            Image.fromarray((upright * 255).round().astype(np.uint8)).resize(
                (683, FEATURE_LONG_SIDE), Image.Resampling.BOX
            ),
            np.float32,
        )
        / 255
    )
    assert float(np.abs(seen - expected).mean()) < 0.01


def test_sixteen_bit_and_transparent_images_reduce_like_the_tools_see_them(tmp_path: Path) -> None:
    grey = (np.linspace(0, 65535, 2400 * 1600).reshape(1600, 2400)).astype(np.uint16)
    path = tmp_path / "grey16.png"
    Image.fromarray(grey).save(path)
    seen = reduced(read_image(path), 600)
    assert seen.shape == (400, 600, 3)
    assert abs(float(seen.mean()) - float(load_image(path).pixels.mean())) < 0.002
    clear = tmp_path / "clear.png"
    Image.new("RGBA", (2000, 1500), (10, 20, 30, 0)).save(clear)
    assert np.allclose(reduced(read_image(clear), 500), 1.0)  # white behind, as the tools


def test_the_tool_budget_bounds_the_builtin_too(tmp_path: Path) -> None:
    """A worker's --max-memory lowers the budget per tool call; the builtin's reduction of an
    image is checked against it from the header, before decoding: a PNG is decoded at full
    size, a JPEG at the scale that covers the cap (here 1/2)."""
    from iqa_tools.errors import ToolMemoryError
    from iqa_tools.memory import BUILTIN_FEATURES, builtin_estimate

    photo = _photo(3000, 2000, seed=7)
    png, jpeg = tmp_path / "p.png", tmp_path / "p.jpg"
    photo.save(png)
    photo.save(jpeg, quality=90)
    assert (
        builtin_estimate(3000, 2000, long_side=1024, jpeg=False)
        == BUILTIN_FEATURES + 9 * 3000 * 2000
    )
    assert (
        builtin_estimate(3000, 2000, long_side=1024, jpeg=True)
        == BUILTIN_FEATURES + 9 * 1500 * 1000
    )
    budget = BUILTIN_FEATURES + 9 * 2_000_000
    with pytest.raises(ToolMemoryError, match="the builtin backend's measurements on image"):
        reduced(read_image(png), FEATURE_LONG_SIDE, budget)
    assert reduced(read_image(jpeg), FEATURE_LONG_SIDE, budget).shape == (683, 1024, 3)


@pytest.mark.slow
def test_the_features_of_a_large_photo_match_those_of_its_reduced_copy(tmp_path: Path) -> None:
    """What the builtin reads of a 4-MP photo is what it reads of the photo brought to the cap
    by hand: the cap decides what it sees, not the decoder path."""
    photo = _photo(2400, 1800, seed=5)
    large, small = tmp_path / "large.png", tmp_path / "small.png"
    photo.save(large)
    photo.resize((FEATURE_LONG_SIDE, 768), Image.Resampling.BOX).save(small)
    # Edge widths move with the resampling (a block mean then a box, against one box): 7 %.
    assert measurements(large).blur_sigma == pytest.approx(measurements(small).blur_sigma, rel=0.1)
    features, by_hand = opinion_features(large), opinion_features(small)
    assert features.keys() == by_hand.keys()
    for name in ("m_blur", "m_mean_luminance", "s1_gradient_mean", "s2_entropy"):
        assert features[name] == pytest.approx(by_hand[name], rel=0.05, abs=1e-3), name


#: Its own peak RSS (VmHWM: ``ru_maxrss`` would carry this process's peak over the exec).
FEATURES_CHILD = """
import json, sys
from agentic_iqa.vlm.builtin.opinion_features import opinion_features
from agentic_iqa.vlm.builtin.vision import measurements
measurements(sys.argv[1])
opinion_features(sys.argv[1])
peak = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print(json.dumps({"peak": int(peak) * 1024}))
"""


@pytest.mark.slow
def test_the_builtin_reads_a_24_mp_photo_within_400_mb(tmp_path: Path) -> None:
    """Measured in a fresh process (its own peak RSS): the builtin holds no full-size float64
    copy of the photo."""
    path = tmp_path / "24mp.jpg"
    _photo(5657, 4243, seed=24).save(path, quality=90)
    done = subprocess.run(
        [sys.executable, "-c", FEATURES_CHILD, str(path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak = json.loads(done.stdout.strip().splitlines()[-1])["peak"]
    assert peak < 400e6, f"{peak / 1e6:.0f} MB"
