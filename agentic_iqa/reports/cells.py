"""Cells of exported rows as values: typed from the database, or text read back from a CSV.

Reports, comparisons, the distortion breakdown and the figures all read the same rows
(:mod:`.export`); they read a cell the same way through these functions, and keep a computed
value the same way (:func:`finite_or_none`).
"""

from __future__ import annotations

import math
from typing import Any


def number(value: Any) -> float | None:
    """A finite float from a typed or text cell, else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def text(value: Any) -> str | None:
    """A cell's text, stripped; None when empty."""
    if value is None:
        return None
    stripped = str(value).strip()
    return stripped or None


def finite_or_none(value: float) -> float | None:
    """Return ``value``, or None when it is NaN or infinite (JSON has no such numbers)."""
    return value if math.isfinite(value) else None
