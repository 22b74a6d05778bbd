"""Loading images exactly once, the same way for every tool.

Every tool sees RGB, float32 in [0, 1], in the orientation a person sees (EXIF applied), at the
size stored in the file: no silent resize, because a resize changes what a quality metric
measures.  The file is read once; the same bytes give the cache key (sha256) and the pixels.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import ImageLoadError

#: Colour behind transparent pixels.  White, as the image is shown on a page or viewer.
ALPHA_BACKGROUND = (255, 255, 255)

_SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I"}


@dataclass(frozen=True)
class LoadedImage:
    """An image file's bytes, their sha256, and its pixels, decoded on first use.

    Decoding lazily lets a cache hit skip the decode entirely: the digest alone finds the score.
    """

    path: str
    digest: str
    data: bytes = field(repr=False)

    @cached_property
    def pixels(self) -> np.ndarray:
        """H x W x 3, float32, [0, 1]; raises :class:`ImageLoadError` if the data is corrupt."""
        return decode(self.data, self.path)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as image tools usually print it."""
        height, width = self.pixels.shape[:2]
        return width, height


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ImageLoadError(str(path), "file not found") from None
    except IsADirectoryError:
        raise ImageLoadError(str(path), "is a directory, not an image file") from None
    except OSError as exc:
        raise ImageLoadError(str(path), f"cannot read file ({exc.strerror or exc})") from None


def decode(data: bytes, path: str = "<bytes>") -> np.ndarray:
    """Decode image bytes into an H x W x 3 float32 array in [0, 1]."""
    if not data:
        raise ImageLoadError(path, "file is empty")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            image = ImageOps.exif_transpose(image)
            return _to_rgb_float(image)
    except UnidentifiedImageError:
        raise ImageLoadError(path, "not a recognised image format") from None
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(path, f"image too large to decode safely ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        # Pillow reports truncated or corrupt data as OSError/SyntaxError/ValueError.
        raise ImageLoadError(path, f"corrupt or truncated image data ({exc})") from None


def read_image(path: str | Path) -> LoadedImage:
    """Read and hash the file now; decode its pixels when first needed."""
    data = read_bytes(path)
    return LoadedImage(path=str(path), digest=digest_bytes(data), data=data)


def load_image(path: str | Path) -> LoadedImage:
    """Read, hash and decode now, so any problem with the file surfaces here."""
    image = read_image(path)
    _ = image.pixels
    return image


def _to_rgb_float(image: Image.Image) -> np.ndarray:
    if image.mode in _SIXTEEN_BIT_MODES:
        grey = np.asarray(image, dtype=np.float32) / 65535.0
        grey = np.clip(grey, 0.0, 1.0)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode == "F":
        grey = np.clip(np.asarray(image, dtype=np.float32), 0.0, 1.0)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (*ALPHA_BACKGROUND, 255))
        image = Image.alpha_composite(background, rgba)
    rgb = image.convert("RGB")
    # float32 / 255 is what pyiqa's own loader (torchvision ToTensor) computes, bit for bit.
    return np.asarray(rgb, dtype=np.float32) / np.float32(255.0)


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in {"RGBA", "LA", "PA", "RGBa", "La"} or (
        image.mode == "P" and "transparency" in image.info
    )
