"""Agreement with MOS per distortion type and per level: the table every KADID-10k or TID2013
paper gives, because one overall SRCC hides a method that ranks blur well and noise badly.

The groups come from each item's ``meta`` (the export's ``meta`` column, JSON text or a dict):
the KADID-10k and TID2013 readers put ``distortion``, ``distortion_index`` and ``level`` there
(read from the image names), and a manifest's extra columns (``distortion``, ``level``, or a
``meta`` column holding a JSON object) land there too.  :func:`breakdown` is pure: groups,
MOS and scores in, JSON-able data out (the report gives it its columns:
:class:`.columns.JobColumns`).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .cells import finite_or_none

#: A group with fewer items gives its count and no correlation (two points always agree).
MIN_ITEMS = 3
#: Keys of ``meta`` read as the distortion type, and as its level, first found wins.
TYPE_KEYS = ("distortion", "distortion_type", "distortion_name")
INDEX_KEYS = ("distortion_index",)
LEVEL_KEYS = ("level", "distortion_level")


def _meta(value: Any) -> dict[str, Any]:
    """An item's ``meta`` as a dict, whether stored as JSON text or read back from a CSV; a
    manifest column named ``meta`` that holds a JSON object is opened as well."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip().startswith("{") else {}
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    nested = value.get("meta")
    return {**_meta(nested), **value} if nested is not None else dict(value)


def _first(meta: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = meta.get(key)
        if value is not None and not isinstance(value, Mapping | list) and str(value).strip():
            text = str(value).strip()
            if isinstance(value, float) and value.is_integer():
                text = str(int(value))
            return text
    return None


def _rank(text: str) -> tuple[int, float, str]:
    """Numbers in numeric order, before any text in alphabetical order."""
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def distortion_of(meta: Any) -> tuple[str | None, str | None, str | None]:
    """(type, its index for ordering, level) of an item, each None where ``meta`` lacks it."""
    fields = _meta(meta)
    kind, index = _first(fields, TYPE_KEYS), _first(fields, INDEX_KEYS)
    if kind is None and index is not None:
        kind = f"type {index}"
    return kind, index, _first(fields, LEVEL_KEYS)


def _group_entry(
    positions: np.ndarray, mos: np.ndarray, scores: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    from .metrics import plcc, srcc

    lines: dict[str, dict[str, Any]] = {}
    for name, values in scores.items():
        at = positions[~np.isnan(values[positions])]
        entry: dict[str, Any] = {"n": int(at.size), "srcc": None, "plcc": None}
        if at.size >= MIN_ITEMS:
            x, y = values[at], mos[at]
            if np.ptp(x) > 0 and np.ptp(y) > 0:
                entry.update(srcc=finite_or_none(srcc(x, y)), plcc=finite_or_none(plcc(x, y)))
        lines[name] = entry
    return {"n": int(positions.size), "lines": lines}


def _column(values: Sequence[float | None] | np.ndarray) -> np.ndarray:
    """Scores as floats, None as NaN (the marks of an item a line did not score)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values
    return np.array([math.nan if value is None else value for value in values], dtype=float)


def breakdown(
    types: Sequence[str | None],
    levels: Sequence[str | None],
    mos: Sequence[float] | np.ndarray,
    scores: Mapping[str, Sequence[float | None] | np.ndarray],
    order: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Per distortion type and per level: items (``n``), and each line's n, SRCC and PLCC
    (scipy's, PLCC on the scores as they are) against MOS; None when no item has a type or
    a level.

    Item ``i`` has type ``types[i]``, level ``levels[i]``, MOS ``mos[i]`` and score
    ``scores[line][i]`` (None or NaN where that line did not score it).  ``order``: type -> its
    index in the dataset's list (types sort by it, else by name).  Fewer than
    :data:`MIN_ITEMS` scored items, or constant scores or MOS, give None correlations.
    """
    if not any(types) and not any(levels):
        return None
    order = order or {}
    result: dict[str, Any] = {"lines": list(scores), "min_items": MIN_ITEMS}
    truth = np.asarray(mos, dtype=float)
    columns = {name: _column(values) for name, values in scores.items()}
    for by, values, rank in (
        ("distortion", types, lambda name: (*_rank(order.get(name, "")), name)),
        ("level", levels, _rank),
    ):
        groups: dict[str, list[int]] = {}
        for position, group in enumerate(values):
            if group is not None:
                groups.setdefault(group, []).append(position)
        result[by] = [
            {"group": name, **_group_entry(np.array(groups[name], dtype=np.int64), truth, columns)}
            for name in sorted(groups, key=rank)
        ]
    return result


# -- text and HTML --------------------------------------------------------------------------------

_TITLES = {"distortion": "distortion type", "level": "distortion level"}


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def text_lines(
    result: Mapping[str, Any] | None, labels: Mapping[str, str] | None = None
) -> list[str]:
    """The breakdown as text tables, one per grouping; nothing without a breakdown.
    ``labels``: a line's name as shown ("agent" -> "VLM" for a job that asked the VLM alone)."""
    if not result:
        return []
    lines: list[str] = []
    names = result["lines"]
    shown = {name: (labels or {}).get(name, name) for name in names}
    for by in ("distortion", "level"):
        groups = result.get(by) or []
        if not groups:
            continue
        width = min(40, max(len(_TITLES[by]), *(len(g["group"]) for g in groups)))
        lines.append(
            f"By {_TITLES[by]} (SRCC, PLCC against MOS; fewer than "
            f"{result['min_items']} items: no correlation):"
        )
        heads = [f"{shown[name][:20]} SRCC" for name in names]
        lines.append(
            f"  {_TITLES[by]:<{width}} {'n':>5}"
            + "".join(f"  {head:>{len(head)}} {'PLCC':>6}" for head in heads)
        )
        for group in groups:
            lines.append(
                f"  {group['group']:<{width}} {group['n']:>5}"
                + "".join(
                    f"  {_value(group['lines'][name]['srcc']):>{len(head)}} "
                    f"{_value(group['lines'][name]['plcc']):>6}"
                    for name, head in zip(names, heads, strict=True)
                )
            )
    return lines


def html_tables(result: Mapping[str, Any] | None, labels: Mapping[str, str] | None = None) -> str:
    """The breakdown as HTML tables (every name escaped), each in a scrolling wrapper;
    ``labels`` as for :func:`text_lines`."""
    if not result:
        return ""
    names = result["lines"]
    shown = {name: html.escape((labels or {}).get(name, name)) for name in names}
    parts = []
    for by in ("distortion", "level"):
        groups = result.get(by) or []
        if not groups:
            continue
        head = "".join(
            f"<th>{shown[name]} SRCC</th><th>{shown[name]} PLCC</th><th>{shown[name]} n</th>"
            for name in names
        )
        rows = "".join(
            f'<tr><td class="text">{html.escape(group["group"])}</td><td>{group["n"]}</td>'
            + "".join(
                f"<td>{_value(group['lines'][name]['srcc'])}</td>"
                f"<td>{_value(group['lines'][name]['plcc'])}</td>"
                f"<td>{group['lines'][name]['n']}</td>"
                for name in names
            )
            + "</tr>"
            for group in groups
        )
        parts.append(
            f'<div class="scroll"><table id="breakdown-{by}"><tr>'
            f'<th class="text">{_TITLES[by]}</th><th>n</th>{head}</tr>{rows}'
            "</table></div>"
        )
    parts.append(
        f'<p class="note">SRCC and PLCC (on the scores as they are, a tool\'s own '
        "score sign-corrected so that higher is better; no fit) against "
        f"MOS within each group; a group of fewer than {result['min_items']} scored "
        "items gives its count and no correlation.</p>"
    )
    return "".join(parts)
