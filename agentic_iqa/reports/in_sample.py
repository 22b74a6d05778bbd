"""Whether a job's figures are in-sample for the builtin backend, for ``eval report`` and
``eval compare``.

Both warn when the builtin answered a job on images its shipped parameters were fitted or tuned
on (their SHA-256s ship in ``vlm/builtin/fitted_images.json``), with the same rule and words.
Only the items that ran (done or failed) are checked: a pending item's image says nothing
about figures that do not include it yet.  An image's SHA-256 is the one recorded when it was
submitted (``sha256:`` in the item's digest) where there is one, so a report of a stored job
reads no image; only an image without one is read and hashed, once per report or comparison.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .columns import JobColumns

#: SHA-256 of the images the builtin backend's parameters were fitted on (scripts/fitted_images.py).
FITTED_IMAGES = Path(__file__).resolve().parent.parent / "vlm" / "builtin" / "fitted_images.json"
SHA256 = "sha256:"


@cache
def fitted_images(path: Path = FITTED_IMAGES) -> dict[str, str]:
    """sha256 -> "set/file name" of every fitted image; read once, and only when needed."""
    return json.loads(path.read_text(encoding="utf-8"))["sha256"]


def job_mode(job: Mapping[str, Any]) -> str:
    """ "agent", "vlm" or "tools" (a metric job); jobs stored before modes: by their tools."""
    return job.get("mode") or ("tools" if job.get("tools") else "agent")


def uses_builtin(job: Mapping[str, Any]) -> bool:
    """Whether the builtin backend answered any role (a metric job asks no backend)."""
    if job_mode(job) == "tools":
        return False
    roles = (job.get("configuration") or {}).get("roles") or {}
    if roles:
        return any(role.get("backend") == "builtin" for role in roles.values())
    return "builtin" in str(job.get("backend") or "builtin").split(", ")


def image_sha256(image: str, recorded: str | None = None) -> str | None:
    """The image's SHA-256 (hex): the one recorded at submit, else its bytes' (None when it
    cannot be read)."""
    if recorded and recorded.startswith(SHA256):
        return recorded[len(SHA256) :]
    try:
        with open(os.path.expanduser(image), "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def fitted_overlap(
    images: Iterable[tuple[str, str | None]],
    items: int,
    fitted: Mapping[str, str],
    hashes: dict[str, str | None] | None = None,
) -> dict[str, int]:
    """Of the (image, recorded digest) of the items that ran, how many are fitted images and
    how many could not be read to tell; ``items``: the job's count (the warning's "of");
    ``hashes``: images already hashed (one comparison hashes an image once)."""
    hashes = {} if hashes is None else hashes
    found = unreadable = 0
    for image, recorded in images:
        if image not in hashes:
            hashes[image] = image_sha256(image, recorded)
        digest = hashes[image]
        unreadable += digest is None
        found += digest is not None and digest in fitted
    return {"items": found, "of": items, "unreadable": unreadable}


def overlap_of(
    columns: JobColumns, fitted: Mapping[str, str], hashes: dict[str, str | None] | None = None
) -> dict[str, int]:
    """The in-sample counts of a job's columns: made by their reader (the database's stored
    digests), else from the images of the rows that ran."""
    if columns.fitted_overlap is not None:
        return columns.fitted_overlap
    return fitted_overlap(
        ((image, None) for image in columns.ran_images or ()), columns.size, fitted, hashes
    )


def overlap_warnings(job: Mapping[str, Any], overlap: Mapping[str, int]) -> list[str]:
    """What a reader must be told of a job's in-sample counts (:func:`fitted_overlap`)."""
    short = str(job.get("id") or "?")[:8]
    warnings = []
    if overlap["items"]:
        warnings.append(
            f"{overlap['items']} of {overlap['of']} items of job {short} are "
            "images the builtin backend was fitted on: its figures on them are "
            "in-sample"
        )
    if overlap["unreadable"]:
        warnings.append(
            f"{overlap['unreadable']} image(s) of job {short} could not be read: "
            "not checked against the builtin's fitted images"
        )
    return warnings


def excluded_warning(job: Mapping[str, Any], left_out: int) -> str:
    """What a report or comparison says of the items ``--exclude-in-sample`` left out."""
    short = str(job.get("id") or "?")[:8]
    return (
        f"--exclude-in-sample: {left_out} item(s) of job {short} are images the builtin "
        "backend was fitted on and are left out: every figure of the job here is computed "
        "without them"
    )


def in_sample_warnings(
    job: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]] | JobColumns,
    fitted: Mapping[str, str] | None = None,
) -> list[str]:
    """The warnings ``eval compare`` gives this job about fitted images, for its report.

    ``job``: the report's job description (mode, configuration or backend); ``rows``: its
    exported rows or its columns; ``fitted``: sha256 -> name of the fitted images (default: the
    shipped list).
    """
    from .columns import JobColumns

    if not uses_builtin(job):
        return []
    columns = rows if isinstance(rows, JobColumns) else JobColumns.from_rows(rows, identities=False)
    return overlap_warnings(
        job, overlap_of(columns, fitted if fitted is not None else fitted_images())
    )
