from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.vlm import VLMError
from agentic_iqa.vlm.images import ImageEncodingError, encode_image


def decode(data: str) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    image.load()
    return image


def gradient(width: int, height: int) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :].repeat(height, axis=0)
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None].repeat(width, axis=1)
    rgb = np.stack([x, y, 255 - x], axis=2).astype(np.uint8)
    return Image.fromarray(rgb)


def test_large_png_is_downscaled_to_max_side_and_stays_png(tmp_path: Path) -> None:
    path = tmp_path / "wide.png"
    gradient(3000, 1000).save(path)

    media_type, data = encode_image(path, 1024)

    image = decode(data)
    assert media_type == "image/png"
    assert image.format == "PNG"
    assert image.size == (1024, 341)
    assert image.mode == "RGB"


def test_small_jpeg_is_never_upscaled(tmp_path: Path) -> None:
    path = tmp_path / "small.jpg"
    gradient(200, 120).save(path, quality=95)

    media_type, data = encode_image(path, 1024)

    image = decode(data)
    assert media_type == "image/jpeg"
    assert image.format == "JPEG"
    assert image.size == (200, 120)


def test_non_png_sources_become_jpeg(tmp_path: Path) -> None:
    path = tmp_path / "tall.bmp"
    gradient(400, 1600).save(path)

    media_type, data = encode_image(path, 800)

    assert media_type == "image/jpeg"
    assert decode(data).size == (200, 800)


def test_exif_orientation_is_applied_and_metadata_stripped(tmp_path: Path) -> None:
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    exif[0x010F] = "SecretCam"  # camera make, must not leave the machine
    gradient(300, 100).save(path, exif=exif.tobytes())

    _, data = encode_image(path, 1024)

    image = decode(data)
    assert image.size == (100, 300)
    assert not image.getexif()


def test_transparency_is_composited_over_white(tmp_path: Path) -> None:
    path = tmp_path / "transparent.png"
    Image.new("RGBA", (40, 30), (255, 0, 0, 0)).save(path)

    _, data = encode_image(path, 1024)

    assert decode(data).getpixel((5, 5)) == (255, 255, 255)


def test_sixteen_bit_greyscale_is_scaled_to_eight_bits(tmp_path: Path) -> None:
    path = tmp_path / "deep.png"
    Image.fromarray(np.full((20, 30), 65535, dtype=np.uint16)).save(path)

    _, data = encode_image(path, 1024)

    assert decode(data).getpixel((0, 0)) == (255, 255, 255)


def test_a_changed_file_is_encoded_again(tmp_path: Path) -> None:
    path = tmp_path / "changing.png"
    gradient(64, 32).save(path)
    first = encode_image(path, 1024)
    gradient(32, 64).save(path)

    second = encode_image(path, 1024)

    assert decode(first[1]).size == (64, 32)
    assert decode(second[1]).size == (32, 64)


@pytest.mark.parametrize("content", [None, b"", b"not an image at all", b"\x89PNG\r\n\x1a\nbroken"])
def test_unreadable_images_raise_an_error_naming_the_path(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "bad.png"
    if content is not None:
        path.write_bytes(content)

    with pytest.raises(ImageEncodingError) as caught:
        encode_image(path, 1024)

    assert str(path) in str(caught.value)
    assert isinstance(caught.value, VLMError)
    assert isinstance(caught.value, ValueError)
