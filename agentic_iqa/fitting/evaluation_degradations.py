"""A second, different degradation generator: for testing, never for calibration.

:mod:`agentic_iqa.fitting.degradations` (the *calibration* generator) is what the builtin backend's
severity thresholds are fitted on.  Figures measured on images made by the same generator reward
in-distribution tuning, so the benchmark asks its multiple-choice questions about images made
here, by other processes that produce the same seven categories:

=================  ======================================  ====================================
kind               this generator                          calibration generator (its shapes)
=================  ======================================  ====================================
defocus            disk (pillbox) PSF, radius 2σ           Gaussian blur σ; box average
motion             straight motion streak at 30°,          Gaussian blur σ; box average
                   length σ·√12
shot_noise         Poisson-Gaussian sensor noise in        additive Gaussian noise in sRGB;
                   linear light (90 % shot, 10 % read)     luma grain; luma + blotchy chroma
jpeg_offgrid       4:4:4 chroma, progressive, optimized,   4:2:0 baseline, grid at (0, 0);
                   8x8 grid shifted by (3, 5) pixels       re-saved; 4:2:2 optimized
gamma_dark         power curve x^γ (highlights kept)       linear scaling (×0.7 ... ×0.15);
                                                           exposure cut + raised black point
gamma_bright       power curve x^(1/γ) (no clipping)       linear gain with clipping; the same
                                                           gain with a smooth shoulder
curve_contrast     straight tone curve through mid-grey    blend towards the image's mean grey;
                                                           haze towards a bright airlight
hsv_desaturate     saturation scaled in HSV                blend towards BT.601 luma grey;
                                                           CIELAB chroma; linear-light luminance
=================  ======================================  ====================================

The levels (1 = slight ... 4 = extreme) were set *before* any measurement, by one physical
matching rule per kind, so a level here means what it means in the calibration generator:

* blur: the PSF's standard deviation across the blurred direction equals the Gaussian's σ of the
  same level (a disk of radius R has σ = R/2 per axis; a line of length L has σ = L/√12 along
  it) — σ = 1, 2, 3.5, 6 pixels;
* noise: the noise's standard deviation on a mid-grey (sRGB 0.5) equals the calibration σ
  (0.02, 0.045, 0.09, 0.18); being signal-dependent and gamma-encoded, it is stronger in shadows
  and weaker in highlights, as in a camera;
* JPEG: the same libjpeg quality per level (30, 15, 8, 3), other encoder settings;
* exposure: a grey of 0.4 lands where the calibration scaling puts it (0.4 × 0.7, 0.5, 0.3,
  0.15 darker; 0.4 × 1.35, 1.7, 2.2 and 0.95 for the clipped ×3 brighter);
* contrast: the same slope of the tone curve (0.7, 0.5, 0.3, 0.15), pivot at mid-grey instead
  of the image's mean (so the mean moves towards 0.5: a dark photo also gets lighter);
* colour: the same saturation factor (0.6, 0.35, 0.15, 0), in HSV instead of against luma.

Everything is deterministic (noise seeded from the caller's seed).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import numpy as np
from PIL import Image
from scipy import signal

# Pixel conversions are shared; the processes are not.
from .degradations import (
    LEVELS,
    SEVERITY_OF_LEVEL,
    as_array,
    as_image,
    to_linear,
    to_srgb,
)

__all__ = ["DEGRADATIONS", "LEVELS", "SEVERITY_OF_LEVEL", "degrade"]

_SIGMA = (0.0, 1.0, 2.0, 3.5, 6.0)
_NOISE = (0.0, 0.02, 0.045, 0.09, 0.18)
_QUALITY = (95, 30, 15, 8, 3)
_GREY = 0.4
_DARK_SCALE = (1.0, 0.7, 0.5, 0.3, 0.15)
_BRIGHT_TARGET = (_GREY, 0.54, 0.68, 0.88, 0.95)
_SLOPE = (1.0, 0.7, 0.5, 0.3, 0.15)
_SATURATION = (1.0, 0.6, 0.35, 0.15, 0.0)
_GRID_SHIFT = (3, 5)
_MOTION_ANGLE = 30.0


def _convolve(array: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Per-channel convolution with reflected borders; output has the input's size."""
    kh, kw = kernel.shape
    py, px = kh // 2, kw // 2
    padded = np.pad(array, ((py, kh - 1 - py), (px, kw - 1 - px), (0, 0)), mode="reflect")
    return np.stack(
        [signal.fftconvolve(padded[..., c], kernel, mode="valid") for c in range(array.shape[2])],
        axis=-1,
    )


def disk_kernel(radius: float, supersample: int = 8) -> np.ndarray:
    """A pillbox (defocus) PSF of the given radius, anti-aliased by supersampling."""
    half = int(math.ceil(radius))
    size = 2 * half + 1
    offsets = (np.arange(supersample) + 0.5) / supersample - 0.5
    kernel = np.zeros((size, size))
    for dy in offsets:
        for dx in offsets:
            yy, xx = np.mgrid[-half : half + 1, -half : half + 1]
            kernel += ((yy + dy) ** 2 + (xx + dx) ** 2) <= radius**2
    return kernel / kernel.sum()


