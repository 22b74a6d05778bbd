"""Read the image regions a query names that need no model to find them.

A half, a quarter, the centre: the offline backend measures them on a crop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Region:
    """A part of the image given by position alone: ``box`` is (left, top, right, bottom) as
    fractions of the width and height."""

    name: str
    box: tuple[float, float, float, float]

    def pixels(self, width: int, height: int) -> tuple[int, int, int, int]:
        """Return the box in pixels (at least one pixel each way), for ``Image.crop`` or slicing."""
        left, top, right, bottom = self.box
        x0, y0 = int(round(left * width)), int(round(top * height))
        x1, y1 = int(round(right * width)), int(round(bottom * height))
        return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)


_HALVES = {
    "left": (0.0, 0.0, 0.5, 1.0),
    "right": (0.5, 0.0, 1.0, 1.0),
    "top": (0.0, 0.0, 1.0, 0.5),
    "bottom": (0.0, 0.5, 1.0, 1.0),
}


_CENTRE = (0.25, 0.25, 0.75, 0.75)


_POSITION_SYNONYMS = {
    "upper": "top",
    "lower": "bottom",
    "center": "centre",
    "middle": "centre",
    "central": "centre",
    "leftmost": "left",
    "rightmost": "right",
}


_PART_WORDS = {
    "half",
    "side",
    "quarter",
    "quadrant",
    "corner",
    "part",
    "section",
    "area",
    "region",
    "portion",
    "edge",
    "hand",
}


_IMAGE_WORDS = {"image", "photo", "picture", "photograph", "frame", "shot", "pic", "scene"}


def _position_words(text: str) -> list[str]:
    words = re.findall(r"[a-z]+", text.lower().replace("'s", ""))
    return [_POSITION_SYNONYMS.get(word, word) for word in words]


def _region_from_words(words: list[str]) -> Region | None:
    vertical = [w for w in words if w in ("top", "bottom")]
    horizontal = [w for w in words if w in ("left", "right")]
    if vertical and horizontal:
        v, h = vertical[0], horizontal[0]
        left = 0.0 if h == "left" else 0.5
        top = 0.0 if v == "top" else 0.5
        return Region(f"{v}-{h} quarter", (left, top, left + 0.5, top + 0.5))
    if vertical or horizontal:
        side = (vertical or horizontal)[0]
        return Region(f"{side} half", _HALVES[side])
    if "centre" in words:
        return Region("centre", _CENTRE)
    return None


def region_of(name: str, query: str = "") -> Region | None:
    """Return the region a named object is, when it is one the offline backend can find: a side
    ("left half", "the right side"), a quarter ("top-left corner", "upper right quadrant") or the
    centre; else None ("the car", "the sky").

    A name made only of position and part words counts ("top left", "bottom half", "centre").
    A bare side or centre word ("left", "top", "middle") counts only where ``query`` uses it as a
    place ("on the left", "in the middle", "the top of the image"), so "the top of the car" or
    "is the exposure right?" name no region.
    """
    words = _position_words(name)
    if not words or any(w not in (*_HALVES, "centre", *_PART_WORDS) for w in words):
        return None
    region = _region_from_words(words)
    if region is None:
        return None
    positions = [w for w in words if w not in _PART_WORDS]
    if len(positions) >= 2 or len(words) > len(positions):
        return region
    word = positions[0]
    text = " ".join(_position_words(query))
    images = "|".join(_IMAGE_WORDS)
    place = (
        rf"\b(?:on|at|in|to|towards|from|along|near) the {word}\b"
        rf"(?! of (?:the|this|that|its|a) (?!{images})\w)"
    )
    of_image = rf"\bthe {word} of (?:the|this|that|its|a) (?:{images})\b"
    return region if re.search(place, text) or re.search(of_image, text) else None
