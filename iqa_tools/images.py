"""Load images exactly once, the same way for every tool.

Every tool sees RGB, float32 in [0, 1], in the orientation a person sees (EXIF applied), at the
size stored in the file: no silent resize, because a resize changes what a quality metric
measures.  The file is read once; the same bytes give the cache key (sha256) and the pixels.

Images too small to measure are refused up front (:func:`check_min_size`) with the size found
and the size needed, instead of failing deep inside a metric with an IndexError or a NaN.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ImageLoadError, ImageTooLargeError, ImageTooSmallError
from .memory import DECODE_CEILING

if TYPE_CHECKING:  # numpy and Pillow load on the first decode: the size rules need neither
    import numpy as np
    from PIL import Image

    from .storage import ObjectCache

#: Colour behind transparent pixels.  White, as the image is shown on a page or viewer.
ALPHA_BACKGROUND = (255, 255, 255)

#: Smallest width and height (pixels) any tool is given.  Measured with pyiqa 0.1.16 on square
#: synthetic photos: BRISQUE, the first fallback, raises IndexError below 7 px and returns NaN at
#: most sizes below 16 (its second scale halves the image below its 7x7 window), and from 16 to
#: 31 px it scores 100-145, outside the 0-100 range its SVR was fitted on; PIQE, which works on
#: 16x16 blocks, fails below 8 px and rests on one block below 32.  From 32 px both, and SSIM,
#: GMSD, PSNR, VSI and FSIM, give scores in their usual range.  Tools that need more are in
#: :data:`TOOL_MIN_SIDE`.
MIN_IMAGE_SIDE = 32
#: Tools whose own minimum is above :data:`MIN_IMAGE_SIDE` (same measurements): NIQE cuts the
#: image into 96x96 patches and fails on anything smaller; VIF's four-scale pyramid fails at 32
#: and works from 33; MS-SSIM's five scales with an 11-pixel window need 161.
TOOL_MIN_SIDE: dict[str, int] = {"NIQE": 96, "VIF": 33, "MS-SSIM": 161}
#: The environment variable of an explicit cap on pixels per image (unset: none).  Memory is
#: bounded per tool call in bytes (:mod:`iqa_tools.memory`, ``AGENTIC_IQA_TOOL_MEMORY``) and
#: decoding by :data:`~iqa_tools.memory.DECODE_CEILING`; this cap is for a deployment that
#: wants to refuse large photos outright, whatever the tool.
MAX_PIXELS_VARIABLE = "AGENTIC_IQA_MAX_PIXELS"
#: EXIF orientations that turn the image by 90 degrees, so width and height swap on display.
_QUARTER_TURNS = frozenset({5, 6, 7, 8})

_SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I"}
#: Bytes of pixels converted at a time when decoding (:func:`_as_array`).
_BAND_BYTES = 16 << 20


@dataclass(frozen=True)
class LoadedImage:
    """An image file's bytes, their sha256, and its pixels, decoded on first use.

    Decoding lazily lets a cache hit skip the decode entirely: the digest alone finds the score.
    """

    path: str
    digest: str
    data: bytes = field(repr=False)

    @cached_property
    def stored(self) -> np.ndarray:
        """H x W x 3 as decoded: uint8 for an 8-bit image, a quarter of the float copy's
        memory (tools that score in tiles convert it a tile at a time, and a 100-MP photo need
        never exist in float), float32 in [0, 1] for 16-bit and floating-point images.
        Raises :class:`ImageLoadError` if the data is corrupt."""
        return decode_stored(self.data, self.path)

    @cached_property
    def pixels(self) -> np.ndarray:
        """H x W x 3, float32, [0, 1]; raises :class:`ImageLoadError` if the data is corrupt."""
        return to_float(self.stored)

    @cached_property
    def derived(self) -> dict[Any, Any]:
        """What tools compute from these pixels and share (:mod:`iqa_tools.nss`: the luma),
        kept as long as the image is."""
        return {}

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as image tools usually print it."""
        height, width = self.stored.shape[:2]
        return width, height

    @cached_property
    def header_size(self) -> tuple[int, int]:
        """(width, height) as displayed, from the file's header: decodes nothing (the decoded
        size when the pixels are already there).  What memory budgets are checked against."""
        if "stored" in self.__dict__:
            return self.size
        return header_size(self.data, self.path)

    def check_size(self, tool: str | None = None) -> None:
        """Raise :class:`ImageTooSmallError` if ``tool`` (or any tool) cannot measure it."""
        check_min_size(self.path, self.size, tool)


Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class CroppedImage(LoadedImage):
    """A region of a loaded image that a tool scores as an image of its own ("the left half").

    Its digest is derived from the source's and the box, not from encoded pixels, so the score
    cache finds a crop's score without decoding anything; its path names the region, so an error
    says what was measured.  ``box`` is (left, top, right, bottom) as fractions."""

    source: LoadedImage | None = field(default=None, repr=False)
    box: Box = (0.0, 0.0, 1.0, 1.0)

    @cached_property
    def stored(self) -> np.ndarray:
        """The source's stored pixels inside the box (its own contiguous copy)."""
        import numpy as np

        assert self.source is not None
        height, width = self.source.stored.shape[:2]
        x0, y0, x1, y1 = box_pixels(self.box, width, height)
        return np.ascontiguousarray(self.source.stored[y0:y1, x0:x1])

    @cached_property
    def header_size(self) -> tuple[int, int]:
        """(width, height) of the crop, from the source's header: decodes nothing."""
        assert self.source is not None
        x0, y0, x1, y1 = box_pixels(self.box, *self.source.header_size)
        return x1 - x0, y1 - y0


