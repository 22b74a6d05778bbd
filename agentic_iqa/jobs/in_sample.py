"""Whether one job's figures are in-sample for the builtin backend, for ``eval report``.

``eval compare`` warns when the builtin answered a job on images its shipped parameters were
fitted or tuned on (their SHA-256s ship in ``vlm/builtin/fitted_images.json``); a report of
the same job must say the same, with the same rule and words, so this reuses compare's.  A
module of its own because :mod:`.compare` imports :mod:`.report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .compare import _Job, _overlap, fitted_images, uses_builtin


def in_sample_warnings(job: Mapping[str, Any], rows: Iterable[Mapping[str, Any]],
                       fitted: Mapping[str, str] | None = None) -> list[str]:
    """The warnings ``eval compare`` gives this job about fitted images, for its report.

    ``job``: the report's job description (mode, configuration or backend); ``rows``: its
    exported rows; ``fitted``: sha256 -> name of the fitted images (default: the shipped list).
    """
    if not uses_builtin(job):
        return []
    short = str(job.get("id") or "?")[:8]
    rows = list(rows)
    images = [str(row["image"]) for row in rows if row.get("image")]
    overlap = _overlap(_Job(job, items=[str(row.get("item_id")) for row in rows],
                            images=images), fitted if fitted is not None else fitted_images(), {})
    warnings = []
    if overlap["items"]:
        warnings.append(f"{overlap['items']} of {overlap['of']} items of job {short} are "
                        "images the builtin backend was fitted on: its figures on them are "
                        "in-sample")
    if overlap["unreadable"]:
        warnings.append(f"{overlap['unreadable']} image(s) of job {short} could not be read: "
                        "not checked against the builtin's fitted images")
    return warnings
