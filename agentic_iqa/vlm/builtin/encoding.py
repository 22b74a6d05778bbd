"""How a JPEG file was encoded: its quality, read from the quantisation tables it carries.

A JPEG file holds the tables its encoder divided each 8x8 block's frequencies by, and the
common encoders (libjpeg, and Pillow, ImageMagick and most software on top of it) scale one
standard table by the quality setting (the IJG formula: ``5000 / q`` below 50, ``200 - 2q``
above).  So the quality a file was saved at can be read back exactly from its luminance table,
and for an encoder with tables of its own (a camera's) the IJG quality whose table is nearest
(in log ratio, coefficient by coefficient) is its equivalent, as ``identify -verbose`` and
JPEG forensics tools report it.

This is evidence the pixels alone give poorly: the 8x8 blockiness the severity readings use
(:mod:`.measure`) cannot tell quality 90 from 50 on a detailed photo, where the encoder's
tables differ by a factor of four.  :mod:`.damage` charges the opinion for it.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np

#: The IJG (libjpeg) standard luminance quantisation table, in natural (row-major) order, as
#: Pillow reports a file's tables.
STANDARD_LUMINANCE = np.array(
    [
        *(16, 11, 10, 16, 24, 40, 51, 61),
        *(12, 12, 14, 19, 26, 58, 60, 55),
        *(14, 13, 16, 24, 40, 57, 69, 56),
        *(14, 17, 22, 29, 51, 87, 80, 62),
        *(18, 22, 37, 56, 68, 109, 103, 77),
        *(24, 35, 55, 64, 81, 104, 113, 92),
        *(49, 64, 78, 87, 103, 121, 120, 101),
        *(72, 92, 95, 98, 112, 100, 103, 99),
    ],
    dtype=float,
)
#: The formats whose files carry JPEG tables (a phone's multi-picture JPEG opens as MPO).
JPEG_FORMATS = frozenset({"JPEG", "MPO"})


def ijg_table(quality: int) -> np.ndarray:
    """The luminance table libjpeg writes at ``quality`` (1-100), baseline (at most 255)."""
    if not 1 <= quality <= 100:
        raise ValueError(f"a JPEG quality is 1 to 100, not {quality}")
    scale = 5000 / quality if quality < 50 else 200 - 2 * quality
    return np.clip(np.floor((STANDARD_LUMINANCE * scale + 50) / 100), 1, 255)


_TABLES = np.log(np.stack([ijg_table(quality) for quality in range(1, 101)]))


def quality_of_table(table: list[int] | tuple[int, ...] | np.ndarray) -> int:
    """The IJG quality (1-100) whose luminance table is nearest to ``table`` (64 divisors in
    natural order): the quality it was saved at, for a file libjpeg wrote."""
    divisors = np.asarray(table, dtype=float)
    if divisors.shape != (64,) or not np.all(divisors >= 1):
        raise ValueError("a luminance table is 64 divisors of at least 1")
    distance = np.abs(_TABLES - np.log(np.minimum(divisors, 255.0))).sum(axis=1)
    return int(np.argmin(distance)) + 1


def jpeg_quality(path: str | Path) -> int | None:
    """The IJG-equivalent quality the JPEG file at ``path`` was saved at; None for a file of
    another format, or one whose tables cannot be read (computed once per file version)."""
    from iqa_tools.images import version_key

    return _quality(str(path), version_key(path))


@lru_cache(maxsize=512)
def _quality(path: str, _version: str) -> int | None:
    from PIL import Image

    from iqa_tools.images import read_hashed

    try:
        data, _digest = read_hashed(path)
        with Image.open(io.BytesIO(data)) as image:
            tables = getattr(image, "quantization", None) if image.format in JPEG_FORMATS else None
            if not tables:
                return None
            return quality_of_table(tables[min(tables)])
    except (OSError, ValueError):
        return None
