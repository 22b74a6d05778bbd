"""How much memory one tool call takes, estimated from the image's size before any work.

A tool call's memory grows with the photo's pixels, so a byte budget per call
(:attr:`ToolSettings.tool_memory`, ``AGENTIC_IQA_TOOL_MEMORY``, default 1.5 GB) is checked by
the registry from the file's header, before a pixel is decoded or a model is run: a photo that
would not fit fails at once with the figures (:class:`ToolMemoryError`), never half-processed
or OOM-killed.

The estimate is the call's peak above an idle tool process (torch, pyiqa and the model already
loaded: :data:`PROCESS_BASE`, which a worker pays once per process).  Two shapes:

* tools scored tile by tile (BRISQUE, NIQE, PIQE, SSIM, PSNR above
  :attr:`ToolSettings.tile_above_pixels`): the decoded uint8 image (3 bytes a pixel, twice for
  a full-reference pair), plus whichever is larger of Pillow's own decoded copy while a file is
  decoded (:data:`DECODE_BYTES_PER_PIXEL` beyond the uint8 array) and the tile's working set
  (per tool, for 1024-px tiles, growing with the square of ``tile_size``);
* every other call (pyiqa on the whole image): a constant plus bytes per pixel, measured per
  tool where it runs here without weights, and a conservative figure for the learned tools
  whose weights are not on the machine the figures were taken on (:attr:`MemoryModel.measured`
  says which).

Figures: ``scripts/measure_tool_memory.py`` (2-core CPU, pyiqa 0.1.16, torch CPU, Pillow 13,
2026-11-27): a fresh process per tool and size builds the model, scores a 64x64 image, resets
its peak RSS (``/proc/self/clear_refs``), scores a generated JPEG and reports ``VmHWM`` minus
the RSS before the call.  Kept dependency-free: ``tools list`` prints each tool's budget
without loading numpy, Pillow or torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: Bytes in a GB as the settings write it (decimal, as "1.5GB" reads).
GB = 1_000_000_000
#: The default budget of one tool call: with it BRISQUE, NIQE and PIQE take any photo up to
#: the decode ceiling (a 100-MP one costs about 0.75 GB), and a 2-GB worker of one process
#: (:data:`PROCESS_BASE` + this) stays within its memory.
DEFAULT_TOOL_MEMORY = int(1.5 * GB)
#: Largest image decoded at all, whatever the budget: Pillow's own decompression-bomb limit
#: (twice its default ``MAX_IMAGE_PIXELS``), set explicitly by :mod:`iqa_tools.images`.  A
#: 100-MP camera photo is below it; a 20000x20000 "image" of a few kB is not.
DECODE_CEILING = 2 * 89_478_485
#: Bytes per pixel of the uint8 array a photo is decoded into (:attr:`LoadedImage.stored`).
STORED_BYTES_PER_PIXEL = 3
#: Bytes per pixel of Pillow's decoded image (RGB is stored as 4 bytes a pixel) and the JPEG
#: decoder's buffers, held beside the uint8 array while it is filled: decoding alone peaked at
#: 73 MB on 4 MP and 237 MB on 24 MP, 8.2 bytes a pixel with the uint8 array, plus 40 MB.
DECODE_BYTES_PER_PIXEL = 6
#: RSS of an idle tool process: Python, torch, pyiqa and one classical tool's model loaded
#: (measured 0.78-0.80 GB; MS-SSIM's process 1.0 GB).  A worker pays it once per process,
#: beside its calls.
PROCESS_BASE = int(0.8 * GB)
#: Tile side (pixels) the tiled working sets below were measured with: the CPU default.
MEASURED_TILE = 1024


@dataclass(frozen=True)
class MemoryModel:
    """One tool's memory per call: ``base`` bytes plus ``per_pixel`` bytes a pixel of the
    image (whole-image calls, beyond the uint8 image); ``tile`` bytes of working set when the
    tool scores in tiles (for :data:`MEASURED_TILE`-px tiles); where the figures come from."""

    base: int
    per_pixel: float
    tile: int | None = None
    measured: str = "measured"


#: Learned tools whose weights were not on the measuring machine: a CNN or transformer on the
#: whole image holds its widest activations (VGG's first layers: 64 channels of float32, two
#: at a time, 512 bytes a pixel) and the weights.  Deliberately high: a refusal names the
#: setting to raise, an OOM kill names nothing.  Tools that crop or resize inside pyiqa
#: (NIMA, MANIQA, TReS, AHIQ, CKDN) still get the full-size input tensor and its copies.
_UNMEASURED = MemoryModel(
    base=int(0.5 * GB),
    per_pixel=600.0,
    measured="not measured (weights absent): conservative figure",
)

#: A call's constant: the decoder's buffers and the model's small tensors (measured 40 MB for
#: decoding alone, 60-70 MB for a whole call on a small image).
_BASE = 70_000_000

#: pyiqa names of the metrics the registry scores tile by tile (:mod:`iqa_tools.tiling`).
TILED_METRICS = frozenset({"brisque", "niqe", "piqe", "ssim", "psnr"})

#: Per tool (pyiqa name).  Tiled tools: ``per_pixel`` is their whole-image cost, used at or
#: below ``tile_above_pixels``.  FR tools' ``per_pixel`` counts both images.
MODELS: dict[str, MemoryModel] = {
    # Tiled, call's peak at 4 / 24 MP: BRISQUE 155 / 268 MB, NIQE 155 / 260, PIQE 162 / 287,
    # PSNR 193 / 350 (a pair), SSIM 1183 / 1375 (its 11x11 window is a float64 im2col on the
    # CPU: 121 values a pixel of the tile).  Whole, 0.5 MP (constant counted per pixel, so
    # high): BRISQUE 134 B/px, NIQE 156, PIQE 99, PSNR 58, SSIM 1070, MS-SSIM 1060, GMSD 76,
    # VIF 310, FSIM 250, VSI 218 (pairs: both images).
    "brisque": MemoryModel(base=_BASE, per_pixel=135.0, tile=100_000_000),
    "niqe": MemoryModel(base=_BASE, per_pixel=160.0, tile=100_000_000),
    "piqe": MemoryModel(base=_BASE, per_pixel=100.0, tile=100_000_000),
    "psnr": MemoryModel(base=_BASE, per_pixel=60.0, tile=130_000_000),
    "ssim": MemoryModel(base=_BASE, per_pixel=1070.0, tile=1_200_000_000),
    "ms_ssim": MemoryModel(base=_BASE, per_pixel=1060.0),
    "gmsd": MemoryModel(base=_BASE, per_pixel=80.0),
    "vif": MemoryModel(base=_BASE, per_pixel=310.0),
    "fsim": MemoryModel(base=_BASE, per_pixel=250.0),
    "vsi": MemoryModel(base=_BASE, per_pixel=220.0),
}


#: The builtin backend's measurements of one image (its detection, analysis and opinion
#: features: :mod:`agentic_iqa.vlm.builtin.pixels`) at its cap of 1024 pixels on the long side,
#: above an idle process (76 MB): 86 MB on a 1024x768 JPEG and 112 MB on a 3000x3000 one, its
#: half-scale decode included; a 24-MP PNG, decoded whole, 268 MB, estimated at 366 MB
#: (2026-11-27, the builtin's features alone in a fresh process); with room.
BUILTIN_FEATURES = 150_000_000
#: The reductions a JPEG decoder applies while decoding (Pillow's ``draft``).
JPEG_DRAFT_SCALES = (1, 2, 4, 8)


def builtin_estimate(width: int, height: int, *, long_side: int, jpeg: bool) -> int:
    """Peak bytes of the builtin backend's measurements of a ``width`` x ``height`` image
    brought to ``long_side`` pixels: its features, and decoding it, which for a JPEG larger
    than the cap happens at the largest of 1/2, 1/4, 1/8 scale that still covers it, and for
    anything else at full size (8-bit, never a full-size float copy)."""
    decoded = width * height
    ratio = max(width, height) / long_side
    if jpeg and ratio > 1:
        scale = max(candidate for candidate in JPEG_DRAFT_SCALES if candidate <= ratio)
        decoded = math.ceil(width / scale) * math.ceil(height / scale)
    return BUILTIN_FEATURES + (STORED_BYTES_PER_PIXEL + DECODE_BYTES_PER_PIXEL) * decoded


def model_for(tool: str | None) -> MemoryModel:
    """The memory model of the pyiqa metric ``tool``; the conservative one if unmeasured."""
    return MODELS.get(tool or "", _UNMEASURED)


def estimate(
    tool: str | None,
    pixels: int,
    *,
    full_reference: bool = False,
    tiled: bool = False,
    tile_size: int | None = None,
) -> int:
    """Peak bytes of one call of pyiqa's ``tool`` on an image of ``pixels`` (and a reference of the
    same size for a full-reference tool), above an idle tool process."""
    model = model_for(tool)
    images = 2 if full_reference else 1
    stored = STORED_BYTES_PER_PIXEL * images * pixels
    decoding = DECODE_BYTES_PER_PIXEL * pixels  # one image at a time
    if tiled and model.tile is not None:
        side = tile_size or MEASURED_TILE
        working = int(model.tile * (side / MEASURED_TILE) ** 2)
        return model.base + stored + max(decoding, working)
    return model.base + stored + max(decoding, int(model.per_pixel * pixels))


def largest_pixels(
    tool: str | None,
    budget: int,
    *,
    full_reference: bool = False,
    tiles_above: int | None = None,
    tile_size: int | None = None,
    cap: int | None = None,
) -> int:
    """The most pixels a call of ``tool`` takes within ``budget`` bytes (0: none), up to the
    decode ceiling and ``cap``; ``tiles_above``: the size above which the tool tiles (None: it
    never does)."""
    limit = min(DECODE_CEILING, cap) if cap is not None else DECODE_CEILING

    def fits(pixels: int) -> bool:
        tiled = tiles_above is not None and pixels > tiles_above
        return (
            estimate(tool, pixels, full_reference=full_reference, tiled=tiled, tile_size=tile_size)
            <= budget
        )

    best = 0
    # Whole-image below the tiling size and tiled above it: each branch is monotone.
    branches = (
        [(1, limit)]
        if tiles_above is None
        else [(1, min(limit, tiles_above)), (tiles_above + 1, limit)]
    )
    for low, high in branches:
        if low > high or not fits(low):
            continue
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(middle) else (low, middle - 1)
        best = max(best, low)
    return best


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": GB,
    "gb": GB,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_bytes(text: str | int | float) -> int:
    """Bytes from ``1500000000``, ``"1.5GB"``, ``"2 GiB"`` or ``"800MB"``; ValueError if not."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = int(text)
    else:
        found = _SIZE.match(str(text))
        unit = (found.group(2) or "").lower() if found else ""
        if found is None or unit not in _UNITS:
            raise ValueError(f"not a size in bytes: {text!r} (write e.g. 1.5GB, 800MB, 2GiB)")
        value = int(float(found.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"a size in bytes must be positive, got {text!r}")
    return value


def format_bytes(size: int) -> str:
    """``1.50 GB``, ``750 MB``: decimal units, as the setting is written."""
    return f"{size / GB:.2f} GB" if size >= GB else f"{size / 1e6:.0f} MB"


def format_pixels(pixels: int) -> str:
    """``100 MP``, ``2.4 MP``: whole megapixels from 10 up."""
    megapixels = pixels / 1e6
    return f"{megapixels:.0f} MP" if megapixels >= 10 else f"{megapixels:.1f} MP"


@dataclass(frozen=True)
class WorkerFit:
    """What a worker's memory leaves each tool call: ``budget`` bytes (0: not even one idle
    process fits); ``lowered``: below the configured budget; ``line``: what to log."""

    budget: int
    lowered: bool
    line: str


def worker_fit(max_memory: int, concurrency: int, pool: str, tool_memory: int) -> WorkerFit:
    """The tool budget a worker of ``max_memory`` bytes can give each of ``concurrency``
    calls: every process pays :data:`PROCESS_BASE` (prefork: one per slot; threads and solo:
    one), and the rest is shared by the calls in flight."""
    processes = concurrency if pool == "prefork" else 1
    spare = max_memory - processes * PROCESS_BASE
    share = spare // concurrency if spare > 0 else 0
    setup = (
        f"--max-memory {format_bytes(max_memory)} with {concurrency} "
        f"{'process' if processes == 1 else 'processes'}"
        + (f" ({concurrency} calls in flight)" if processes != concurrency else "")
    )
    if share <= 0:
        return WorkerFit(
            0,
            True,
            f"{setup} leaves nothing for tool calls: each process needs "
            f"about {format_bytes(PROCESS_BASE)} idle; give the worker more "
            "memory or lower --concurrency",
        )
    if share >= tool_memory:
        return WorkerFit(
            tool_memory, False, f"{setup}: tool budget {format_bytes(tool_memory)} per call fits"
        )
    return WorkerFit(
        share,
        True,
        f"{setup}: tool budget lowered from {format_bytes(tool_memory)} to "
        f"{format_bytes(share)} per call (AGENTIC_IQA_TOOL_MEMORY), so that "
        f"{concurrency} call(s) and {processes} idle process(es) of "
        f"{format_bytes(PROCESS_BASE)} fit; larger images fail as too large",
    )
