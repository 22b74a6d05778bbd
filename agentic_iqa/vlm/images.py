"""Images as remote VLMs receive them: upright, RGB, no larger than needed, base64.

Every image is decoded and re-encoded, even a small one: that applies the EXIF orientation the
model would otherwise ignore, and strips metadata (GPS position, camera serial) that has no
business leaving the machine. Downscaling bounds the upload and the vendor's token bill; vendors
downscale large images anyway. Pixels follow the tool layer's conventions (transparency over
white, 16-bit scaled to 8) so the model and the IQA tools look at the same picture.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .base import VLMError

#: Colour behind transparent pixels, as in the tool layer.
ALPHA_BACKGROUND = (255, 255, 255)
JPEG_QUALITY = 90

_SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I"}

#: Said before each image when a request carries an image and its reference: which is which
#: (the prompts say "the image"; a model must not assess the reference instead).
IMAGE_LABELS = (
    "Image 1, the image to assess:",
    "Image 2, its pristine reference (compare with it; do not assess it):",
)


def image_labels(count: int) -> tuple[str | None, ...]:
    """The label said before each of ``count`` images: none for a single image."""
    if count <= 1:
        return (None,) * count
    return tuple(
        IMAGE_LABELS[i] if i < len(IMAGE_LABELS) else f"Image {i + 1}:" for i in range(count)
    )


class ImageEncodingError(VLMError, ValueError):
    """An image to send to a VLM could not be read; the message names the file."""


def encode_image(path: str | Path, max_side: int) -> tuple[str, str]:
    """``(media_type, base64 data)`` of the image at ``path``, longest side <= ``max_side``.

    PNG sources stay PNG (lossless, as screenshots and synthetic distortions need); everything
    else becomes JPEG quality 90. Results are cached per file version, because the same image goes
    to the planner, every executor subtask and the summarizer.
    """
    if max_side < 1:
        raise ValueError(f"max_side must be positive, got {max_side}")
    from iqa_tools.storage import is_url

    if is_url(str(path)):  # an object in a store: its bytes from the worker's disk cache
        from iqa_tools.errors import ToolError
        from iqa_tools.images import read_bytes, version_key

        try:
            return _encode_cached(str(path), version_key(path), max_side, read_bytes)
        except ToolError as exc:
            raise ImageEncodingError(f"cannot read image {path}: {exc}") from None
    resolved = Path(path).absolute()
    try:
        stat = resolved.stat()
    except OSError as exc:
        raise ImageEncodingError(f"cannot read image {resolved}: {exc.strerror or exc}") from None
    return _encode_cached(str(resolved), f"{stat.st_mtime_ns}:{stat.st_size}", max_side)


@lru_cache(maxsize=16)
def _encode_cached(
    path: str, _version: str, max_side: int, read: Callable[[str], bytes] | None = None
) -> tuple[str, str]:
    image, source_format = _open(io.BytesIO(read(path)) if read else path, path)
    image = _downscale(image, max_side)
    buffer = io.BytesIO()
    if source_format == "PNG":
        image.save(buffer, format="PNG", optimize=False)
        media_type = "image/png"
    else:
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
        media_type = "image/jpeg"
    return media_type, base64.b64encode(buffer.getvalue()).decode("ascii")


def _open(source: str | io.BytesIO, path: str) -> tuple[Image.Image, str | None]:
    try:
        with Image.open(source) as opened:
            opened.load()
            source_format = opened.format
            return _to_rgb(ImageOps.exif_transpose(opened)), source_format
    except FileNotFoundError:
        raise ImageEncodingError(f"image not found: {path}") from None
    except UnidentifiedImageError:
        raise ImageEncodingError(f"not a recognised image format: {path}") from None
    except Image.DecompressionBombError as exc:
        raise ImageEncodingError(f"image too large to decode safely: {path} ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        # Pillow reports truncated or corrupt data as OSError/SyntaxError/ValueError.
        raise ImageEncodingError(f"cannot decode image {path}: {exc}") from None


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode in _SIXTEEN_BIT_MODES:
        grey = np.asarray(image, dtype=np.float64) / 65535.0 * 255.0
        return Image.fromarray(np.clip(grey, 0, 255).round().astype(np.uint8)).convert("RGB")
    if image.mode == "F":
        grey = np.clip(np.asarray(image, dtype=np.float64), 0.0, 1.0) * 255.0
        return Image.fromarray(grey.round().astype(np.uint8)).convert("RGB")
    if image.mode in {"RGBA", "LA", "PA", "RGBa", "La"} or (
        image.mode == "P" and "transparency" in image.info
    ):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (*ALPHA_BACKGROUND, 255))
        image = Image.alpha_composite(background, rgba)
    return image.convert("RGB")


def _downscale(image: Image.Image, max_side: int) -> Image.Image:
    """Shrink so the longest side is ``max_side``; never enlarge (that only adds bytes)."""
    width, height = image.size
    longest = max(width, height)
    if longest <= max_side:
        return image
    scale = max_side / longest
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)