def box_pixels(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """``box`` (fractions) in pixels (x0, y0, x1, y1), at least one pixel each way: the
    rounding the offline backend's measurements of a region use too."""
    left, top, right, bottom = box
    x0, y0 = int(round(left * width)), int(round(top * height))
    x1, y1 = int(round(right * width)), int(round(bottom * height))
    return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)


def crop_image(image: LoadedImage, box: Box, name: str) -> CroppedImage:
    """The part of ``image`` in ``box``, called ``name`` ("left half") in paths and errors."""
    key = ",".join(f"{value:.6f}" for value in box)
    return CroppedImage(
        path=f"{image.path} ({name})",
        digest=digest_bytes(f"{image.digest}|crop|{key}".encode()),
        data=b"",
        source=image,
        box=box,
    )


def min_side(tool: str | None = None) -> int:
    """The smallest width and height ``tool`` can measure; without a tool, the common floor."""
    if tool is None:
        return MIN_IMAGE_SIDE
    return max(MIN_IMAGE_SIDE, TOOL_MIN_SIDE.get(tool, 0))


def check_min_size(path: str | Path, size: tuple[int, int], tool: str | None = None) -> None:
    """Raise :class:`ImageTooSmallError` when ``size`` (width, height) is below the minimum.

    Checked before any model is built, so a thumbnail fails in milliseconds with the size it
    needs rather than after every fallback tool has tried and failed on it.
    """
    minimum = min_side(tool)
    if min(size) < minimum:
        raise ImageTooSmallError(str(path), size, minimum, tool)


