"""A public dataset's own files as job items, checked exactly as a manifest's rows are.

:mod:`agentic_iqa.datasets` reads each dataset as it ships (its score or question file, its
image folder); this module turns those records into :mod:`.manifest` entries, so a missing
image, a path that leaves ``--root`` (``..``, absolute, a symlink out), a MOS off the
dataset's scale or a question without options is one bad item with the path or value it
tried, as it would be in a hand-made manifest, and the dataset's scale and direction travel
with the job (:func:`describe`).

The root may be a bucket and prefix in an object store (``s3://bucket/prefix``): the readers
then read the dataset's files from the store (:func:`~agentic_iqa.datasets.files.dataset_root`)
and its items are the objects' URLs, confined to that prefix as a folder's paths are to it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from iqa_tools.storage import REMOTE_SCHEMES, display, scheme

from ..datasets import Dataset, DatasetFormatError, DatasetProblem, DatasetRow, get_dataset
from ..datasets.files import dataset_root
from ..redact import redact
from .manifest import KNOWN_COLUMNS, ManifestEntry, ManifestFormatError, read_records
from .subset import RowChoice


def dataset_entries(
    name: str,
    root: Path | str,
    split: str | None = None,
    *,
    check_images: bool = True,
    limit: int | None = None,
    score: str = "mos",
    subset: RowChoice | None = None,
) -> tuple[dict[str, Any], Iterator[ManifestEntry]]:
    """The dataset's description (:func:`describe`) and its items under ``root``, a folder or
    an object store's URL (``s3://bucket/prefix``); ``subset``: the records taken
    (:mod:`.subset`), chosen before any image is opened.

    Raises :class:`~.manifest.ManifestFormatError` now when ``root`` is not that dataset (its
    files are missing, the split is unknown) or its store cannot be read, before anything is
    stored.
    """
    try:
        folder = dataset_root(root)
        # Items are named under the folder as given here, or under the URL as given.
        location: Path | str = folder if isinstance(folder, Path) else str(root)
        if not folder.is_dir():
            raise ManifestFormatError(
                f"--root {root} is not a folder: give the folder the dataset was unpacked into"
                if isinstance(folder, Path)
                else f"--root {display(str(root))} holds no object (a folder in a store is a "
                "prefix): give the bucket and prefix the dataset was uploaded to"
            )
        dataset = get_dataset(name)
        if score != "mos":  # a published score other than the MOS (KonIQ-10k's MOS_zscore)
            dataset = dataset.scored(score)  # type: ignore[attr-defined]
        chosen = split or dataset.info.default_split
        records = dataset.rows(folder, chosen)
    except DatasetFormatError as exc:
        raise ManifestFormatError(str(exc)) from exc
    except ManifestFormatError:
        raise
    except Exception as exc:  # the store's own errors (botocore's are not OSError)
        if isinstance(root, Path) or scheme(str(root)) in (None, "file"):
            raise
        raise ManifestFormatError(_unreadable(str(root), exc)) from None
    # A dataset file comes from the internet: every path it names stays under --root.
    entries = read_records(
        _records(records),
        location,
        root=location,
        check_images=check_images,
        mos_range=dataset.info.mos_range,
        range_source=f"{dataset.info.name}'s published scale",
        limit=limit,
        subset=subset,
    )
    return describe(dataset, location, chosen), entries


def _unreadable(url: str, exc: Exception) -> str:
    """One line for a store that refused or failed the dataset's files: the URL, the error
    (credentials masked), and where the credential and endpoint come from."""
    if isinstance(exc, ImportError):
        extra = REMOTE_SCHEMES.get(scheme(url) or "", "")
        hint = f"pip install 'agentic-iqa[{extra}]'" if extra else "pip install aiohttp"
        return f"--root {display(url)}: the backend for {scheme(url)}:// is not installed ({hint})"
    detail = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else "")[:200]
    return (
        f"--root {display(url)}: the dataset's files cannot be read "
        f"({type(exc).__name__}{': ' + detail if detail else ''}); check the credential "
        "and endpoint the backend reads from its environment or config file (for S3: "
        "AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ~/.aws/credentials)"
    )


def describe(dataset: Dataset, root: Path | str, split: str) -> dict[str, Any]:
    """What a job keeps of its dataset: enough to read its scores right and to find it again
    (a folder resolved, a store's URL as given)."""
    info = dataset.info
    return {
        "name": info.name,
        "title": info.title,
        "kind": info.kind,
        "split": split,
        "root": root if isinstance(root, str) else str(root.resolve()),
        "mos_range": list(info.mos_range) if info.mos_range else None,
        "higher_is_better": info.higher_is_better,
        "full_reference": info.full_reference,
        "url": info.url,
    }


def _records(
    rows: Iterator[DatasetRow | DatasetProblem],
) -> Iterator[tuple[int, Mapping[str, Any] | str]]:
    for row in rows:
        if isinstance(row, DatasetProblem):  # a NUL quoted from the file is shown, not stored
            yield row.line, row.message.replace("\x00", "\\x00")
            continue
        cells: dict[str, Any] = {
            key: value for key, value in row.meta.items() if key not in KNOWN_COLUMNS
        }
        cells.update(
            image=row.image,
            reference=row.reference,
            mos=row.mos,
            query=row.query,
            options=list(row.options) if row.options else None,
            answer=row.answer,
            id=row.item_id,
        )
        yield row.line, cells
