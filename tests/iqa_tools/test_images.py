import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from iqa_tools.errors import ImageLoadError, ToolError
from iqa_tools.images import load_image
from tests.conftest import natural_image


def save(path, array, **options):
    Image.fromarray(array).save(path, **options)
    return path


def test_rgb_float32_in_unit_range_and_digest_of_file_bytes(tmp_path):
    path = save(tmp_path / "a.png", natural_image())
    loaded = load_image(path)
    assert loaded.pixels.dtype == np.float32
    assert loaded.pixels.shape == (192, 256, 3)
    assert loaded.size == (256, 192)
    assert loaded.pixels.min() >= 0.0 and loaded.pixels.max() <= 1.0
    assert loaded.digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_pixels_match_pyiqa_own_loader_bit_for_bit(tmp_path):
    from pyiqa.utils.img_util import imread2tensor

    path = save(tmp_path / "b.jpg", natural_image(3), quality=80)
    ours = load_image(path).pixels
    theirs = imread2tensor(str(path), rgb=True).permute(1, 2, 0).numpy()
    assert np.array_equal(ours, theirs)


def test_8_bit_pixels_are_kept_as_uint8_decoded_a_band_of_rows_at_a_time(tmp_path, monkeypatch):
    from iqa_tools import images

    monkeypatch.setattr(images, "_BAND_BYTES", 1000)  # 5 rows of 61 a band
    path = save(tmp_path / "c.png", natural_image(4, (67, 61)))
    loaded = load_image(path)
    assert loaded.stored.dtype == np.uint8
    assert np.array_equal(loaded.stored, np.asarray(Image.open(path).convert("RGB")))
    assert np.array_equal(loaded.pixels, loaded.stored.astype(np.float32) / np.float32(255))


def test_exif_orientation_is_applied(tmp_path):
    array = natural_image(size=(64, 32))  # 64 wide, 32 high
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    path = tmp_path / "rotated.jpg"
    Image.fromarray(array).save(path, exif=exif, quality=95)
    loaded = load_image(path)
    assert loaded.size == (32, 64)  # displayed upright: now 32 wide, 64 high


def test_greyscale_becomes_three_equal_channels(tmp_path):
    grey = natural_image()[:, :, 0]
    loaded = load_image(save(tmp_path / "g.png", grey))
    assert loaded.pixels.shape[2] == 3
    assert np.array_equal(loaded.pixels[:, :, 0], loaded.pixels[:, :, 2])
    assert loaded.pixels[0, 0, 0] == pytest.approx(grey[0, 0] / 255)


def test_sixteen_bit_greyscale_is_scaled_not_clipped(tmp_path):
    array = np.full((8, 8), 32768, dtype=np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(array).save(path)
    loaded = load_image(path)
    assert loaded.pixels[0, 0, 0] == pytest.approx(32768 / 65535, abs=1e-6)


def test_alpha_is_composited_over_white(tmp_path):
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[..., 0] = 255  # red
    rgba[0, 0, 3] = 255  # one opaque pixel, the rest transparent
    path = save(tmp_path / "alpha.png", rgba)
    pixels = load_image(path).pixels
    assert pixels.shape == (4, 4, 3)
    assert np.allclose(pixels[0, 0], [1, 0, 0])
    assert np.allclose(pixels[1, 1], [1, 1, 1])


def test_no_resize_of_odd_sizes(tmp_path):
    loaded = load_image(save(tmp_path / "odd.png", natural_image(size=(333, 77))))
    assert loaded.size == (333, 77)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ImageLoadError, match="nothere.png.*file not found"):
        load_image(tmp_path / "nothere.png")


def test_text_file_named_png(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("this is not an image")
    with pytest.raises(ImageLoadError, match="notes.png.*not a recognised image format"):
        load_image(path)


def test_truncated_jpeg(tmp_path):
    buffer = io.BytesIO()
    Image.fromarray(natural_image()).save(buffer, format="JPEG", quality=90)
    path = tmp_path / "cut.jpg"
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with pytest.raises(ImageLoadError, match="cut.jpg.*truncated"):
        load_image(path)


def test_empty_file_and_directory(tmp_path):
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(ImageLoadError, match="empty"):
        load_image(tmp_path / "empty.jpg")
    with pytest.raises(ImageLoadError, match="directory"):
        load_image(tmp_path)


def test_image_errors_are_tool_errors():
    assert issubclass(ImageLoadError, ToolError)


def test_minimum_size_is_checked_with_the_size_found_and_the_size_needed(tmp_path):
    from iqa_tools.errors import ImageTooSmallError, InputError
    from iqa_tools.images import MIN_IMAGE_SIDE, check_min_size, min_side

    tiny = load_image(save(tmp_path / "tiny.png", natural_image(size=(1, 1))))
    with pytest.raises(ImageTooSmallError) as caught:
        tiny.check_size()
    assert str(caught.value) == (
        f"image {str(tmp_path / 'tiny.png')!r} is 1x1 pixels; the IQA "
        f"tools need at least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}"
    )
    assert isinstance(caught.value, InputError) and caught.value.minimum == MIN_IMAGE_SIDE
    check_min_size("x.png", (MIN_IMAGE_SIDE, 500))
    with pytest.raises(ImageTooSmallError, match="is 500x31 pixels"):
        check_min_size("x.png", (500, MIN_IMAGE_SIDE - 1))
    # NIQE cuts 96x96 patches: its own minimum is above the common one.
    assert min_side("NIQE") == 96 and min_side("BRISQUE") == MIN_IMAGE_SIDE
    with pytest.raises(ImageTooSmallError, match="is 64x64 pixels; NIQE needs at least 96x96"):
        check_min_size("x.png", (64, 64), "NIQE")


def test_probe_decodes_the_whole_file_and_reports_the_displayed_size(tmp_path):
    from iqa_tools.images import probe_image

    buffer = io.BytesIO()
    Image.fromarray(natural_image()).save(buffer, format="JPEG", quality=90)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with Image.open(cut) as image:
        image.verify()  # passes: only a full decode finds the missing half
    with pytest.raises(ImageLoadError, match="cut.jpg.*truncated"):
        probe_image(cut)
    exif = Image.Exif()
    exif[0x0112] = 6
    rotated = tmp_path / "rotated.jpg"
    Image.fromarray(natural_image(size=(64, 32))).save(rotated, exif=exif)
    assert probe_image(rotated) == (32, 64) == load_image(rotated).size
    with pytest.raises(ImageLoadError, match="file not found"):
        probe_image(tmp_path / "gone.png")
