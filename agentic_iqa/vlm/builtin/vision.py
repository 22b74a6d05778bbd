"""The builtin executor's eyes: detection and severity analysis from image measurements.

The measurements cover the whole image: the builtin backend cannot localise "the car", so every
named object gets the whole image's verdict (a remote VLM can do better; this is documented).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from iqa_tools import load_image

from ...query import categories_in
from .measure import Measurements, feature_vector, measure
from .severity import category_scores, explain, severity_word

#: Reported by detection when the query names none: every category at least slight.
DETECTION_THRESHOLD = 1.0


@lru_cache(maxsize=256)
def _measure_cached(path: str, mtime_ns: int, size: int) -> Measurements:
    return measure(load_image(path).pixels)


def measurements(path: str | Path) -> Measurements:
    stat = Path(path).stat()
    return _measure_cached(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _features_cached(path: str, mtime_ns: int, size: int) -> dict[str, float]:
    return feature_vector(load_image(path).pixels)


def features(path: str | Path) -> dict[str, float]:
    """Measurements and NSS statistics of the image (cached per file version)."""
    stat = Path(path).stat()
    return dict(_features_cached(str(path), stat.st_mtime_ns, stat.st_size))


def scores(path: str | Path) -> dict[str, float]:
    return category_scores(measurements(path))


def _scope_keys(scope: Any) -> list[str]:
    if isinstance(scope, list) and scope:
        return [str(item) for item in scope]
    return ["Global"]


def detect(image_path: str, scope: Any, query: str = "") -> dict[str, list[str]]:
    """Categories that are at least slight, plus any the query hints at, most severe first."""
    category = scores(image_path)
    found = [c for c, s in sorted(category.items(), key=lambda kv: -kv[1])
             if s >= DETECTION_THRESHOLD and c != "Sharpness"]
    for hinted in categories_in(query):
        if hinted not in found:
            found.append(hinted)
    if not found:
        # Nothing stands out: report the most likely one so analysis can say "none".
        found = [max((c for c in category if c != "Sharpness"), key=category.__getitem__)]
    return {key: list(found) for key in _scope_keys(scope)}


def analyse(image_path: str, distortion_set: dict[str, list[str]]) -> dict[str, list[dict]]:
    m = measurements(image_path)
    category = category_scores(m)
    return {
        key: [
            {"type": name, "severity": severity_word(category.get(name, 0.0)),
             "explanation": explain(name, m, category.get(name, 0.0))}
            for name in names
        ]
        for key, names in distortion_set.items()
    }
