"""The builtin executor's eyes: detection and severity analysis from image measurements.

What is measured depends on the scope: the whole image for "Global"; for a region the query
names by position (a half, a quarter, the centre: :func:`agentic_iqa.query.region_of`) the
crop of that region; for an object ("the car") still the whole image, since the builtin backend
cannot locate objects — and every explanation says which ("measured on the top-left quarter",
"measured on the whole image: the offline backend cannot locate 'the car'").  With a reference
image the severities are the change from the reference (:mod:`.severity`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from iqa_tools.images import version_key

from ...query import Region, categories_in, region_of
from .measure import Measurements, measure
from .pixels import feature_pixels
from .severity import category_scores, dominance, explain, presence, severity_word

Box = tuple[float, float, float, float]


@lru_cache(maxsize=512)
def _measure_cached(path: str, _version: str, box: Box | None) -> Measurements:
    return measure(feature_pixels(path), box)


def measurements(path: str | Path, box: Box | None = None) -> Measurements:
    return _measure_cached(str(path), version_key(path), box)


def scores(
    path: str | Path, reference: str | Path | None = None, box: Box | None = None
) -> dict[str, float]:
    """Continuous severity per category; the change from ``reference`` when one is given."""
    return category_scores(
        measurements(path, box), measurements(reference, box) if reference else None
    )


def scope_region(key: str, query: str = "") -> Region | None:
    """The region a scope key names (None for "Global" and for objects)."""
    return None if key == "Global" else region_of(key, query)


def where_measured(key: str, query: str = "") -> str:
    """What was measured for a scope key, in words."""
    if key == "Global":
        return "measured on the whole image"
    region = scope_region(key, query)
    if region is not None:
        return f"measured on the {region.name}"
    return f"measured on the whole image: the offline backend cannot locate 'the {key}'"


def scores_for(
    path: str | Path, key: str, query: str = "", reference: str | Path | None = None
) -> dict[str, float]:
    region = scope_region(key, query)
    return scores(path, reference, region.box if region else None)


def presence_for(
    path: str | Path, key: str, query: str = "", reference: str | Path | None = None
) -> dict[str, float]:
    """Per category, how far the scope is above the point from which it counts as present
    (>= 0: present; :func:`.severity.presence`)."""
    region = scope_region(key, query)
    box = region.box if region else None
    return presence(measurements(path, box), measurements(reference, box) if reference else None)


def dominance_for(
    path: str | Path, key: str, query: str = "", reference: str | Path | None = None
) -> dict[str, float] | None:
    """Per category, the probability that it is the distortion the scope suffers from (None
    with a reference: :func:`.severity.dominance`)."""
    region = scope_region(key, query)
    box = region.box if region else None
    return dominance(measurements(path, box), measurements(reference, box) if reference else None)


def _scope_keys(scope: Any) -> list[str]:
    if isinstance(scope, list) and scope:
        return [str(item) for item in scope]
    return ["Global"]


def _detected(category: Mapping[str, float], query: str, present: Mapping[str, float]) -> list[str]:
    """Categories present (``present`` >= 0: :func:`.severity.presence`), most severe first,
    plus any the query hints at."""
    found = [
        c
        for c, s in sorted(category.items(), key=lambda kv: -kv[1])
        if c != "Sharpness" and present.get(c, -1.0) >= 0.0
    ]
    for hinted in categories_in(query):
        if hinted not in found:
            found.append(hinted)
    if not found:
        # Nothing stands out: report the most likely one so analysis can say "none".
        found = [max((c for c in category if c != "Sharpness"), key=category.__getitem__)]
    return found


def detect(
    image_path: str, scope: Any, query: str = "", reference: str | None = None
) -> dict[str, list[str]]:
    """Per scope key: categories present, plus any the query hints at, most severe first."""
    return {
        key: _detected(
            scores_for(image_path, key, query, reference),
            query,
            presence_for(image_path, key, query, reference),
        )
        for key in _scope_keys(scope)
    }


def analyse(
    image_path: str,
    distortion_set: dict[str, list[str]],
    query: str = "",
    reference: str | None = None,
) -> dict[str, list[dict]]:
    result: dict[str, list[dict]] = {}
    for key, names in distortion_set.items():
        region = scope_region(key, query)
        box = region.box if region else None
        m = measurements(image_path, box)
        category = scores(image_path, reference, box)
        present = presence(m, measurements(reference, box) if reference else None)
        where = "" if key == "Global" else where_measured(key, query)
        if reference:
            where = ", ".join(part for part in (where, "compared with the reference") if part)
        result[key] = [
            {
                "type": name,
                "severity": severity_word(category.get(name, 0.0)),
                "explanation": explain(
                    name, m, category.get(name, 0.0), where, present.get(name, 0.0) >= 0.0
                ),
            }
            for name in names
        ]
    return result
