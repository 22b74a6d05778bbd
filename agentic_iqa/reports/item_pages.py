"""Choose a job's items for its report's page and make what the page shows of each.

A job of any size shows at most :data:`ITEMS_ON_PAGE` items (``eval report --items-on-page``):
all of them when it has no more, else the worst disagreements (:data:`WORST_SHARE` of the
page: the largest absolute rank error against MOS, or a wrong multiple-choice answer), the
best (:data:`BEST_SHARE`), failures (:data:`FAILED_SHARE`) and a seeded sample of the rest;
``eval show JOB ITEM`` gives any other item.  Each shown item is a table row and its trace
(:mod:`.trace`), its long texts and lists cut (:data:`TEXT_LIMIT`, :data:`LIST_LIMIT`) so the
page's size is bounded by its number of items; each image a thumbnail of at most
:data:`THUMBNAIL_PX` pixels a side (JPEG, :data:`THUMBNAIL_QUALITY`), one per file however
many items show it (a reference shared by a full-reference dataset's images is embedded once).
"""

from __future__ import annotations

import base64
import io
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from .trace import Ranking

#: At most this many items on a report's page, unless ``--items-on-page`` says otherwise.
ITEMS_ON_PAGE = 500
#: The page's shares: worst disagreements, best agreements, failures; the rest a seeded sample.
WORST_SHARE = 0.4
BEST_SHARE = 0.2
FAILED_SHARE = 0.1
#: A thumbnail's longest side (pixels) and JPEG quality.
THUMBNAIL_PX = 160
THUMBNAIL_QUALITY = 70
#: A text in a shown trace is cut to this many characters, a list to this many entries.
TEXT_LIMIT = 2000
LIST_LIMIT = 40

#: Why an item is on the page.
WORST, BEST, FAILED, SAMPLE, ALL = "worst", "best", "failed", "sample", "all"


@dataclass(frozen=True)
class Outline:
    """A job's items as columns, in row id order: ``row_id``; ``failed``; ``wrong``: 1.0 for a
    done multiple-choice item answered wrong (or with no letter), 0.0 answered right, NaN for
    any other item."""

    row_id: np.ndarray
    failed: np.ndarray
    wrong: np.ndarray

    def __len__(self) -> int:
        return int(self.row_id.size)


@dataclass(frozen=True)
class Choice:
    """The items chosen for the page: ``why`` each row id is there, of ``total`` items."""

    why: dict[int, str]
    total: int
    limit: int

    @property
    def shown(self) -> int:
        return len(self.why)


def disagreements(outline: Outline, ranking: Ranking) -> np.ndarray:
    """Return each item's disagreement with its truth, aligned with ``outline.row_id``: the
    absolute rank error of a ranked MOS item, 1 or 0 for a wrong or right multiple-choice
    answer, NaN for any other item."""
    import numpy as np

    values = outline.wrong.copy()
    ids, errors = ranking.rank_errors()
    if ids.size:
        at = np.searchsorted(outline.row_id, ids)
        inside = at < outline.row_id.size
        found = inside.copy()
        found[inside] = outline.row_id[at[inside]] == ids[inside]
        values[at[found]] = np.abs(errors[found])
    return values


def choose_items(outline: Outline, ranking: Ranking, limit: int, seed: int = 0) -> Choice:
    """Return the items to show: every item when there are at most ``limit``, else the
    worst, the best, failures and a sample seeded by ``seed`` (the shares above)."""
    import numpy as np

    if limit < 0:
        raise ValueError(f"items on the page must be 0 or more, got {limit}")
    total = len(outline)
    ids = outline.row_id
    if total <= limit:
        return Choice({int(row): ALL for row in ids}, total, limit)
    why: dict[int, str] = {}
    values = disagreements(outline, ranking)
    scored = np.flatnonzero(~np.isnan(values))
    by_worst = scored[np.argsort(-values[scored], kind="stable")]
    for index in by_worst[: math.ceil(limit * WORST_SHARE)]:  # the worst one at least
        why[int(ids[index])] = WORST
    best = [index for index in by_worst[::-1] if int(ids[index]) not in why]
    for index in best[: int(limit * BEST_SHARE)]:
        why[int(ids[index])] = BEST
    rng = np.random.default_rng(seed)
    failed = np.flatnonzero(outline.failed)
    quota = min(int(limit * FAILED_SHARE), failed.size)
    for index in np.sort(rng.choice(failed, size=quota, replace=False)) if quota else []:
        why[int(ids[index])] = FAILED
    chosen = np.searchsorted(ids, np.fromiter(why, dtype=np.int64, count=len(why)))
    rest = np.setdiff1d(np.arange(total), chosen)
    wanted = min(limit - len(why), rest.size)
    for index in np.sort(rng.choice(rest, size=wanted, replace=False)) if wanted > 0 else []:
        why[int(ids[index])] = SAMPLE
    return Choice(why, total, limit)


