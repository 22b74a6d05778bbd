"""Synthetic degradations at graded levels, for calibration, benchmarks and tests.

Each distortion category of the paper has one generator with four levels (1 = slight ...
4 = extreme), so "which distortion, how severe?" questions have a known answer.  Everything is
deterministic (seeded noise) and works on PIL images.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

LEVELS = (1, 2, 3, 4)
SEVERITY_OF_LEVEL = {0: "none", 1: "slight", 2: "moderate", 3: "severe", 4: "extreme"}


def blur(image: Image.Image, level: int) -> Image.Image:
    radius = (0.0, 1.0, 2.0, 3.5, 6.0)[level]
    return image.filter(ImageFilter.GaussianBlur(radius)) if radius else image.copy()


def noise(image: Image.Image, level: int, seed: int = 0) -> Image.Image:
    sigma = (0.0, 0.02, 0.045, 0.09, 0.18)[level]
    array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    noisy = array + np.random.default_rng(seed).normal(0.0, sigma, array.shape)
    return Image.fromarray((np.clip(noisy, 0, 1) * 255).round().astype(np.uint8))


def jpeg(image: Image.Image, level: int) -> Image.Image:
    quality = (95, 30, 15, 8, 3)[level]
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def darken(image: Image.Image, level: int) -> Image.Image:
    return ImageEnhance.Brightness(image).enhance((1.0, 0.7, 0.5, 0.3, 0.15)[level])


def brighten(image: Image.Image, level: int) -> Image.Image:
    return ImageEnhance.Brightness(image).enhance((1.0, 1.35, 1.7, 2.2, 3.0)[level])


def low_contrast(image: Image.Image, level: int) -> Image.Image:
    return ImageEnhance.Contrast(image).enhance((1.0, 0.7, 0.5, 0.3, 0.15)[level])


def desaturate(image: Image.Image, level: int) -> Image.Image:
    return ImageEnhance.Color(image).enhance((1.0, 0.6, 0.35, 0.15, 0.0)[level])


#: Generator per name, with the distortion category it produces.
DEGRADATIONS: dict[str, tuple[str, Callable[[Image.Image, int], Image.Image]]] = {
    "blur": ("Blurs", blur),
    "noise": ("Noise", noise),
    "jpeg": ("Compression", jpeg),
    "dark": ("Brightness change", darken),
    "bright": ("Brightness change", brighten),
    "contrast": ("Contrast", low_contrast),
    "desaturate": ("Color distortions", desaturate),
}


def degrade(image: Image.Image, kind: str, level: int) -> Image.Image:
    if level not in (0, *LEVELS):
        raise ValueError(f"level must be 0-4, got {level}")
    try:
        _, generator = DEGRADATIONS[kind]
    except KeyError:
        raise ValueError(f"unknown degradation {kind!r}; known: {sorted(DEGRADATIONS)}") from None
    return generator(image.convert("RGB"), level)
