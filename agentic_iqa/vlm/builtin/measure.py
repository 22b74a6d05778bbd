"""Measurements the offline agent takes on the image itself, in place of a VLM's eyes.

Each is a classical, content-light estimator of one distortion family, chosen because it needs no
weights and is fast on a CPU (a 500x500 photo takes a few milliseconds):

* blur: the "blur effect" of Crete-Roffet et al. (2007): how much re-blurring the image changes
  its neighbour differences; 0 = crisp, 1 = fully blurred;
* noise: Immerkaer's (1996) fast noise-sigma estimate on the flattest half of the image, so
  texture is not mistaken for noise;
* blockiness: how much stronger luminance steps are across 8x8 JPEG block edges than inside blocks;
* exposure: mean luminance and the fractions of clipped shadows and highlights;
* contrast: RMS contrast and the 1-99 percentile luminance spread;
* colourfulness: Hasler and Suesstrunk's (2003) metric, and the strength of a colour cast;
* natural-scene statistics (:func:`nss_features`): moments of the mean-subtracted
  contrast-normalised (MSCN) luminance and of its products with its four neighbours, as in BRISQUE
  but from moments instead of distribution fits, plus gradient and histogram statistics, at two
  scales.  They feed the builtin's overall opinion, not the per-distortion severities.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import ndimage


@dataclass(frozen=True)
class Measurements:
    blur: float
    noise_sigma: float
    blockiness: float
    mean_luminance: float
    dark_fraction: float
    bright_fraction: float
    rms_contrast: float
    luminance_spread: float
    colourfulness: float
    colour_cast: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def luminance(pixels: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma of an H x W x 3 float image in [0, 1]."""
    return pixels[..., 0] * 0.299 + pixels[..., 1] * 0.587 + pixels[..., 2] * 0.114


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


_NOISE_KERNEL = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], dtype=np.float64)


def noise_sigma(y: np.ndarray) -> float:
    response = np.abs(ndimage.convolve(y.astype(np.float64), _NOISE_KERNEL))[1:-1, 1:-1]
    gradient = np.hypot(ndimage.sobel(y, axis=0), ndimage.sobel(y, axis=1))[1:-1, 1:-1]
    flat = gradient <= np.percentile(gradient, 50)
    if not flat.any():
        return 0.0
    return float(np.sqrt(np.pi / 2.0) * response[flat].mean() / 6.0)


def blockiness(y: np.ndarray, block: int = 8) -> float:
    """Ratio of mean |step| across block boundaries to inside blocks (1.0 = no blocking)."""
    ratios = []
    for axis in (0, 1):
        steps = np.abs(np.diff(y, axis=axis)).mean(axis=1 - axis)
        positions = np.arange(steps.size)
        boundary = steps[positions % block == block - 1]
        inside = steps[positions % block != block - 1]
        if boundary.size and inside.size and inside.mean() > 1e-6:
            ratios.append(float(boundary.mean() / inside.mean()))
    return float(np.mean(ratios)) if ratios else 1.0


def colourfulness(pixels: np.ndarray) -> tuple[float, float]:
    rgb = pixels.astype(np.float64) * 255.0
    rg = rgb[..., 0] - rgb[..., 1]
    yb = 0.5 * (rgb[..., 0] + rgb[..., 1]) - rgb[..., 2]
    spread = np.hypot(rg.std(), yb.std())
    mean = np.hypot(rg.mean(), yb.mean())
    return float(spread + 0.3 * mean), float(mean)


_SHIFTS = ((0, 1), (1, 0), (1, 1), (1, -1))


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
        features[f"s{scale}_mscn_shape"] = float(np.mean(mscn * mscn) /
                                                 max(np.mean(magnitude) ** 2, 1e-12))
        for dy, dx in _SHIFTS:
            product = _neighbour_products(mscn, dy, dx)
            left, right = product[product < 0], product[product >= 0]
            name = f"s{scale}_pair{dy}{dx + 1}"
            features[f"{name}_mean"] = float(product.mean())
            features[f"{name}_left"] = float(np.sqrt(np.mean(left ** 2))) if left.size else 0.0
            features[f"{name}_right"] = float(np.sqrt(np.mean(right ** 2))) if right.size else 0.0
        gradient = np.hypot(ndimage.sobel(y, axis=0), ndimage.sobel(y, axis=1))
        features[f"s{scale}_gradient_mean"] = float(gradient.mean())
        features[f"s{scale}_gradient_std"] = float(gradient.std())
        histogram = np.histogram(y, bins=64, range=(0.0, 1.0))[0] / y.size
        histogram = histogram[histogram > 0]
        features[f"s{scale}_entropy"] = float(-(histogram * np.log2(histogram)).sum())
        y = ndimage.zoom(ndimage.gaussian_filter(y, 1.0), 0.5, order=1)
    return features


def feature_vector(pixels: np.ndarray) -> dict[str, float]:
    """Every number the builtin opinion model may use: measurements and NSS statistics."""
    values = {f"m_{k}": v for k, v in measure(pixels).as_dict().items()}
    values.update(nss_features(luminance(pixels)))
    return values


def measure(pixels: np.ndarray) -> Measurements:
    y = luminance(pixels)
    low, high = np.percentile(y, [1, 99])
    colour, cast = colourfulness(pixels)
    return Measurements(
        blur=blur_effect(y),
        noise_sigma=noise_sigma(y),
        blockiness=blockiness(y),
        mean_luminance=float(y.mean()),
        dark_fraction=float((y < 0.02).mean()),
        bright_fraction=float((y > 0.98).mean()),
        rms_contrast=float(y.std()),
        luminance_spread=float(high - low),
        colourfulness=colour,
        colour_cast=cast,
    )
