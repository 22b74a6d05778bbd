"""The image as the builtin backend looks at it: at most :data:`FEATURE_LONG_SIDE` pixels on its
long side.

Its measurements (:mod:`.measure`) and its opinion's features (:mod:`.opinion_features`) hold a
dozen float64 copies of the image at once, gigabytes for a photo of tens of megapixels, beside
the tools' own budget.  A VLM does not look at
a photo at full size either (the hosted ones fit it into 1.5-2 k pixels first).  So a larger
image is reduced first, and its full-size float copy never exists: a JPEG is decoded at 1/2,
1/4 or 1/8 scale by the decoder itself (Pillow's ``draft``), then area-averaged to the cap;
other formats are decoded as 8-bit and area-averaged a band of rows at a time.

Everything the builtin's parameters were fitted or tuned on is at most 512 pixels a side
(LIVE-C's 500x500 photos and their degraded copies, TID2013's 512x384: ``opinion.json`` and
``severity.json`` name their data), and KonIQ-10k's photos are 1024x768: an image within the
cap is read exactly as before, the same pixels and so the same answers.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np

from iqa_tools.errors import ToolMemoryError
from iqa_tools.images import LoadedImage, read_image, to_float, version_key
from iqa_tools.memory import builtin_estimate

#: Longest side (pixels) the builtin measures an image at.
FEATURE_LONG_SIDE = 1024
#: Rows of the full-size image averaged at a time when a non-JPEG is reduced.
_BAND_ROWS = 256
#: EXIF orientations that turn the image by a quarter (width and height swap upright).
_QUARTER_TURNS = frozenset({5, 6, 7, 8})


def feature_pixels(path: str | Path) -> np.ndarray:
    """H x W x 3 float32 in [0, 1], the long side at most :data:`FEATURE_LONG_SIDE` (read
    once per file version for the few measurements of one step; read-only, shared)."""
    return _cached(str(path), version_key(path))


@lru_cache(maxsize=4)
def _cached(path: str, _version: str) -> np.ndarray:
    pixels = reduced(read_image(path), FEATURE_LONG_SIDE)
    pixels.setflags(write=False)
    return pixels


def target_size(width: int, height: int, long_side: int) -> tuple[int, int]:
    """(width, height) with the long side brought down to ``long_side`` (unchanged within
    it), the aspect ratio kept to the pixel."""
    scale = long_side / max(width, height)
    if scale >= 1.0:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def reduced(image: LoadedImage, long_side: int, budget: int | None = None) -> np.ndarray:
    """``image`` as float32 RGB, its long side at most ``long_side``: the stored pixels when it
    fits, else a reduction that never holds the full-size float image.

    ``budget``: bytes one tool call may take (``AGENTIC_IQA_TOOL_MEMORY``, which a worker's
    ``--max-memory`` lowers; None: the configured one).  The builtin's step runs in the same
    process as tool calls, one at a time, so the same budget bounds it: an image whose
    reduction would need more (:func:`iqa_tools.memory.builtin_estimate`, from the header) is
    refused before it is decoded, as a tool call would be.
    """
    width, height = image.header_size  # refuses a decompression bomb before any decode
    if max(width, height) <= long_side:
        return image.pixels
    if budget is None:
        from ...config import load_tool_settings

        budget = load_tool_settings().tool_memory
    needed = builtin_estimate(
        width, height, long_side=long_side, jpeg=image.data[:3] == b"\xff\xd8\xff"
    )
    if needed > budget:
        raise ToolMemoryError(
            image.path, (width, height), "the builtin backend's measurements", needed, budget
        )
    target = target_size(width, height, long_side)
    small = _draft_jpeg(image, target)
    if small is None:
        small = _area_average(image.stored, target)
    return to_float(small)


def _draft_jpeg(image: LoadedImage, target: tuple[int, int]) -> np.ndarray | None:
    """A JPEG decoded at the smallest of 1/2 .. 1/8 scale that still covers ``target`` (the
    decoder skips the rest), turned upright and area-averaged to it: uint8 RGB.  None for any
    other format, and for a JPEG that is not 8-bit colour or grey."""
    from PIL import Image

    with Image.open(io.BytesIO(image.data)) as opened:
        if opened.format != "JPEG" or opened.mode not in ("RGB", "L", "CMYK", "YCbCr"):
            return None
        orientation = opened.getexif().get(0x0112)
        turned = Image.Transpose
        turn = (
            {
                2: turned.FLIP_LEFT_RIGHT,
                3: turned.ROTATE_180,
                4: turned.FLIP_TOP_BOTTOM,
                5: turned.TRANSPOSE,
                6: turned.ROTATE_270,
                7: turned.TRANSVERSE,
                8: turned.ROTATE_90,
            }.get(orientation)
            if orientation is not None
            else None
        )
        quarter = orientation in _QUARTER_TURNS
        opened.draft("RGB", (target[1], target[0]) if quarter else target)
        upright = opened.convert("RGB")
        if turn is not None:
            upright = upright.transpose(turn)
        return np.asarray(upright.resize(target, Image.Resampling.BOX))


def _area_average(stored: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """``stored`` (H x W x 3, uint8 or float32) area-averaged to ``target`` (width, height):
    an integer block mean a band of rows at a time (float32 only for the band), then a box
    resample of the small result to the exact size."""
    from PIL import Image

    height, width = stored.shape[:2]
    factor = max(1, min(width // target[0], height // target[1]))
    rows, cols = height // factor, width // factor
    blocks = np.empty((rows, cols, 3), np.float32)
    band = max(1, _BAND_ROWS // factor)
    for top in range(0, rows, band):
        count = min(band, rows - top)
        chunk = stored[top * factor : (top + count) * factor, : cols * factor].astype(np.float32)
        blocks[top : top + count] = chunk.reshape(count, factor, cols, factor, 3).mean(axis=(1, 3))
    scale = 255.0 if stored.dtype == np.uint8 else 1.0
    planes = [
        Image.fromarray(blocks[..., channel] / scale, mode="F").resize(target, Image.Resampling.BOX)
        for channel in range(3)
    ]
    values = np.stack([np.asarray(plane) for plane in planes], axis=-1)
    if stored.dtype == np.uint8:
        return np.clip(np.rint(values * 255.0), 0, 255).astype(np.uint8)
    return np.clip(values, 0.0, 1.0).astype(np.float32)