def pixel_cap() -> int | None:
    """The explicit cap on pixels per image (``AGENTIC_IQA_MAX_PIXELS``); None when unset."""
    text = os.environ.get(MAX_PIXELS_VARIABLE, "").strip()
    try:
        return max(1, int(float(text))) if text else None
    except ValueError:
        return None


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes; an object store's URL (``s3://``, ``https://`` ...) is fetched
    through :mod:`.storage`, once per worker (its disk cache, by the store's digest).  A local
    path passes the same gate first (:mod:`.access`: under ``--root`` when a job has one) and
    again once opened (:func:`.storage.reads.read_local`: no symlink out of the root, the
    digest recorded at submit)."""
    return read_hashed(path)[0]


def read_hashed(path: str | Path) -> tuple[bytes, str | None]:
    """:func:`read_bytes`, with the bytes' sha256 (hex) where the read computed it already."""
    location = os.fspath(path)
    from .errors import ObjectMissing, StorageError
    from .storage import is_url
    from .storage.access import current
    from .storage.reads import read_local

    if is_url(location):
        return _fetched(location), None
    try:
        current().admit(location)
    except StorageError as refused:
        raise ImageLoadError(str(path), str(refused)) from None
    try:
        data, digest = read_local(location)
    except ObjectMissing as missing:
        reason = "file not found" if "not found" in str(missing) else "is a directory"
        raise ImageLoadError(
            str(path), reason + (", not an image file" if reason == "is a directory" else "")
        ) from None
    except StorageError as exc:
        raise ImageLoadError(str(path), str(exc)) from None
    return data, digest.removeprefix("sha256:") if digest else None


def _fetched(location: str) -> bytes:
    """An object's bytes; a store failure that is this item's alone (missing, throttled past
    the retries, changed) is an :class:`ImageLoadError`, one that every item would meet (a
    credential, a backend) is raised as is, for the job to stop."""
    from .errors import StorageError
    from .storage import fetch

    try:
        data, _ = fetch(location, cache=object_cache())
    except StorageError as exc:
        if exc.stops_job:
            raise
        raise ImageLoadError(exc.location or location, str(exc)) from None
    return data


_OBJECT_CACHE: list[object] = []


def object_cache() -> ObjectCache:
    """This process's disk cache of remote objects (``AGENTIC_IQA_OBJECT_CACHE``)."""
    from .storage import ObjectCache

    if not _OBJECT_CACHE:
        _OBJECT_CACHE.append(ObjectCache())
    return _OBJECT_CACHE[0]  # type: ignore[return-value]


def prefetch(locations: list[str], *, read: bool, workers: int = 8) -> None:
    """Ask the store about many objects at once (``read``: and download them into the object
    cache) so that checking them one by one after costs no round trip: a manifest of 10,000
    URLs is checked at the store's parallel pace, not its latency.  Every thread reads under
    the caller's reading (:mod:`.access`: the same gate), and a failure is kept in it, so the
    row's own check reports it without asking again (a stalled URL costs its deadline once)."""
    from concurrent.futures import ThreadPoolExecutor

    from .errors import StorageError
    from .storage import fetch, stat
    from .storage.access import current, reading

    scope = current()

    def one(location: str) -> None:
        with reading(scope):
            try:
                if read:
                    fetch(location, cache=object_cache())
                else:
                    stat(location)
            except StorageError as exc:
                scope.failed(location, exc)
            except Exception:  # reported by the row's own check
                return

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iqa-prefetch") as pool:
        list(pool.map(one, locations))


def version_key(path: str | Path) -> str:
    """What changes when the image at ``path`` changes, cheaply: a local file's modification
    time and size, an object's store digest (one HEAD), for caches of derived values."""
    location = os.fspath(path)
    from .storage import is_url, stat

    if is_url(location):
        info = stat(location)
        return info.digest or f"size:{info.size}"
    found = os.stat(location)
    return f"{found.st_mtime_ns}:{found.st_size}"


_PILLOW_SET: list[bool] = []


def _pillow() -> None:
    """Pillow's decompression-bomb limit, set here and nowhere else, to
    :data:`DECODE_CEILING` (179 MP): no warning below it (a 100-MP camera photo is an ordinary
    input, and budgets per tool call bound its memory).  Above it :func:`_opened` refuses the
    file itself, with its size, whatever Pillow's limit is by then (a caller may change it);
    Pillow's own warning there is silenced (the refusal says it), its error (above twice the
    limit) is turned into the same refusal."""
    if _PILLOW_SET:
        return
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = DECODE_CEILING
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    _PILLOW_SET.append(True)


@contextmanager
def _opened(data: bytes, path: str) -> Iterator[Image.Image]:
    """The image with its header read and no pixel decoded, refused above the decode ceiling
    and the explicit cap; Pillow's many errors turned into one :class:`ImageLoadError`."""
    _pillow()
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise ImageLoadError(path, "file is empty")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > DECODE_CEILING:
                raise _bomb(path, width, height)
            cap = pixel_cap()
            if cap is not None and width * height > cap:
                raise ImageTooLargeError(path, image.size, cap)
            yield image
    except UnidentifiedImageError:
        raise ImageLoadError(path, "not a recognised image format") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # Pillow's refusal above twice its limit (or its warning, where warnings are errors)
        raise ImageLoadError(path, f"image too large to decode safely ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        # Pillow reports truncated or corrupt data as OSError/SyntaxError/ValueError.
        raise ImageLoadError(path, f"corrupt or truncated image data ({exc})") from None


def _bomb(path: str, width: int, height: int) -> ImageLoadError:
    return ImageLoadError(
        path,
        f"image too large to decode safely: {width}x{height} pixels "
        f"({width * height / 1e6:.0f} MP) is above the decode ceiling "
        f"of {DECODE_CEILING / 1e6:.0f} MP, which guards against "
        "decompression bombs",
    )


@contextmanager
def _decoded(data: bytes, path: str) -> Iterator[Image.Image]:
    """The fully decoded image (see :func:`_opened` for what is refused first)."""
    with _opened(data, path) as image:
        image.load()
        yield image


def header_size(data: bytes, path: str = "<bytes>") -> tuple[int, int]:
    """(width, height) as displayed (EXIF orientation applied) from the file's header alone:
    no pixel is decoded, so a budget is checked in microseconds, even on a file that would
    take gigabytes to decode (or is truncated: that shows on decoding)."""
    from PIL import Image

    with _opened(data, path) as image:
        width, height = image.size
        if image.format == "PNG":  # PNG's getexif() decodes the file to find a late eXIf chunk
            raw = image.info.get("exif")
            exif = Image.Exif()
            if raw:
                exif.load(raw)
            orientation = exif.get(0x0112)
        else:
            orientation = image.getexif().get(0x0112)
    return (height, width) if orientation in _QUARTER_TURNS else (width, height)


def decode(data: bytes, path: str = "<bytes>") -> np.ndarray:
    """Decode image bytes into an H x W x 3 float32 array in [0, 1]."""
    return to_float(decode_stored(data, path))


def decode_stored(data: bytes, path: str = "<bytes>") -> np.ndarray:
    """Decode image bytes into H x W x 3: uint8 for 8-bit images, else float32 in [0, 1]."""
    from PIL import ImageOps

    with _decoded(data, path) as image:
        ImageOps.exif_transpose(image, in_place=True)  # a copy of a 100-MP photo is 300 MB
        return _to_rgb(image)


def to_float(stored: np.ndarray) -> np.ndarray:
    """float32 in [0, 1] from :func:`decode_stored`'s array.  For 8-bit values, float32 / 255
    is what pyiqa's own loader (torchvision ToTensor) computes, bit for bit."""
    import numpy as np

    if stored.dtype != np.uint8:
        return stored
    values = stored.astype(np.float32)
    values /= np.float32(255.0)
    return values


def probe_image(path: str | Path) -> tuple[int, int]:
    """Decode the whole file and return its (width, height) as displayed (EXIF applied).

    As strict as :func:`load_image` (a truncated file fails, where Pillow's ``verify()`` passes
    it) but with no float copy and no hash, so thousands of files can be checked up front.
    """
    return probe_data(read_bytes(path), str(path))


def probe_data(data: bytes, path: str = "<bytes>") -> tuple[int, int]:
    """:func:`probe_image` on bytes already read (a caller that also hashes them)."""
    with _decoded(data, path) as image:
        width, height = image.size
        if image.getexif().get(0x0112) in _QUARTER_TURNS:
            return height, width
        return width, height


def read_image(path: str | Path) -> LoadedImage:
    """Read and hash the file now; decode its pixels when first needed."""
    data, digest = read_hashed(path)
    return LoadedImage(path=str(path), digest=digest or digest_bytes(data), data=data)


def load_image(path: str | Path) -> LoadedImage:
    """Read, hash and decode now, so any problem with the file surfaces here."""
    image = read_image(path)
    _ = image.stored
    return image


def _to_rgb(image: Image.Image) -> np.ndarray:
    import numpy as np
    from PIL import Image

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
    return _as_array(image if image.mode == "RGB" else image.convert("RGB"))


def _as_array(image: Image.Image) -> np.ndarray:
    """The 8-bit image's H x W x C array, copied a band of rows at a time: Pillow's own
    conversion (``tobytes``) holds two more full-size copies on the way, 600 MB at 100 MP."""
    import numpy as np

    width, height = image.size
    channels = len(image.getbands())
    array = np.empty((height, width, channels), dtype=np.uint8)
    rows = max(1, _BAND_BYTES // (width * channels))
    for top in range(0, height, rows):
        bottom = min(height, top + rows)
        array[top:bottom] = np.asarray(image.crop((0, top, width, bottom)))
    return array


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in {"RGBA", "LA", "PA", "RGBa", "La"} or (
        image.mode == "P" and "transparency" in image.info
    )
