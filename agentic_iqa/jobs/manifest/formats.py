"""Read a manifest's file as raw rows: a CSV, a JSONL, a JSON list, or a folder of images.

A raw row is its line and its cells (known columns under their canonical names, see
:func:`canonical_keys`), or why that line cannot be parsed; its cells are checked by
:mod:`.rows`.  Only a file that cannot be a manifest at all (wrong extension, unreadable, no
``image`` column) raises :class:`ManifestFormatError`, before the first row.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ...datasets.bounded import (
    MAX_JSON_LINE,
    TooLarge,
    bounded_lines,
    load_json,
    not_utf8,
    read_json_file,
    text_lines,
)
from ..subset import RawRow
from .dataset_files import dataset_hint

#: File extensions taken as images when a plain folder is given as the manifest.
IMAGE_EXTENSIONS = frozenset({".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp"})
CSV_EXTENSIONS = frozenset({".csv"})
JSONL_EXTENSIONS = frozenset({".jsonl", ".json-lines"})
#: A whole JSON document: a list of objects (Q-Bench's LLVisionQA files are such lists).
JSON_EXTENSIONS = frozenset({".json"})
#: Columns (CSV) or keys (JSON) with a meaning; any other one is kept in ``extra``.
KNOWN_COLUMNS = ("image", "reference", "query", "mos", "answer", "id", "options")
#: Other names for the known columns, as public datasets write them (Q-Bench: img_path,
#: question, candidates, correct_ans); used only where the known name itself is absent.
COLUMN_ALIASES = {
    "img_path": "image",
    "image_path": "image",
    "question": "query",
    "candidates": "options",
    "choices": "options",
    "correct_ans": "answer",
    "correct_answer": "answer",
    "type": "question_type",
}


class ManifestFormatError(ValueError):
    """The file as a whole cannot be read as a manifest (not one bad row: those are yielded)."""


def open_rows(source: Path) -> tuple[Iterator[RawRow], Path]:
    """Open the manifest ``source`` as its raw rows, and the folder its paths are relative to
    (the folder itself for a folder manifest, else the file's); a file that cannot be a
    manifest raises :class:`ManifestFormatError` now, before the first row."""
    kind = _kind(source)
    if kind == "folder":
        return _folder_rows(source), source
    if kind == "json":
        _check_readable(source)
        return _json_rows(source), source.parent
    handle = _opened(source)  # opened once and read in one pass: a pipe streams like a file
    try:
        rows = _csv_rows(source, handle) if kind == "csv" else _jsonl_rows(handle)
    except BaseException:
        handle.close()
        raise
    return rows, source.parent


def count_rows(path: str | os.PathLike[str]) -> int:
    """How many rows (data lines, objects or images) the manifest has, for a progress bar.

    Counts without checking anything, so it may include rows that turn out bad.
    """
    source = Path(path)
    kind = _kind(source)
    if kind == "folder":
        return sum(1 for _ in _image_names(source))
    _check_readable(source)
    if kind == "jsonl":
        with source.open("rb") as handle:
            return sum(1 for raw in bounded_lines(handle) if raw is None or raw.strip())
    if kind == "json":
        return sum(1 for _ in _json_rows(source))
    _csv_header(source)
    with source.open("rb") as handle:
        reader = csv.reader(text_lines(handle))
        next(reader, None)
        count = 0
        while True:  # a row the csv module cannot split still counts: it is a bad row
            try:
                count += bool(next(reader))
            except StopIteration:
                return count
            except csv.Error:
                count += 1


# -- file kinds -----------------------------------------------------------------------------------


def _kind(source: Path) -> str:
    if source.is_dir():
        return "folder"
    suffix = source.suffix.lower()
    if suffix in CSV_EXTENSIONS:
        return "csv"
    if suffix in JSONL_EXTENSIONS:
        return "jsonl"
    if suffix in JSON_EXTENSIONS:
        return "json"
    if not source.exists():
        raise ManifestFormatError(f"manifest {source} not found")
    raise ManifestFormatError(
        f"manifest {source}: unsupported extension {source.suffix!r} (use .csv, .json (a list "
        "of objects), .jsonl or .json-lines, or a folder of images; a public dataset's own "
        "files: --dataset NAME --root DIR)"
    )


def _check_readable(source: Path) -> None:
    with _opened(source) as handle:
        handle.read(1)


def _opened(source: Path) -> BinaryIO:
    """The manifest open for reading, or why not as a :class:`ManifestFormatError`."""
    try:
        return source.open("rb")
    except FileNotFoundError as exc:
        raise ManifestFormatError(f"manifest {source} not found") from exc
    except OSError as exc:
        raise ManifestFormatError(f"manifest {source} cannot be read: {exc}") from exc


def _csv_header(source: Path) -> list[str]:
    with source.open("rb") as handle:
        return _header_of(source, csv.reader(text_lines(handle)))


def _header_of(source: Path, reader: Any) -> list[str]:
    """The header row ``reader`` starts with, checked: an ``image`` column, no repeats."""
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise ManifestFormatError(f"manifest {source}: unreadable header: {exc}") from exc
    except OSError as exc:
        raise ManifestFormatError(f"manifest {source} cannot be read: {exc}") from exc
    if header and (fault := not_utf8(header)):
        raise ManifestFormatError(f"manifest {source}: the header (line 1) {fault}")
    if not header:
        raise ManifestFormatError(
            f"manifest {source} is empty: expected a header row naming at least an 'image' column"
        )
    names = [name.strip() for name in header]
    known = [name for name in canonical_keys(names) if name in KNOWN_COLUMNS]
    if "image" not in known:
        raise ManifestFormatError(
            f"manifest {source}: the header ({', '.join(names)}) has no 'image' column"
            + dataset_hint(names)
        )
    repeated = sorted(
        {name for name in names if names.count(name) > 1}
        | {name for name in known if known.count(name) > 1}
    )
    if repeated:
        raise ManifestFormatError(
            f"manifest {source}: column(s) {', '.join(repeated)} appear more than once"
        )
    return names


# -- raw rows: (line, mapping of column -> value) -------------------------------------------------


def _csv_rows(source: Path, handle: BinaryIO) -> Iterator[RawRow]:
    """The rows of a CSV manifest open in ``handle``: its header is read and checked now (a
    :class:`ManifestFormatError` before the first row), the rows as they are iterated."""
    reader = csv.reader(text_lines(handle))
    keys = canonical_keys(_header_of(source, reader))
    return _csv_records(handle, reader, keys)


def _csv_records(handle: BinaryIO, reader: Any, keys: list[str]) -> Iterator[RawRow]:
    with handle:
        end_of_previous = reader.line_num
        while True:
            try:
                record = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:  # the reader goes on at the next line
                line, end_of_previous = end_of_previous + 1, reader.line_num
                yield line, f"line {line} cannot be read as CSV: {exc}"
                continue
            # A quoted field may span lines: the row starts right after the previous one ended.
            line = end_of_previous + 1
            end_of_previous = reader.line_num
            if not record or (len(record) == 1 and not record[0].strip()):
                continue
            if fault := not_utf8(record):
                yield line, f"line {line} {fault}"
                continue
            if len(record) > len(keys):
                yield line, f"line {line} has {len(record)} fields but the header has {len(keys)}"
                continue
            yield line, dict(zip(keys, record, strict=False))


def _jsonl_rows(handle: BinaryIO) -> Iterator[RawRow]:
    with handle:
        for line, raw in enumerate(bounded_lines(handle), start=1):
            if raw is None:
                yield line, f"line {line} is longer than {MAX_JSON_LINE} bytes"
                continue
            if line == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            if not raw.strip():
                continue
            try:
                value = load_json(raw.decode("utf-8"))
            except UnicodeDecodeError:
                yield line, f"line {line} is not UTF-8 text"
                continue
            except json.JSONDecodeError as exc:
                yield line, f"line {line} is not valid JSON: {exc.msg} (column {exc.colno})"
                continue
            except ValueError as exc:  # a number past Python's digit limit, and the like
                yield line, f"line {line} cannot be read: {str(exc)[:120]}"
                continue
            if not isinstance(value, dict):
                yield line, f"line {line} is a JSON {type(value).__name__}, not an object"
                continue
            yield line, _keyed(value)


def _json_rows(source: Path) -> Iterator[RawRow]:
    """A JSON list of objects, read whole (such files are question sets: thousands of rows,
    not millions); record N is reported as line N."""
    try:
        document = read_json_file(source)
    except TooLarge as exc:
        raise ManifestFormatError(f"manifest {exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestFormatError(f"manifest {source} is not valid JSON: {exc}") from None
    if isinstance(document, dict):  # {"data": [...]} or the like: the one list inside
        lists = [value for value in document.values() if isinstance(value, list)]
        if len(lists) == 1:
            document = lists[0]
    if not isinstance(document, list):
        raise ManifestFormatError(
            f"manifest {source}: expected a JSON list of objects (one per "
            f"item), found a {type(document).__name__}"
        )
    for line, value in enumerate(document, start=1):
        if not isinstance(value, dict):
            yield line, f"record {line} is a JSON {type(value).__name__}, not an object"
            continue
        yield line, _keyed(value)


def canonical_keys(names: Sequence[str]) -> list[str]:
    """Column names as the manifest reads them: known ones lower-cased, an alias
    (:data:`COLUMN_ALIASES`) renamed when its column is not there itself, others as given."""
    lowered = [name.lower() for name in names]
    keys: list[str] = []
    for name, low in zip(names, lowered, strict=True):
        target = COLUMN_ALIASES.get(low)
        if low in KNOWN_COLUMNS:
            keys.append(low)
        elif target is not None and target not in lowered and target not in keys:
            keys.append(target)
        else:
            keys.append(name)
    return keys


def _keyed(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(zip(canonical_keys(list(value)), value.values(), strict=True))


def _image_names(folder: Path) -> list[str]:
    """Names only (not rows): sorting needs them all, and a name is far smaller than a row."""
    with os.scandir(folder) as entries:
        return sorted(
            entry.name
            for entry in entries
            if Path(entry.name).suffix.lower() in IMAGE_EXTENSIONS and entry.is_file()
        )


def _folder_rows(folder: Path) -> Iterator[RawRow]:
    try:
        names = _image_names(folder)
    except OSError as exc:
        raise ManifestFormatError(f"folder {folder} cannot be listed: {exc}") from exc
    for index, name in enumerate(names, start=1):
        yield index, {"image": name}