@dataclass
class Thumbnails:
    """Each image file's thumbnail as a ``data:`` URI, or why there is none, by path."""

    longest: int = THUMBNAIL_PX
    quality: int = THUMBNAIL_QUALITY
    images: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def add(self, path: str | None) -> None:
        """Make ``path``'s thumbnail once (a missing or unreadable file: the reason why)."""
        if not path or path in self.images or path in self.missing:
            return
        made, reason = thumbnail(path, self.longest, self.quality)
        if made is not None:
            self.images[path] = made
        else:
            self.missing[path] = reason or "no thumbnail"


def thumbnail(path: str, longest: int, quality: int) -> tuple[str | None, str | None]:
    """Return a local image file as a JPEG ``data:`` URI at most ``longest`` pixels a side, and
    None; or None and why not (a store's URL, a missing file, not an image)."""
    from PIL import Image, UnidentifiedImageError

    if "://" in path:
        return None, "not a local file (the page shows local images only)"
    target = Path(os.fspath(path))
    if not target.is_file():
        return None, "file not found"
    try:
        with Image.open(target) as picture:
            picture.draft("RGB", (longest, longest))  # a JPEG decodes at a fraction of its size
            small = picture.convert("RGB")
            small.thumbnail((longest, longest))
            buffer = io.BytesIO()
            small.save(buffer, "JPEG", quality=quality, optimize=True)
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        return None, f"not a readable image: {type(exc).__name__}"
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"), None


def _cut(value: Any) -> Any:
    """Return a trace's value with its texts cut to :data:`TEXT_LIMIT` characters."""
    if isinstance(value, str):
        return value if len(value) <= TEXT_LIMIT else value[:TEXT_LIMIT] + "… (cut)"
    if isinstance(value, Mapping):
        return {str(key): _cut(entry) for key, entry in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(entry) for entry in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def bounded_trace(trace: Mapping[str, Any]) -> dict[str, Any]:
    """Return the trace as the page holds it: texts cut, each list at most :data:`LIST_LIMIT`
    entries (``cut`` says how many each had), an item's metadata only when it is short."""
    shown = _cut(trace)
    cut: dict[str, int] = {}
    for key in ("distortions", "tools", "replans", "model_calls"):
        entries = shown.get(key) or []
        if len(entries) > LIST_LIMIT:
            cut[key] = len(entries)
            shown[key] = entries[:LIST_LIMIT]
    meta = (shown.get("item") or {}).get("meta")
    if meta is not None and len(str(meta)) > TEXT_LIMIT:
        shown["item"]["meta"] = {"note": "metadata too long for the page: eval show gives it"}
    shown["cut"] = cut
    return shown


def _tool_names(trace: Mapping[str, Any]) -> str:
    names: list[str] = []
    for call in trace.get("tools") or []:
        if call.get("tool") and call["tool"] not in names:
            names.append(call["tool"])
    return ", ".join(names)


def page_row(trace: Mapping[str, Any], why: str) -> dict[str, Any]:
    """Return what the items' table shows of one item, with its bounded trace."""
    item, truth = trace["item"], trace.get("truth") or {}
    answer = trace.get("answer") or {}
    run = trace.get("run") or {}
    error = truth.get("rank_error")
    if truth.get("kind") == "mcq":
        correct = truth.get("correct")
        verdict = None if correct is None else ("right" if correct else "wrong")
        disagreement = None if correct is None else (0.0 if correct else 1.0)
        given: Any = truth.get("answer_letter") or answer.get("final_answer")
    else:
        verdict = None
        disagreement = abs(error) if error is not None else None
        given = (
            answer.get("quality_score")
            if answer.get("quality_score") is not None
            else answer.get("final_answer")
        )
    return _cut(
        {
            "id": item["id"],
            "line": item["line"],
            "why": why,
            "status": item["status"],
            "truth": truth.get("truth"),
            "answer": given,
            "rank_error": error,
            "verdict": verdict,
            "disagreement": disagreement,
            "tools": _tool_names(trace),
            "time_s": run.get("duration_s"),
            "cost_usd": (trace.get("usage") or {}).get("cost_usd"),
            "image": item.get("image"),
            "reference": item.get("reference"),
            "trace": bounded_trace(trace),
        }
    )


@dataclass
class ItemPages:
    """What the report's item section shows: its rows (worst disagreement first), the
    thumbnails they use, and how many items were chosen of how many."""

    rows: list[dict[str, Any]]
    thumbnails: Thumbnails
    choice: Choice
    job_id: str
    seed: int = 0


def _order(row: Mapping[str, Any]) -> tuple[float, int]:
    value = row.get("disagreement")
    return (-(value if value is not None else -1.0), int(row.get("line") or 0))


def item_pages(
    traces: Iterable[tuple[int, Mapping[str, Any]]],
    choice: Choice,
    job_id: str,
    *,
    seed: int = 0,
    thumbnails: Thumbnails | None = None,
) -> ItemPages:
    """Return the item section of the chosen traces (row id, trace), each image's thumbnail
    made once; the rows worst disagreement first, then those with none, by line."""
    thumbs = thumbnails or Thumbnails()
    rows = []
    for row_id, trace in traces:
        row = page_row(trace, choice.why.get(row_id, SAMPLE))
        thumbs.add(row["image"])
        thumbs.add(row["reference"])
        rows.append(row)
    rows.sort(key=_order)
    return ItemPages(rows, thumbs, choice, job_id, seed)