def motion_kernel(length: float, angle_degrees: float, supersample: int = 16) -> np.ndarray:
    """A straight, uniform motion streak of ``length`` pixels, anti-aliased."""
    half = int(math.ceil(length / 2)) + 1
    size = 2 * half + 1
    kernel = np.zeros((size, size))
    steps = max(2, int(length * supersample))
    angle = math.radians(angle_degrees)
    for t in np.linspace(-length / 2, length / 2, steps):
        x, y = half + t * math.cos(angle), half - t * math.sin(angle)
        x0, y0 = int(math.floor(x)), int(math.floor(y))
        fx, fy = x - x0, y - y0
        for yy, xx, w in (
            (y0, x0, (1 - fx) * (1 - fy)),
            (y0, x0 + 1, fx * (1 - fy)),
            (y0 + 1, x0, (1 - fx) * fy),
            (y0 + 1, x0 + 1, fx * fy),
        ):
            if 0 <= yy < size and 0 <= xx < size:
                kernel[yy, xx] += w
    return kernel / kernel.sum()


def defocus(image: Image.Image, level: int) -> Image.Image:
    if not level:
        return image.copy()
    return as_image(_convolve(as_array(image), disk_kernel(2.0 * _SIGMA[level])))


def motion(image: Image.Image, level: int) -> Image.Image:
    if not level:
        return image.copy()
    kernel = motion_kernel(_SIGMA[level] * math.sqrt(12.0), _MOTION_ANGLE)
    return as_image(_convolve(as_array(image), kernel))


def shot_noise(image: Image.Image, level: int, seed: int = 0) -> Image.Image:
    """Poisson-Gaussian noise in linear light: variance = a·x + b, then sRGB encoding.

    a and b are set so that the encoded noise on sRGB mid-grey has the level's σ, with the read
    noise (b) carrying 10 % of the variance there.
    """
    if not level:
        return image.copy()
    grey = float(to_linear(np.array(0.5)))
    slope = 1.055 / 2.4 * grey ** (1 / 2.4 - 1)  # d sRGB / d linear at mid-grey
    variance = (_NOISE[level] / slope) ** 2  # in linear light, at mid-grey
    a, b = 0.9 * variance / grey, 0.1 * variance
    rng = np.random.default_rng(seed)
    linear = to_linear(as_array(image))
    # Poisson with a photon count of x / a (scaled back) has variance a·x.
    photons = rng.poisson(np.maximum(linear, 0.0) / a)
    noisy = photons * a + rng.normal(0.0, math.sqrt(b), linear.shape)
    return as_image(to_srgb(noisy))


def jpeg_offgrid(image: Image.Image, level: int) -> Image.Image:
    """JPEG at the level's quality with 4:4:4 chroma, progressive and optimized Huffman tables,
    on a block grid shifted by (3, 5) pixels (as after a crop); the 3- and 5-pixel margins keep
    the original pixels."""
    rgb = image.convert("RGB")
    dx, dy = _GRID_SHIFT
    inner = rgb.crop((dx, dy, rgb.width, rgb.height))
    buffer = io.BytesIO()
    inner.save(
        buffer,
        format="JPEG",
        quality=_QUALITY[level],
        subsampling=0,
        progressive=True,
        optimize=True,
    )
    result = rgb.copy()
    result.paste(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"), (dx, dy))
    return result


def gamma_dark(image: Image.Image, level: int) -> Image.Image:
    gamma = 1.0 + math.log(_DARK_SCALE[level]) / math.log(_GREY)
    return as_image(as_array(image) ** gamma)


def gamma_bright(image: Image.Image, level: int) -> Image.Image:
    exponent = math.log(_BRIGHT_TARGET[level]) / math.log(_GREY)
    return as_image(as_array(image) ** exponent)


def curve_contrast(image: Image.Image, level: int) -> Image.Image:
    return as_image(0.5 + _SLOPE[level] * (as_array(image) - 0.5))


def hsv_desaturate(image: Image.Image, level: int) -> Image.Image:
    h, s, v = image.convert("RGB").convert("HSV").split()
    s = s.point(lambda value: int(round(value * _SATURATION[level])))
    return Image.merge("HSV", (h, s, v)).convert("RGB")


#: Generator per name, with the distortion category it produces.
DEGRADATIONS: dict[str, tuple[str, Callable[[Image.Image, int], Image.Image]]] = {
    "defocus": ("Blurs", defocus),
    "motion": ("Blurs", motion),
    "shot_noise": ("Noise", shot_noise),
    "jpeg_offgrid": ("Compression", jpeg_offgrid),
    "gamma_dark": ("Brightness change", gamma_dark),
    "gamma_bright": ("Brightness change", gamma_bright),
    "curve_contrast": ("Contrast", curve_contrast),
    "hsv_desaturate": ("Color distortions", hsv_desaturate),
}


def degrade(image: Image.Image, kind: str, level: int, seed: int = 0) -> Image.Image:
    """``image`` degraded by ``kind`` at ``level`` (0 = untouched copy, 1-4 = slight-extreme)."""
    if level not in (0, *LEVELS):
        raise ValueError(f"level must be 0-4, got {level}")
    try:
        _, generator = DEGRADATIONS[kind]
    except KeyError:
        raise ValueError(f"unknown degradation {kind!r}; known: {sorted(DEGRADATIONS)}") from None
    if kind == "shot_noise":
        return shot_noise(image.convert("RGB"), level, seed)
    return generator(image.convert("RGB"), level)
