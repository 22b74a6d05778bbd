"""Synthetic degradations at graded levels, for calibration, benchmarks and tests.

Each distortion category of the paper has one generator with four levels (1 = slight ...
4 = extreme), so "which distortion, how severe?" questions have a known answer.  Everything is
deterministic (seeded noise) and works on PIL images.

Every generator has several *shapes*: realistic processes that make the same kind of damage, the
first being the default (what :func:`degrade` makes unless told otherwise).  Calibrating severity
cuts on one process per kind fits that process's quirks (e.g. brightening that clips highlights
leans on the blown-highlight reading); calibrating on every process of a kind
(:func:`calibration_shapes`) puts the cuts where the kind of damage, not the process, changes
level (:func:`calibration_shape` picks one per photo and level, rotating, for in-sample
questions).  None of them is a process of the test generator
(:mod:`.evaluation_degradations`).  A level means the same physical amount in every shape:

==========  =======================================================  ===========================
kind        shapes (default first)                                    level matching
==========  =======================================================  ===========================
blur        ``gaussian`` blur; ``box``: separable square box average  PSF σ per axis 1, 2, 3.5, 6
                                                                      (box width σ·√12)
noise       ``gaussian`` i.i.d. per channel in sRGB; ``mono``: one   the same noise σ on the
            noise field on all channels (luma grain); ``chroma``:    luma (BT.601) as the
            luma grain plus blotchy (low-pass) Cb/Cr noise           default's
jpeg        ``q420`` baseline 4:2:0; ``resaved``: saved at quality   the same final libjpeg
            85 then at the level's; ``q422``: 4:2:2, optimized       quality 30, 15, 8, 3
dark        ``scale`` (×0.7 ... ×0.15); ``crush``: exposure cut plus  a grey of 0.4 lands at
            a raised black point (shadows clip to black)              0.4 × 0.7, 0.5, 0.3, 0.15
bright      ``clip``: gain with clipping; ``rolloff``: the same gain  the same gain ×1.35 ... ×3
            with a smooth highlight shoulder (whites stay white,
            nothing else clips)
contrast    ``mean``: blend towards the image's mean grey; ``haze``:  the same slope 0.7 ... 0.15
            blend towards a bright airlight (0.75: lifted black,
            lowered white, as fog or veiling glare)
desaturate  ``luma``: blend towards BT.601 luma; ``lab``: CIELAB      the same factor 0.6 ... 0
            chroma scaled (L* kept); ``linear``: blend towards
            luminance in linear light
==========  =======================================================  ===========================
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter
from scipy import ndimage

LEVELS = (1, 2, 3, 4)
SEVERITY_OF_LEVEL = {0: "none", 1: "slight", 2: "moderate", 3: "severe", 4: "extreme"}

_SIGMA = (0.0, 1.0, 2.0, 3.5, 6.0)
_NOISE = (0.0, 0.02, 0.045, 0.09, 0.18)
_QUALITY = (95, 30, 15, 8, 3)
_DARK = (1.0, 0.7, 0.5, 0.3, 0.15)
_GAIN = (1.0, 1.35, 1.7, 2.2, 3.0)
_SLOPE = (1.0, 0.7, 0.5, 0.3, 0.15)
_SATURATION = (1.0, 0.6, 0.35, 0.15, 0.0)
_GREY = 0.4
#: BT.601 luma σ of i.i.d. per-channel noise of σ = 1.
_LUMA_OF_IID = math.sqrt(0.299**2 + 0.587**2 + 0.114**2)
_CHROMA_BLOTCH = 1.5  # px, low-pass of the chroma noise
_RESAVE_QUALITY = 85
_SHOULDER_KNEE = 0.65
_AIRLIGHT = 0.75


def as_array(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0


def as_image(array: np.ndarray) -> Image.Image:
    return Image.fromarray((np.clip(array, 0.0, 1.0) * 255.0).round().astype(np.uint8))


def to_linear(v: np.ndarray) -> np.ndarray:
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


def to_srgb(v: np.ndarray) -> np.ndarray:
    v = np.clip(v, 0.0, 1.0)
    return np.where(v <= 0.0031308, v * 12.92, 1.055 * v ** (1 / 2.4) - 0.055)


# -- blur -------------------------------------------------------------------------------------


def blur(image: Image.Image, level: int, shape: str = "gaussian") -> Image.Image:
    sigma = _SIGMA[level]
    if not sigma:
        return image.copy()
    if shape == "box":
        # A box of width w has σ = w / √12 per axis; PIL's radius r averages 2r + 1 pixels.
        return image.filter(ImageFilter.BoxBlur((sigma * math.sqrt(12.0) - 1.0) / 2.0))
    return image.filter(ImageFilter.GaussianBlur(sigma))


# -- noise ------------------------------------------------------------------------------------


def noise(image: Image.Image, level: int, seed: int = 0, shape: str = "gaussian") -> Image.Image:
    sigma = _NOISE[level]
    array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    rng = np.random.default_rng(seed)
    if shape == "gaussian" or not sigma:
        noisy = array + rng.normal(0.0, sigma, array.shape)
        return Image.fromarray((np.clip(noisy, 0, 1) * 255).round().astype(np.uint8))
    luma = rng.normal(0.0, sigma * _LUMA_OF_IID, array.shape[:2])
    offsets = np.repeat(luma[..., None], 3, axis=2)
    if shape == "chroma":
        cb, cr = (
            ndimage.gaussian_filter(rng.normal(0.0, 1.0, array.shape[:2]), _CHROMA_BLOTCH)
            for _ in range(2)
        )
        cb, cr = (c * sigma / max(float(c.std()), 1e-12) for c in (cb, cr))
        # Cb/Cr offsets carry no BT.601 luma.
        offsets += np.stack([1.402 * cr, -0.344136 * cb - 0.714136 * cr, 1.772 * cb], axis=-1)
    return as_image(array + offsets)


# -- JPEG -------------------------------------------------------------------------------------


def _jpeg(image: Image.Image, **options: object) -> Image.Image:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", **options)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def jpeg(image: Image.Image, level: int, shape: str = "q420") -> Image.Image:
    quality = _QUALITY[level]
    if shape == "resaved" and level:
        return _jpeg(_jpeg(image, quality=_RESAVE_QUALITY), quality=quality)
    if shape == "q422" and level:
        return _jpeg(image, quality=quality, subsampling=1, optimize=True)
    return _jpeg(image, quality=quality)


# -- exposure ---------------------------------------------------------------------------------


def darken(image: Image.Image, level: int, shape: str = "scale") -> Image.Image:
    factor = _DARK[level]
    if shape == "crush" and level:
        # Half the darkening (in log) from an exposure cut, half from a black point b that
        # maps the grey 0.4 to 0.4·√factor: shadows below b clip to black.
        half = math.sqrt(factor)
        black = _GREY * (1.0 - half) / (1.0 - _GREY * half)
        return as_image(half * np.clip((as_array(image) - black) / (1.0 - black), 0.0, 1.0))
    return ImageEnhance.Brightness(image).enhance(factor)


def _shoulder_width(gain: float, knee: float) -> float:
    """w with w·(1 − exp(−(gain − knee)/w)) = 1 − knee: the exponential shoulder from ``knee``
    that meets the straight part with slope 1 and maps ``gain`` (the old white) to 1."""
    low, high = 1e-6, 1e6
    for _ in range(200):
        mid = math.sqrt(low * high)
        if mid * (1.0 - math.exp(-(gain - knee) / mid)) < 1.0 - knee:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


def brighten(image: Image.Image, level: int, shape: str = "clip") -> Image.Image:
    gain = _GAIN[level]
    if shape == "rolloff" and gain > 1.0:
        u = as_array(image) * gain
        knee = _SHOULDER_KNEE
        width = _shoulder_width(gain, knee)
        top = 1.0 - math.exp(-(gain - knee) / width)
        shoulder = knee + (1.0 - knee) * (1.0 - np.exp(-(u - knee) / width)) / top
        return as_image(np.where(u <= knee, u, shoulder))
    return ImageEnhance.Brightness(image).enhance(gain)


# -- contrast ---------------------------------------------------------------------------------


def low_contrast(image: Image.Image, level: int, shape: str = "mean") -> Image.Image:
    slope = _SLOPE[level]
    if shape == "haze":
        return as_image(_AIRLIGHT + slope * (as_array(image) - _AIRLIGHT))
    return ImageEnhance.Contrast(image).enhance(slope)


# -- colour -----------------------------------------------------------------------------------

_RGB_TO_XYZ = np.array(
    [
        [0.4124564, 0.3575761, 0.1804375],
        [0.2126729, 0.7151522, 0.0721750],
        [0.0193339, 0.1191920, 0.9503041],
    ]
)
_WHITE = _RGB_TO_XYZ.sum(axis=1)
_EPSILON, _KAPPA = 216 / 24389, 24389 / 27


def _lab_f(t: np.ndarray) -> np.ndarray:
    return np.where(t > _EPSILON, np.cbrt(t), (_KAPPA * t + 16) / 116)


def _lab_f_inverse(f: np.ndarray) -> np.ndarray:
    return np.where(f**3 > _EPSILON, f**3, (116 * f - 16) / _KAPPA)


def _scale_lab_chroma(rgb: np.ndarray, factor: float) -> np.ndarray:
    xyz = to_linear(rgb) @ _RGB_TO_XYZ.T / _WHITE
    fx, fy, fz = (_lab_f(xyz[..., i]) for i in range(3))
    a, b = 500 * (fx - fy) * factor, 200 * (fy - fz) * factor
    fx, fz = fy + a / 500, fy - b / 200
    xyz = np.stack([_lab_f_inverse(fx), _lab_f_inverse(fy), _lab_f_inverse(fz)], -1) * _WHITE
    return to_srgb(xyz @ np.linalg.inv(_RGB_TO_XYZ).T)


def desaturate(image: Image.Image, level: int, shape: str = "luma") -> Image.Image:
    factor = _SATURATION[level]
    if shape == "lab" and level:
        return as_image(_scale_lab_chroma(as_array(image), factor))
    if shape == "linear" and level:
        linear = to_linear(as_array(image))
        y = (linear @ _RGB_TO_XYZ[1])[..., None]
        return as_image(to_srgb(y + factor * (linear - y)))
    return ImageEnhance.Color(image).enhance(factor)


#: Generator per name, with the distortion category it produces.
DEGRADATIONS: dict[str, tuple[str, Callable[..., Image.Image]]] = {
    "blur": ("Blurs", blur),
    "noise": ("Noise", noise),
    "jpeg": ("Compression", jpeg),
    "dark": ("Brightness change", darken),
    "bright": ("Brightness change", brighten),
    "contrast": ("Contrast", low_contrast),
    "desaturate": ("Color distortions", desaturate),
}

#: The processes each generator can use, the default first (see the module docstring).
SHAPES: dict[str, tuple[str, ...]] = {
    "blur": ("gaussian", "box"),
    "noise": ("gaussian", "mono", "chroma"),
    "jpeg": ("q420", "resaved", "q422"),
    "dark": ("scale", "crush"),
    "bright": ("clip", "rolloff"),
    "contrast": ("mean", "haze"),
    "desaturate": ("luma", "lab", "linear"),
}


def calibration_shape(key: str, kind: str, level: int) -> str:
    """The shape the calibration uses for photo ``key`` at ``level``: rotated over levels from
    a hash of the photo and kind, so every level mixes the shapes over photos."""
    shapes = SHAPES[kind]
    digest = int(hashlib.sha256(f"{key}:{kind}".encode()).hexdigest()[:8], 16)
    return shapes[(digest + level) % len(shapes)]


def calibration_shapes(key: str, kind: str, level: int) -> tuple[str, ...]:
    """The shapes the severity calibration measures for photo ``key`` at ``level``: all of
    them, so every shape weighs the same at every level (one rotated shape per photo and level
    mixed photos' content into the shapes and calibrated worse on ``--dev``)."""
    return SHAPES[kind]


def degrade(image: Image.Image, kind: str, level: int, shape: str | None = None) -> Image.Image:
    """``image`` degraded by ``kind`` at ``level`` (0 = none), with ``shape`` (one of
    ``SHAPES[kind]``; default: the first)."""
    if level not in (0, *LEVELS):
        raise ValueError(f"level must be 0-4, got {level}")
    try:
        _, generator = DEGRADATIONS[kind]
    except KeyError:
        raise ValueError(f"unknown degradation {kind!r}; known: {sorted(DEGRADATIONS)}") from None
    shape = SHAPES[kind][0] if shape is None else shape
    if shape not in SHAPES[kind]:
        raise ValueError(f"unknown shape {shape!r} of {kind!r}; known: {SHAPES[kind]}")
    return generator(image.convert("RGB"), level, shape=shape)
