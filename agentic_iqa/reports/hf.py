"""Write a job's rows and traces as a Hugging Face ``datasets`` folder (``--format hf``).

The folder is what :meth:`datasets.Dataset.save_to_disk` writes, so
``datasets.load_from_disk(path)`` reads it back: one row per item, the export's columns
(:mod:`.export`, typed as its Parquet is: scores float64, ``line`` int64, ``correct`` bool,
other columns text, a dict or list as JSON text) and ``trace``, the item's whole trace
(:mod:`.trace`) as JSON text.  Images stay paths (``image``, ``reference``) unless embedded:
then ``image_file`` and ``reference_file`` hold each file's bytes as a ``datasets.Image``
(None where the file is missing or not a readable image, as for an item that failed on it).

Rows are streamed through :meth:`datasets.Dataset.from_generator`, which writes them to Arrow
in batches, so memory stays flat whatever the job's size; the folder appears under its name
only once complete.  ``datasets`` is an extra (``pip install 'agentic-iqa[hf]'``):
:class:`MissingExtra` says so when it is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .export import _parquet_value, column_type

#: The column holding the trace, as JSON text.
TRACE_COLUMN = "trace"
#: The columns holding embedded image bytes (``--embed-images``), after the export's own.
IMAGE_COLUMNS = {"image": "image_file", "reference": "reference_file"}
#: Rows per Arrow batch written (images embedded: fewer, a batch is held in memory).
BATCH = 1000
IMAGE_BATCH = 100


class MissingExtra(RuntimeError):
    """The ``datasets`` library is not installed."""

    def __str__(self) -> str:
        return (
            "--format hf needs the `datasets` library: pip install 'agentic-iqa[hf]' "
            "(or pip install datasets)"
        )


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise MissingExtra() from None
    return datasets


def hf_columns(columns: Iterable[str], *, embed_images: bool) -> list[str]:
    """Return the dataset's columns: the export's, ``trace``, and the embedded images'."""
    return [
        *columns,
        TRACE_COLUMN,
        *(IMAGE_COLUMNS.values() if embed_images else ()),
    ]


def features(columns: Iterable[str], *, embed_images: bool) -> Any:
    """Return the dataset's :class:`datasets.Features` for the export's ``columns``."""
    datasets = _datasets()
    kinds = {"string": "string", "float64": "float64", "int64": "int64", "bool": "bool"}
    spec: dict[str, Any] = {
        name: datasets.Value(kinds.get(column_type(name), "string")) for name in columns
    }
    spec[TRACE_COLUMN] = datasets.Value("string")
    if embed_images:
        for name in IMAGE_COLUMNS.values():
            spec[name] = datasets.Image()
    return datasets.Features(spec)


def _image(path: Any) -> dict[str, Any] | None:
    """Return an image file as ``datasets.Image`` stores it (bytes and name), or None when it is
    missing or not an image (nothing a reader would fail on later)."""
    if not path:
        return None
    from PIL import Image, UnidentifiedImageError

    target = Path(os.fspath(path))
    try:
        with Image.open(target) as picture:
            picture.verify()
        data = target.read_bytes()
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError):
        return None
    return {"bytes": data, "path": target.name}


def _rows(
    rows: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
    columns: list[str],
    embed_images: bool,
) -> Iterator[dict[str, Any]]:
    kinds = [column_type(name) for name in columns]
    for row, trace in rows:
        record = {
            name: _parquet_value(row.get(name), kind)
            for name, kind in zip(columns, kinds, strict=True)
        }
        record[TRACE_COLUMN] = json.dumps(trace, ensure_ascii=False, default=str)
        if embed_images:
            for source, target in IMAGE_COLUMNS.items():
                record[target] = _image(row.get(source))
        yield record


def write_hf(
    rows: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
    path: str | os.PathLike[str],
    columns: list[str],
    *,
    embed_images: bool = False,
) -> int:
    """Write (export row, trace) pairs as a ``datasets`` folder at ``path``; return the rows
    written.  An earlier dataset folder there is replaced only once the new one is complete;
    anything else there is left alone (:class:`FileExistsError`)."""
    datasets = _datasets()
    target = Path(path)
    if target.exists() and not (target / "state.json").is_file():
        raise FileExistsError(
            f"{target} exists and is not a dataset folder this export wrote: give another -o "
            "(an earlier export's folder is replaced)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    iterator = iter(rows)

    def generate() -> Iterator[dict[str, Any]]:
        yield from _rows(iterator, columns, embed_images)

    try:
        dataset = datasets.Dataset.from_generator(
            generate,
            features=features(columns, embed_images=embed_images),
            cache_dir=str(staging / "cache"),
            # A fingerprint of its own: the generator reads a database, it is not hashed.
            fingerprint=uuid.uuid4().hex,
            writer_batch_size=IMAGE_BATCH if embed_images else BATCH,
        )
        folder = staging / "dataset"
        dataset.save_to_disk(str(folder))
        count = len(dataset)
        del dataset
        if target.exists():
            shutil.rmtree(target)
        os.replace(folder, target)
        return count
    finally:
        shutil.rmtree(staging, ignore_errors=True)
