"""Read a manifest, or rows read elsewhere, as a stream of checked items and bad rows.

A job may cover tens of thousands of images, so the manifest is never loaded whole: rows are
parsed (:mod:`.formats`), checked (:mod:`.rows`) and yielded one by one (:mod:`.prefetch`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from iqa_tools.access import AccessPolicy
from iqa_tools.storage import is_url

from ..paths import Root
from ..subset import RawRow, RowChoice
from .formats import ManifestFormatError, open_rows
from .prefetch import check_rows
from .rows import ManifestEntry


def read_manifest(
    path: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    check_images: bool = True,
    mos_range: tuple[float, float] | None = None,
    image_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    access: AccessPolicy | None = None,
    subset: RowChoice | None = None,
) -> Iterator[ManifestEntry]:
    """Items and bad rows of a CSV, JSON, JSONL or image-folder manifest, in file order.

    Image and reference paths are relative to ``image_dir`` when given, else to the manifest's
    folder (the folder itself for a folder manifest), unless absolute.  ``limit``: the first
    ``limit`` rows only (bad rows count). With ``root`` every path must resolve, after symlinks and
    ``..``, to somewhere inside ``root``. ``check_images`` decodes each image in full (Pillow's
    ``verify()`` passes truncated files) and checks it is at least
    :data:`iqa_tools.images.MIN_IMAGE_SIDE` pixels a side, so files no tool can read fail here
    and not in the middle of a run. With ``mos_range`` (low, high) a MOS outside it is a bad row.
    ``access``: what the rows may name (:class:`iqa_tools.access.AccessPolicy`); None: ``root``
    and ``image_dir`` named, no ``--allow-urls``, the environment's allow-list.  ``subset``:
    the rows taken (:mod:`..subset`: offset, limit, a seeded sample), chosen before any check.

    The ``item_id`` of every :class:`ManifestItem` is unique: an id is claimed by the first good
    row that has it, and a later row with the same id is an error whose ``item_id`` is None. A
    bad row claims nothing; its error keeps the id it gave, for the message.

    Raises ManifestFormatError now (not on first iteration) when the file cannot be a manifest.
    """
    source = Path(path)
    confine: Path | str | None = None
    if root is not None and is_url(os.fspath(root)):
        confine = os.fspath(root)  # a bucket and prefix: checked name by name
    elif root is not None:
        confine = Path(root).resolve()
        if not confine.is_dir():
            raise ManifestFormatError(f"--root {root} is not a folder")
    if mos_range is not None:
        _check_mos_range(mos_range)
    rows, folder = open_rows(source)
    base: Path | str = folder
    if image_dir is not None and is_url(os.fspath(image_dir)):
        base = os.fspath(image_dir)  # images in an object store, under this prefix
    elif image_dir is not None:
        base = Path(image_dir)
        if not base.is_dir():
            raise ManifestFormatError(f"--image-dir {image_dir} is not a folder")
    if limit is not None:
        rows = islice(rows, limit)
    if subset is not None:
        rows = subset.apply(rows)
    if access is None:
        access = AccessPolicy.for_source(root=root, image_dir=image_dir)
    return check_rows(
        rows,
        base=base,
        paths=Root.of(base, confine),
        check_images=check_images,
        mos_range=mos_range,
        access=access,
    )


def read_records(
    records: Iterable[RawRow],
    base: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    check_images: bool = True,
    mos_range: tuple[float, float] | None = None,
    range_source: str = "--mos-range",
    limit: int | None = None,
    access: AccessPolicy | None = None,
    subset: RowChoice | None = None,
) -> Iterator[ManifestEntry]:
    """Items and bad records of rows read elsewhere (a public dataset's own files), checked
    exactly as a manifest's rows are: ``(line, cells)`` with the manifest's column names, or
    ``(line, why it cannot be read)``; paths are relative to ``base`` and, with ``root``,
    confined to it (:mod:`..paths`).  ``range_source`` names where ``mos_range`` came from, for
    the message of a MOS outside it (a dataset's own scale is no option the user gave)."""
    if mos_range is not None:
        _check_mos_range(mos_range)
    rows: Iterator[RawRow] = iter(records)
    if limit is not None:
        rows = islice(rows, limit)
    if subset is not None:
        rows = subset.apply(rows)
    text = os.fspath(base)  # a URL (an object store's prefix) stays text: Path would mangle it
    if access is None:
        access = AccessPolicy.for_source(root=root, image_dir=base)
    return check_rows(
        rows,
        base=text if is_url(text) else Path(base),
        paths=Root.of(base, root),
        check_images=check_images,
        mos_range=mos_range,
        range_source=range_source,
        access=access,
    )


def _check_mos_range(mos_range: tuple[float, float]) -> None:
    low, high = mos_range
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ManifestFormatError(
            f"MOS range {low:g} {high:g} is not a range: give two finite numbers, LOW < HIGH"
        )
