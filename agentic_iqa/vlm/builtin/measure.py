"""Measurements the offline agent takes on the image itself, in place of a VLM's eyes.

Each is a classical, content-light estimator of one distortion family, chosen because it needs no
weights, is fast on a CPU (a 500x500 photo takes a few tens of milliseconds), and is normalised
by the image's own statistics where the raw number would depend on the scene:

* blur: the width of the image's own strongest edges, in pixels.  Re-blurring a step edge of
  width σ with Gaussians of σa and σb changes its peak gradient by
  √((σ² + σb²) / (σ² + σa²)), whatever the edge's height, so the ratio of the two gradient
  maxima at each strong edge gives σ (Hu and de Haan, 2006).  The median over edges is taken per
  edge orientation and the largest is kept, so a motion streak (blur along one direction) counts
  as much as a defocus of the same width;
* noise: the median absolute response of Immerkaer's (1996) noise operator on the flattest 30 %
  of the image (robust to the texture that remains there);
* blockiness: how much stronger luminance steps are on one 8-pixel grid than on the others,
  searched over the 8 grid offsets, so a cropped JPEG (grid not at 0) counts too;
* exposure: the median luminance (the mid-tones, which a gamma curve moves as much as a gain
  does, unlike a mean dominated by highlights) and the fractions of crushed shadows and blown
  highlights;
* contrast: the spread of luminance relative to the room its level leaves, towards black or
  towards white whichever is nearer: (p95 − p5) / min(p95 + p5, 2 − p95 − p5), a Michelson
  contrast made symmetric.  Darkening (tones squeezed towards black) and brightening (towards
  white) leave it nearly unchanged, squeezing tones together lowers it — so exposure and
  contrast do not masquerade as each other;
* colourfulness: Hasler and Süsstrunk's (2003) metric, relative to the room the mean luminance
  leaves (min(mean, 1 − mean): the gamut narrows towards black and white, so darkening or
  brightening does not read as desaturation), and the strength of a colour cast.

:func:`measure` takes an optional box, so a named region ("the top-left quarter") is measured on
its own crop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import ndimage

#: Gaussian scales of the edge-width estimate (pixels).
_SIGMA_A, _SIGMA_B = 1.0, 3.0
#: Edge widths are reported within this range (pixels).
_BLUR_RANGE = (0.3, 20.0)


@dataclass(frozen=True)
class Measurements:
    blur_sigma: float
    noise_sigma: float
    blockiness: float
    mean_luminance: float
    median_luminance: float
    dark_fraction: float
    bright_fraction: float
    contrast: float
    colourfulness: float
    colour_cast: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @property
    def relative_colourfulness(self) -> float:
        """Colourfulness per unit of the room the mean luminance leaves towards black or white
        (unchanged by a pure exposure change)."""
        return self.colourfulness / max(min(self.mean_luminance, 1.0 - self.mean_luminance), 0.02)


def luminance(pixels: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma of an H x W x 3 float image in [0, 1]."""
    return pixels[..., 0] * 0.299 + pixels[..., 1] * 0.587 + pixels[..., 2] * 0.114


_DIRECTIONS = {0: (0, 1), 1: (1, 1), 2: (1, 0), 3: (1, -1)}


def blur_sigma(y: np.ndarray) -> float:
    """Width (Gaussian σ, pixels) of the strongest edges, the most blurred orientation."""
    y = y.astype(np.float64)
    low, high = _BLUR_RANGE
    if min(y.shape) < 8 * _SIGMA_B:
        return low
    fine = np.hypot(
        ndimage.gaussian_filter(y, _SIGMA_A, order=(0, 1)),
        ndimage.gaussian_filter(y, _SIGMA_A, order=(1, 0)),
    )
    gx = ndimage.gaussian_filter(y, _SIGMA_B, order=(0, 1))
    gy = ndimage.gaussian_filter(y, _SIGMA_B, order=(1, 0))
    coarse = np.hypot(gx, gy)
    orientation = np.mod(np.round(np.mod(np.arctan2(gy, gx), np.pi) / (np.pi / 4)), 4)
    # Edge centres: local maxima of the coarse gradient across the edge.
    peaks = np.zeros(y.shape, dtype=bool)
    for index, (dy, dx) in _DIRECTIONS.items():
        ahead = np.roll(coarse, (-dy, -dx), axis=(0, 1))
        behind = np.roll(coarse, (dy, dx), axis=(0, 1))
        peaks |= (orientation == index) & (coarse >= ahead) & (coarse > behind)
    margin = int(3 * _SIGMA_B) + 1
    inner = np.zeros_like(peaks)
    inner[margin:-margin, margin:-margin] = True
    peaks &= inner & (coarse > 1e-4)
    if peaks.sum() < 20:
        return high
    edges = peaks & (coarse >= np.quantile(coarse[peaks], 0.9))
    ratio2 = (fine[edges] / coarse[edges]) ** 2
    width2 = np.clip(
        (_SIGMA_B**2 - ratio2 * _SIGMA_A**2) / np.maximum(ratio2 - 1.0, 1e-6), low**2, high**2
    )
    widest = float(np.median(width2))
    kinds = orientation[edges]
    for index in _DIRECTIONS:
        chosen = kinds == index
        if chosen.sum() >= max(15, 0.08 * edges.sum()):
            widest = max(widest, float(np.median(width2[chosen])))
    return float(np.sqrt(widest))


