"""What the builtin's overall opinion reads of a photo: simple measurements and natural-scene
statistics at two scales, as the shipped opinion was fitted on them (commit c20d270).

The severity and multiple-choice answers read :mod:`.measure`, which changed since; the overall
opinion stays on these features because, refitted or not, nothing built on the newer
measurements matched it on photos it had not seen: by nested cross-validation over 348 LIVE-C
photos its SRCC is 0.623 against 0.480, and on 200 photos neither saw 0.608 against 0.544
(``studies/opinion_selection.py``, ``docs/measurements/opinion-selection-2026-11-26.txt``).
So every number here is computed exactly as then: the shipped weights depend on it.

* blur: the "blur effect" of Crete-Roffet et al. (2007), 0 = crisp, 1 = fully blurred;
* noise: Immerkaer's (1996) noise sigma on the flattest half of the image;
* blockiness: luminance steps across 8x8 block edges against those inside blocks;
* exposure, contrast, colourfulness and colour cast;
* natural-scene statistics: moments of the mean-subtracted contrast-normalised luminance and of
  its products with its four neighbours, gradient and histogram statistics, at two scales.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import ndimage

from .measure import colourfulness, luminance
from .pixels import feature_pixels

_NOISE_KERNEL = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], dtype=np.float64)
_SHIFTS = ((0, 1), (1, 0), (1, 1), (1, -1))


def blur_effect(y: np.ndarray) -> float:
    blurred_v = ndimage.uniform_filter1d(y, size=9, axis=0)
    blurred_h = ndimage.uniform_filter1d(y, size=9, axis=1)
    scores = []
    for axis, blurred in ((0, blurred_v), (1, blurred_h)):
        d = np.abs(np.diff(y, axis=axis))
        d_blur = np.abs(np.diff(blurred, axis=axis))
        variation = np.maximum(0.0, d - d_blur)
        total = float(d.sum())
        scores.append(0.0 if total == 0 else (total - float(variation.sum())) / total)
    return float(max(scores))


def noise_sigma(y: np.ndarray) -> float:
    response = np.abs(ndimage.convolve(y.astype(np.float64), _NOISE_KERNEL))[1:-1, 1:-1]
    gradient = np.hypot(ndimage.sobel(y, axis=0), ndimage.sobel(y, axis=1))[1:-1, 1:-1]
    flat = gradient <= np.percentile(gradient, 50)
    if not flat.any():
        return 0.0
    return float(np.sqrt(np.pi / 2.0) * response[flat].mean() / 6.0)


def blockiness(y: np.ndarray, block: int = 8) -> float:
    """Mean |step| across block boundaries over inside blocks (1.0 = no blocking)."""
    ratios = []
    for axis in (0, 1):
        steps = np.abs(np.diff(y, axis=axis)).mean(axis=1 - axis)
        positions = np.arange(steps.size)
        boundary = steps[positions % block == block - 1]
        inside = steps[positions % block != block - 1]
        if boundary.size and inside.size and inside.mean() > 1e-6:
            ratios.append(float(boundary.mean() / inside.mean()))
    return float(np.mean(ratios)) if ratios else 1.0


def _neighbour_products(m: np.ndarray, dy: int, dx: int) -> np.ndarray:
    h, w = m.shape
    if dx >= 0:
        return m[: h - dy, : w - dx] * m[dy:, dx:]
    return m[: h - dy, -dx:] * m[dy:, : w + dx]


def nss_features(y: np.ndarray) -> dict[str, float]:
    """Natural-scene statistics of a luminance image, at full and half resolution."""
    features: dict[str, float] = {}
    y = y.astype(np.float64)
    for scale in (1, 2):
        mu = ndimage.gaussian_filter(y, 7 / 6)
        sigma = np.sqrt(np.maximum(ndimage.gaussian_filter(y * y, 7 / 6) - mu * mu, 0.0))
        mscn = (y - mu) / (sigma + 1 / 255)
        magnitude = np.abs(mscn)
        features[f"s{scale}_mscn_var"] = float(np.mean(mscn * mscn))
        features[f"s{scale}_mscn_shape"] = float(
            np.mean(mscn * mscn) / max(np.mean(magnitude) ** 2, 1e-12)
        )
        for dy, dx in _SHIFTS:
            product = _neighbour_products(mscn, dy, dx)
            left, right = product[product < 0], product[product >= 0]
            name = f"s{scale}_pair{dy}{dx + 1}"
            features[f"{name}_mean"] = float(product.mean())
            features[f"{name}_left"] = float(np.sqrt(np.mean(left**2))) if left.size else 0.0
            features[f"{name}_right"] = float(np.sqrt(np.mean(right**2))) if right.size else 0.0
        gradient = np.hypot(ndimage.sobel(y, axis=0), ndimage.sobel(y, axis=1))
        features[f"s{scale}_gradient_mean"] = float(gradient.mean())
        features[f"s{scale}_gradient_std"] = float(gradient.std())
        histogram = np.histogram(y, bins=64, range=(0.0, 1.0))[0] / y.size
        histogram = histogram[histogram > 0]
        features[f"s{scale}_entropy"] = float(-(histogram * np.log2(histogram)).sum())
        y = ndimage.zoom(ndimage.gaussian_filter(y, 1.0), 0.5, order=1)
    return features


def readings(pixels: np.ndarray) -> dict[str, float]:
    """The simple measurements, named ``m_*`` as the opinion's weights name them."""
    y = luminance(pixels)
    low, high = np.percentile(y, [1, 99])
    colour, cast = colourfulness(pixels)
    return {
        "m_blur": blur_effect(y),
        "m_noise_sigma": noise_sigma(y),
        "m_blockiness": blockiness(y),
        "m_mean_luminance": float(y.mean()),
        "m_dark_fraction": float((y < 0.02).mean()),
        "m_bright_fraction": float((y > 0.98).mean()),
        "m_rms_contrast": float(y.std()),
        "m_luminance_spread": float(high - low),
        "m_colourfulness": colour,
        "m_colour_cast": cast,
    }


def feature_vector(pixels: np.ndarray) -> dict[str, float]:
    """Every number the opinion may use: the measurements and the NSS statistics."""
    values = readings(pixels)
    values.update(nss_features(luminance(pixels)))
    return values


@lru_cache(maxsize=256)
def _cached(path: str, _version: str) -> dict[str, float]:
    return feature_vector(feature_pixels(path))


def opinion_features(path: str | Path) -> dict[str, float]:
    """The features of the image at ``path`` (computed once per file version and process)."""
    from iqa_tools.images import version_key

    return dict(_cached(str(path), version_key(path)))
