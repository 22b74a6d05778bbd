"""A public dataset's own files as job items, checked exactly as a manifest's rows are.

:mod:`agentic_iqa.datasets` reads each dataset as it ships (its score or question file, its
image folder); this module turns those records into :mod:`.manifest` entries, so a missing
image, a path that leaves ``--root`` (``..``, absolute, a symlink out), a MOS off the
dataset's scale or a question without options is one bad item with the path or value it
tried, as it would be in a hand-made manifest, and the dataset's scale and direction travel
with the job (:func:`describe`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..datasets import Dataset, DatasetFormatError, DatasetProblem, DatasetRow, get_dataset
from .manifest import KNOWN_COLUMNS, ManifestEntry, ManifestFormatError, read_records


def dataset_entries(name: str, root: Path, split: str | None = None, *,
                    check_images: bool = True, limit: int | None = None
                    ) -> tuple[dict[str, Any], Iterator[ManifestEntry]]:
    """The dataset's description (:func:`describe`) and its items under ``root``.

    Raises :class:`~.manifest.ManifestFormatError` now when ``root`` is not that dataset (its
    files are missing, the split is unknown), before anything is stored.
    """
    if not root.is_dir():
        raise ManifestFormatError(f"--root {root} is not a folder: give the folder the dataset "
                                  "was unpacked into")
    try:
        dataset = get_dataset(name)
        chosen = split or dataset.info.default_split
        records = dataset.rows(root, chosen)
    except DatasetFormatError as exc:
        raise ManifestFormatError(str(exc)) from exc
    # A dataset file comes from the internet: every path it names stays under --root.
    entries = read_records(_records(records), root, root=root, check_images=check_images,
                           mos_range=dataset.info.mos_range,
                           range_source=f"{dataset.info.name}'s published scale", limit=limit)
    return describe(dataset, root, chosen), entries


def describe(dataset: Dataset, root: Path, split: str) -> dict[str, Any]:
    """What a job keeps of its dataset: enough to read its scores right and to find it again."""
    info = dataset.info
    return {"name": info.name, "title": info.title, "kind": info.kind, "split": split,
            "root": str(root.resolve()), "mos_range": list(info.mos_range) if info.mos_range
            else None, "higher_is_better": info.higher_is_better,
            "full_reference": info.full_reference, "url": info.url}


def _records(rows: Iterator[DatasetRow | DatasetProblem]
             ) -> Iterator[tuple[int, Mapping[str, Any] | str]]:
    for row in rows:
        if isinstance(row, DatasetProblem):  # a NUL quoted from the file is shown, not stored
            yield row.line, row.message.replace("\x00", "\\x00")
            continue
        cells: dict[str, Any] = {key: value for key, value in row.meta.items()
                                 if key not in KNOWN_COLUMNS}
        cells.update(image=row.image, reference=row.reference, mos=row.mos, query=row.query,
                     options=list(row.options) if row.options else None, answer=row.answer,
                     id=row.item_id)
        yield row.line, cells