_NOISE_KERNEL = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], dtype=np.float64)


def noise_sigma(y: np.ndarray) -> float:
    """Noise σ (luminance units) from the flattest 30 % of the image, robust to texture."""
    y = y.astype(np.float64)
    response = ndimage.convolve(y, _NOISE_KERNEL)[1:-1, 1:-1]
    gradient = np.hypot(ndimage.sobel(y, axis=0), ndimage.sobel(y, axis=1))[1:-1, 1:-1]
    if response.size == 0:
        return 0.0
    flat = gradient <= np.percentile(gradient, 30)
    # The operator's response to white noise of σ has standard deviation 6σ.
    return float(np.median(np.abs(response[flat])) / 0.6745 / 6.0)


#: The largest blockiness reported: steps on the block grid and none inside the blocks (every
#: block flat, as JPEG at quality 3 leaves them) would otherwise divide by zero.
BLOCKINESS_MAX = 50.0
_FLAT_STEP = 1e-6


def blockiness(y: np.ndarray, block: int = 8) -> float:
    """Mean |step| on the strongest 8-pixel grid over the median grid (1.0 = no blocking; at
    most :data:`BLOCKINESS_MAX`, where the blocks are flat and only their edges step)."""
    ratios = []
    for axis in (0, 1):
        steps = np.abs(np.diff(y, axis=axis)).mean(axis=1 - axis)
        if steps.size < 2 * block:
            continue
        positions = np.arange(steps.size)
        per_offset = np.array([steps[positions % block == o].mean() for o in range(block)])
        strongest = float(per_offset.max())
        if strongest > _FLAT_STEP:  # a flat image has no grid to read
            typical = max(float(np.median(per_offset)), _FLAT_STEP)
            ratios.append(min(strongest / typical, BLOCKINESS_MAX))
    return float(np.mean(ratios)) if ratios else 1.0


def colourfulness(pixels: np.ndarray) -> tuple[float, float]:
    rgb = pixels.astype(np.float64) * 255.0
    rg = rgb[..., 0] - rgb[..., 1]
    yb = 0.5 * (rgb[..., 0] + rgb[..., 1]) - rgb[..., 2]
    spread = np.hypot(rg.std(), yb.std())
    mean = np.hypot(rg.mean(), yb.mean())
    return float(spread + 0.3 * mean), float(mean)


def crop(pixels: np.ndarray, box: tuple[float, float, float, float] | None) -> np.ndarray:
    """The part of ``pixels`` in ``box`` (left, top, right, bottom as fractions)."""
    if box is None:
        return pixels
    height, width = pixels.shape[:2]
    left, top, right, bottom = box
    x0, y0 = int(round(left * width)), int(round(top * height))
    x1, y1 = max(int(round(right * width)), x0 + 1), max(int(round(bottom * height)), y0 + 1)
    return pixels[y0:y1, x0:x1]


def measure(
    pixels: np.ndarray, box: tuple[float, float, float, float] | None = None
) -> Measurements:
    pixels = crop(pixels, box)
    y = luminance(pixels).astype(np.float64)
    p5, median, p95 = np.percentile(y, [5, 50, 95])
    colour, cast = colourfulness(pixels)
    return Measurements(
        blur_sigma=blur_sigma(y),
        noise_sigma=noise_sigma(y),
        blockiness=blockiness(y),
        mean_luminance=float(y.mean()),
        median_luminance=float(median),
        dark_fraction=float((y < 0.02).mean()),
        bright_fraction=float((y > 0.98).mean()),
        contrast=float((p95 - p5) / max(min(p95 + p5, 2.0 - p95 - p5), 1e-3)),
        colourfulness=colour,
        colour_cast=cast,
    )


def opinion_features(m: Measurements) -> dict[str, float]:
    """The few robust inputs of the builtin's overall opinion (:mod:`.opinion`)."""
    return {
        "log_blur": float(np.log(max(m.blur_sigma, 0.3))),
        "log_noise": float(np.log(max(m.noise_sigma, 1e-4))),
        "blockiness": m.blockiness,
        "mean_luminance": m.mean_luminance,
        "exposure_deviation": abs(m.mean_luminance - 0.45),
        "bright_fraction": m.bright_fraction,
        "dark_fraction": m.dark_fraction,
        "contrast": m.contrast,
        "colourfulness": m.colourfulness / 100.0,
    }
