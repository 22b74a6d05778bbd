"""Reading a dataset manifest as a stream of items to assess, one bad row at a time.

A job may cover tens of thousands of images, so the manifest is never loaded whole: rows are
parsed, checked and yielded one by one. A bad row (missing image, unreadable file, MOS that is
not a number...) becomes a :class:`ManifestError` in the stream instead of an exception, so one
typo does not sink a 10,000-image job; only a file that cannot be a manifest at all (wrong
extension, unreadable, no ``image`` column) raises :class:`ManifestFormatError`, and it does so
when :func:`read_manifest` is called, before the first item, so a job can refuse it up front.

The one thing kept per row is the set of ids already seen (duplicate detection needs it):
:class:`SeenIds`, 24 bytes a row past its first rows, nothing of the rows themselves.  Only
good rows claim an id: a row that turns out bad never makes a later, valid row with the same
id a "duplicate".  A bad row is stored under :func:`bad_row_key`, a key in a form no row's
id may take, so the keys of bad and good rows can never collide.  A bad row that gave an id of
its own (an ``id`` cell) keeps it, so the user finds the failure under the id they wrote, when
no other row has that id: such rows are held back (up to :data:`MAX_HELD_IDS`) and come out
keyed by their id at the end, or keyed by their line as soon as a good row claims the id.

Rows are read by a thread of their own and checked a chunk of what is ready at a time (their
images decoded by a pool of threads), so the database's work and the checks overlap, and a
source that pauses (a pipe, a slow store) hands over the rows it gave without waiting.

Every location a row names is read under one :class:`iqa_tools.access.Reading` (the job's
policy: ``--root``, ``--image-dir``, ``--allow-urls``, ``AGENTIC_IQA_ALLOWED_LOCATIONS``): the
lookahead that downloads a chunk's objects ahead, and each row's own check, pass the same gate
before any request, and what the lookahead found broken is not asked again.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import math
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, cast

from iqa_tools.access import AccessPolicy, Reading, reading
from iqa_tools.errors import ImageLoadError, ImageTooLargeError, ImageTooSmallError
from iqa_tools.images import check_min_size, digest_bytes, probe_data, read_bytes
from iqa_tools.storage import display, is_url, scheme

from ..datasets.bounded import (
    MAX_JSON_LINE,
    TooLarge,
    bounded_lines,
    load_json,
    not_utf8,
    read_json_file,
    text_lines,
)
from ..query import with_options
from .paths import PathRejected, Root, locate
from .subset import RowChoice

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
ANSWER_ORDER = "ABCDEFGH"
ANSWER_LETTERS = frozenset(ANSWER_ORDER)
#: The form of :func:`bad_row_key`; an id of this form is refused, so the two never meet.
_BAD_ROW_KEY = re.compile(r"<line \d+>")


def bad_row_key(line: int) -> str:
    """The item key of the bad row on ``line``: unique per line, and never a row's id."""
    return f"<line {line}>"


class ManifestFormatError(ValueError):
    """The file as a whole cannot be read as a manifest (not one bad row: those are yielded)."""


@dataclass(frozen=True)
class ManifestItem:
    """One row that passed every check: what to assess and what it will be compared with.

    ``image`` and ``reference`` are absolute with symlinks resolved, so the file that was
    checked (and confined to ``root``) is the file that will be opened.
    """

    line: int
    item_id: str
    #: A local file, or an object's URL (``s3://bucket/key``) when the image is in a store.
    image: Path | str
    reference: Path | str | None = None
    query: str | None = None
    mos: float | None = None
    answer: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The candidate answers, lettered A, B, ... in this order; already in ``query``.
    options: tuple[str, ...] = ()
    #: Store digests (ETag, version) of the image and reference objects when they are in an
    #: object store, as found at submit.
    image_digest: str | None = None
    reference_digest: str | None = None


@dataclass(frozen=True)
class ManifestError:
    """One row that cannot be assessed, with a message that names the line and the problem.

    ``key``: what the row is stored under: the id its ``id`` cell gave when no other row has
    it, else :func:`bad_row_key`.  ``given``: that id, while it may still be the key.
    ``query``, ``answer``, ``mos``: what the row asked and its truth, where those cells could
    be read (:func:`_salvaged`), so that a question the job could not ask counts in its
    accuracy as unanswered instead of leaving the denominator."""

    line: int
    item_id: str | None
    message: str
    key: str = ""
    given: str | None = None
    query: str | None = None
    answer: str | None = None
    mos: float | None = None

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", bad_row_key(self.line))


ManifestEntry = ManifestItem | ManifestError
#: A raw row from a reader: its line and either its cells or why it could not be parsed.
_RawRow = tuple[int, Mapping[str, Any] | str]


class _BadRow(Exception):
    """Internal: the current row is bad; turned into a ManifestError by the reader."""


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
    the rows taken (:mod:`.subset`: offset, limit, a seeded sample), chosen before any check.

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
    kind = _kind(source)
    base: Path | str
    if kind == "folder":
        rows: Iterator[_RawRow] = _folder_rows(source)
        base = source
    elif kind == "json":
        _check_readable(source)
        rows = _json_rows(source)
        base = source.parent
    else:  # opened once and read in one pass: a named pipe streams as well as a file
        handle = _opened(source)
        try:
            rows = _csv_rows(source, handle) if kind == "csv" else _jsonl_rows(handle)
        except BaseException:
            handle.close()
            raise
        base = source.parent
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
    return _entries(
        rows,
        base=base,
        paths=Root.of(base, confine),
        check_images=check_images,
        mos_range=mos_range,
        access=access,
    )


def read_records(
    records: Iterable[_RawRow],
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
    confined to it (:mod:`.paths`).  ``range_source`` names where ``mos_range`` came from, for
    the message of a MOS outside it (a dataset's own scale is no option the user gave)."""
    if mos_range is not None:
        _check_mos_range(mos_range)
    rows: Iterator[_RawRow] = iter(records)
    if limit is not None:
        rows = islice(rows, limit)
    if subset is not None:
        rows = subset.apply(rows)
    text = os.fspath(base)  # a URL (an object store's prefix) stays text: Path would mangle it
    if access is None:
        access = AccessPolicy.for_source(root=root, image_dir=base)
    return _entries(
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


def _csv_rows(source: Path, handle: BinaryIO) -> Iterator[_RawRow]:
    """The rows of a CSV manifest open in ``handle``: its header is read and checked now (a
    :class:`ManifestFormatError` before the first row), the rows as they are iterated."""
    reader = csv.reader(text_lines(handle))
    keys = canonical_keys(_header_of(source, reader))
    return _csv_records(handle, reader, keys)


def _csv_records(handle: BinaryIO, reader: Any, keys: list[str]) -> Iterator[_RawRow]:
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


def _jsonl_rows(handle: BinaryIO) -> Iterator[_RawRow]:
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


def _json_rows(source: Path) -> Iterator[_RawRow]:
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


def _folder_rows(folder: Path) -> Iterator[_RawRow]:
    try:
        names = _image_names(folder)
    except OSError as exc:
        raise ManifestFormatError(f"folder {folder} cannot be listed: {exc}") from exc
    for index, name in enumerate(names, start=1):
        yield index, {"image": name}


# -- checking a row -------------------------------------------------------------------------------


def _entries(
    rows: Iterator[_RawRow],
    *,
    base: Path | str,
    paths: Root,
    check_images: bool,
    mos_range: tuple[float, float] | None,
    access: AccessPolicy,
    range_source: str = "--mos-range",
) -> Iterator[ManifestEntry]:
    seen = SeenIds()
    held: dict[str, ManifestError] = {}  # bad rows that may keep their own id, by that id
    scope = Reading(access)
    # Rows are read by a thread of their own and taken a chunk of what is ready at a time, so
    # a slow source is never waited for to fill one; a chunk's images are decoded by a pool
    # of threads (decoding releases the GIL).
    with _Ahead(rows, PREFETCH_ROWS) as ahead, _ImageChecks(scope, enabled=check_images) as checks:
        for chunk in _prefetched(ahead, base, check_images, scope):
            with reading(scope):
                prepared = [
                    _prepared(
                        line,
                        row,
                        base=base,
                        paths=paths,
                        mos_range=mos_range,
                        range_source=range_source,
                    )
                    for line, row in chunk
                ]
            for entry in map(_settled, prepared, checks.verdicts(prepared), [seen] * len(prepared)):
                if isinstance(entry, ManifestError):
                    if (
                        entry.given is not None
                        and entry.given not in held
                        and len(held) < MAX_HELD_IDS
                    ):
                        held[entry.given] = entry
                        continue
                    yield replace(entry, given=None)
                    continue
                if entry.item_id in held:  # a good row takes the id: the bad row keeps its line
                    yield replace(held.pop(entry.item_id), given=None)
                yield entry
    for entry in held.values():
        yield replace(entry, key=entry.given or entry.key, given=None)


#: Bad rows held back at most, waiting to learn whether their own id is free (a few hundred
#: bytes each); past it, a bad row is keyed by its line at once.
MAX_HELD_IDS = 10_000


def check_threads() -> int:
    """Threads decoding images at submit: one per core, at most 8 (the rest of a row's check
    is this thread's; more would only queue for the GIL)."""
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class _Prepared:
    """A row after its cheap checks (cells, paths, ``--root``), before its image is opened
    and its id claimed: its item, or why it is bad (``error``), with the id it gave and the
    id it would take (None when even its ``id`` cell could not be read)."""

    line: int
    row: Mapping[str, Any] | None
    given: str | None = None
    item_id: str | None = None
    image_text: str = ""
    item: ManifestItem | None = None
    error: str | None = None
    #: The reference's cell as a message quotes it (a URL's credentials masked).
    reference_text: str = ""


def _prepared(
    line: int,
    row: Mapping[str, Any] | str,
    *,
    base: Path | str,
    paths: Root,
    mos_range: tuple[float, float] | None,
    range_source: str,
) -> _Prepared:
    if isinstance(row, str):
        return _Prepared(line, None, error=row)
    item_id: str | None = None
    given: str | None = None
    try:
        given = item_id = _text(row.get("id"), "id", line)
        image_text = _text(row.get("image"), "image", line)
        if image_text is None:
            raise _BadRow(f"line {line} has no image")
        if item_id is None:
            item_id = _derived_id(image_text, base, _question(row, line))
        if _BAD_ROW_KEY.fullmatch(item_id):
            raise _BadRow(
                f"id {item_id!r} on line {line} is reserved for rows that "
                "cannot be assessed: choose another id"
            )
        # Cheap checks (paths, --root) before the duplicate check, so an escaping path is
        # reported as an escape; the costly image decode after it.
        item = _item(
            row,
            line,
            item_id,
            image_text,
            paths=paths,
            mos_range=mos_range,
            range_source=range_source,
        )
    except _BadRow as bad:
        return _Prepared(line, row, given, item_id, error=str(bad))
    reference_text = (
        _masked(_text(row.get("reference"), "reference", line) or str(item.reference))
        if item.reference is not None
        else ""
    )
    return _Prepared(line, row, given, item_id, image_text, item, reference_text=reference_text)


def _settled(
    prepared: _Prepared, verdict: ManifestItem | str | None, seen: SeenIds
) -> ManifestEntry:
    """The row's entry, in file order: its cheap checks' fault, else a duplicate id, else its
    image's ``verdict`` (the item with its digests, or why it cannot be read; None: not
    checked); a good row claims its id.  A bad row keeps the id it gave when no earlier good
    row has it (the key it may keep)."""
    line, given, item_id, error = prepared.line, prepared.given, prepared.item_id, prepared.error
    item = prepared.item
    if prepared.row is None:
        return ManifestError(line, None, error or "")
    first = seen.line_of(item_id) if error is None and item_id is not None else None
    if first is not None:
        error = f"duplicate id {item_id!r} on line {line}: first used on line {first}"
        item_id = None
    elif error is None and isinstance(verdict, str):
        error = verdict
    elif error is None and isinstance(verdict, ManifestItem):
        item = verdict
    if error is not None or item is None:
        free = (
            given is not None
            and given == item_id
            and seen.line_of(given) is None
            and not _BAD_ROW_KEY.fullmatch(given)
        )
        query, answer, mos = _salvaged(prepared)
        return ManifestError(
            line,
            item_id,
            error or "",
            given=given if free else None,
            query=query,
            answer=answer,
            mos=mos,
        )
    seen.claim(item.item_id, line)
    return item


def _salvaged(prepared: _Prepared) -> tuple[str | None, str | None, float | None]:
    """A bad row's query, answer and MOS: its item's when its cells were all read (its image
    was not); else its query and answer, each read on its own, None where that cell is itself
    at fault (not its MOS: that may be the fault, and a MOS of an unscored item counts
    nowhere)."""
    if prepared.item is not None:
        return prepared.item.query, prepared.item.answer, prepared.item.mos
    row, line = prepared.row, prepared.line
    if row is None:
        return None, None, None

    def read(parse: Callable[[], Any]) -> Any:
        try:
            return parse()
        except _BadRow:
            return None

    options = read(lambda: _options(row.get("options"), line)) or ()
    query = read(lambda: _question(row, line)) or read(
        lambda: _text(row.get("query"), "query", line)
    )
    return query, read(lambda: _answer(row.get("answer"), line, options)), None


class SeenIds:
    """The ids good rows have claimed so far, and the line of each: exact (a dict) for the
    last :data:`RECENT` ids, then kept as a 128-bit hash and a line, sorted in arrays: 24
    bytes an id instead of a dict entry's 150 or so, so a million-row manifest is read in
    flat memory (two ids that share a 128-bit BLAKE2 hash never come in practice)."""

    #: Ids kept exactly before they are folded into the arrays.
    RECENT = 1 << 16

    def __init__(self) -> None:
        self._recent: dict[str, int] = {}
        self._low: Any = None  # sorted first halves of the hashes (numpy uint64)
        self._high: Any = None  # their second halves, in the same order
        self._lines: Any = None

    @staticmethod
    def _hash(key: str) -> tuple[int, int]:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")

    def line_of(self, key: str) -> int | None:
        """The line that claimed ``key``; None when no row has."""
        line = self._recent.get(key)
        if line is not None or self._low is None:
            return line
        import numpy as np

        low, high = self._hash(key)
        index = int(np.searchsorted(self._low, np.uint64(low)))
        while index < len(self._low) and int(self._low[index]) == low:
            if int(self._high[index]) == high:
                return int(self._lines[index])
            index += 1
        return None

    def claim(self, key: str, line: int) -> None:
        self._recent[key] = line
        if len(self._recent) >= self.RECENT:
            self._fold()

    def _fold(self) -> None:
        """The exact ids into the sorted arrays (one sort of them all, every RECENT ids)."""
        import numpy as np

        hashes = [self._hash(key) for key in self._recent]
        low = np.fromiter((pair[0] for pair in hashes), np.uint64, len(hashes))
        high = np.fromiter((pair[1] for pair in hashes), np.uint64, len(hashes))
        lines = np.fromiter(self._recent.values(), np.int64, len(hashes))
        if self._low is not None:
            low = np.concatenate([self._low, low])
            high = np.concatenate([self._high, high])
            lines = np.concatenate([self._lines, lines])
        order = np.argsort(low, kind="stable")
        self._low, self._high, self._lines = low[order], high[order], lines[order]
        self._recent = {}


#: Images checked in threads before the next ones go to a pool of processes (starting it
#: costs about a second, so a small manifest never does); a local file's check is then
#: decoded in parallel whole, not only where the decoder lets go of the GIL.
PROCESS_CHECKS_AFTER = 256


class _ImageChecks:
    """The image checks of a manifest's rows under the reading ``scope`` (the job's gate):
    local files in :func:`check_threads` processes once :data:`PROCESS_CHECKS_AFTER` rows
    were checked, objects in a store (and everything before) in as many threads."""

    def __init__(self, scope: Reading, *, enabled: bool) -> None:
        self._scope = scope
        self._enabled = enabled
        self._threads: Any = None
        self._processes: Any = None
        self._checked = 0

    def __enter__(self) -> _ImageChecks:
        return self

    def __exit__(self, *_exc: object) -> None:
        for pool in (self._threads, self._processes):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def verdicts(self, chunk: list[_Prepared]) -> list[ManifestItem | str | None]:
        """Per row: None (not checked: checks off, or already bad), the item with its
        digests, or why its image (or reference) cannot be read."""
        if not self._enabled:
            return [None] * len(chunk)
        wanted = [prepared for prepared in chunk if prepared.item is not None]
        found: dict[int, ManifestItem | str] = {}
        pending = self._in_processes(wanted) if self._checked >= PROCESS_CHECKS_AFTER else []
        sent = {id(prepared) for share, _future in pending for prepared in share}
        here = [prepared for prepared in wanted if id(prepared) not in sent]
        for prepared, verdict in zip(here, self._in_threads(here), strict=True):
            found[id(prepared)] = verdict
        for share, future in pending:
            try:
                results = future.result()
            except Exception:  # the pool broke (a process killed): check them here instead
                self._processes, results = None, None
            if results is None:
                for prepared in share:
                    found[id(prepared)] = self._verdict(prepared)
                continue
            for prepared, (why, image_digest, reference_digest) in zip(share, results, strict=True):
                item = prepared.item
                assert item is not None
                found[id(prepared)] = (
                    why
                    if why is not None
                    else replace(
                        item,
                        image_digest=image_digest or item.image_digest,
                        reference_digest=reference_digest or item.reference_digest,
                    )
                )
        self._checked += len(wanted)
        return [found.get(id(prepared)) for prepared in chunk]

    def _in_threads(self, wanted: list[_Prepared]) -> list[ManifestItem | str]:
        if len(wanted) <= 1:
            return [self._verdict(prepared) for prepared in wanted]
        if self._threads is None:
            from concurrent.futures import ThreadPoolExecutor

            self._threads = ThreadPoolExecutor(
                max_workers=check_threads(), thread_name_prefix="iqa-image-check"
            )
        return list(self._threads.map(self._verdict, wanted))

    def _in_processes(self, wanted: list[_Prepared]) -> list[tuple[list[_Prepared], Any]]:
        """The local files among ``wanted`` sent to the processes, a share each: (share,
        future of its results); none where processes cannot be forked (they are then
        checked in threads)."""
        import multiprocessing

        local = [prepared for prepared in wanted if _on_disk(prepared)]
        if not local or "fork" not in multiprocessing.get_all_start_methods():
            return []
        if self._processes is None:
            from concurrent.futures import ProcessPoolExecutor

            # fork, not spawn: spawn imports the caller's __main__ again in every process
            # (a script that submits at its top level would submit in each).  The children
            # only read files and decode them, so the threads of this process do not matter.
            self._processes = ProcessPoolExecutor(
                max_workers=check_threads(),
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_checks,
                initargs=(self._scope.policy,),
            )
        workers = check_threads()
        shares = [local[index::workers] for index in range(workers) if local[index::workers]]
        return [
            (
                share,
                self._processes.submit(
                    _checked_files,
                    [  # each with an item: _on_disk chose them
                        (
                            str(cast(ManifestItem, prepared.item).image),
                            prepared.image_text,
                            _text_of(cast(ManifestItem, prepared.item).reference),
                            prepared.reference_text,
                            prepared.line,
                        )
                        for prepared in share
                    ],
                ),
            )
            for share in shares
        ]

    def _verdict(self, prepared: _Prepared) -> ManifestItem | str:
        item = prepared.item
        assert item is not None
        with reading(self._scope):
            try:
                size, checksum = _check_image(
                    item.image, prepared.image_text, "image", prepared.line
                )
                reference_checksum = None
                if item.reference is not None:
                    reference_checksum = _check_reference(
                        item.reference, prepared.reference_text, size, prepared.line
                    )
            except _BadRow as bad:
                return str(bad)
        return replace(
            item,
            image_digest=checksum or item.image_digest,
            reference_digest=reference_checksum or item.reference_digest,
        )


def _on_disk(prepared: _Prepared) -> bool:
    """Whether a row's image and reference are local files (an object is checked here, where
    the lookahead's downloads and failures are)."""
    item = prepared.item
    return (
        item is not None
        and isinstance(item.image, Path)
        and (item.reference is None or isinstance(item.reference, Path))
    )


def _text_of(location: Path | str | None) -> str | None:
    return None if location is None else str(location)


#: The job's policy in a checking process (:func:`_start_checks`).
_CHECKS_POLICY: AccessPolicy | None = None


def _start_checks(policy: AccessPolicy) -> None:
    """A checking process starts: every file it opens passes the job's gate."""
    global _CHECKS_POLICY
    _CHECKS_POLICY = policy


def _checked_files(
    rows: list[tuple[str, str, str | None, str, int]],
) -> list[tuple[str | None, str | None, str | None]]:
    """In a checking process: each local (image, its cell, reference, its cell, line) decoded
    and measured as :func:`_check_image` does; (why it is bad, or None, and the digests)."""
    results: list[tuple[str | None, str | None, str | None]] = []
    with reading(Reading(_CHECKS_POLICY or AccessPolicy.ambient())):
        for image, image_text, reference, reference_text, line in rows:
            try:
                size, checksum = _check_image(Path(image), image_text, "image", line)
                reference_checksum = None
                if reference is not None:
                    reference_checksum = _check_reference(
                        Path(reference), reference_text, size, line
                    )
            except _BadRow as bad:
                results.append((str(bad), None, None))
                continue
            results.append((None, checksum, reference_checksum))
    return results


class _Ahead:
    """``rows`` read by a thread of their own, taken a list of what is ready at a time: a
    source that pauses (a pipe, a generator over a slow store) is never waited for to fill a
    list, and a fast one gives full lists.  An error of the source is raised after the rows
    before it were taken."""

    #: How long a blocking take waits for more rows after its first, to fill its list.
    LINGER_SECONDS = 0.05

    def __init__(self, rows: Iterator[_RawRow], size: int) -> None:
        import queue
        import threading

        self._size = size
        # A SimpleQueue (C, a fraction of a Queue's cost per row) held to 4 lists' worth.
        self._ready: queue.SimpleQueue[tuple[Any, BaseException | None, bool]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self.ended = False
        self._thread = threading.Thread(
            target=self._read, args=(rows,), name="iqa-manifest-reader", daemon=True
        )
        self._thread.start()

    def __enter__(self) -> _Ahead:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()

    def _put(self, entry: tuple[Any, BaseException | None, bool]) -> bool:
        while self._ready.qsize() >= 4 * self._size:
            if self._stop.wait(0.001):
                return False
        if self._stop.is_set():
            return False
        self._ready.put(entry)
        return True

    def _read(self, rows: Iterator[_RawRow]) -> None:
        try:
            for row in rows:
                if not self._put((row, None, False)):
                    return
        except BaseException as exc:  # handed to the taker, raised after the rows before it
            self._put((None, exc, True))
            return
        finally:
            close = getattr(rows, "close", None)
            if self._stop.is_set() and close is not None:
                close()
        self._put((None, None, True))

    def take(self, *, block: bool) -> list[_RawRow]:
        """Up to ``size`` rows: with ``block``, at least one (none once the rows ended), and
        those that follow within :data:`LINGER_SECONDS`; else only those ready now."""
        import queue
        import time

        if self._failure is not None:
            raised, self._failure = self._failure, None
            raise raised
        taken: list[_RawRow] = []
        deadline = 0.0
        while not self.ended and len(taken) < self._size:
            try:
                if block and not taken:
                    row, failure, ended = self._ready.get()
                    deadline = time.monotonic() + self.LINGER_SECONDS
                elif block:
                    row, failure, ended = self._ready.get(
                        timeout=max(0.0, deadline - time.monotonic())
                    )
                else:
                    row, failure, ended = self._ready.get_nowait()
            except queue.Empty:
                break
            if ended:
                self.ended = True
                if failure is not None and not taken:
                    raise failure
                self._failure = failure
                break
            taken.append(row)
        return taken


#: Rows taken, checked and asked about (their objects in a store) together, at most.
PREFETCH_ROWS = 64


def _prefetched(
    ahead: _Ahead, base: Path | str, check_images: bool, scope: Reading
) -> Iterator[list[_RawRow]]:
    """The rows ``ahead`` gives, a chunk at a time; the objects their cells name in a store
    (URLs, or names under a base URL) are asked about a chunk at a time in parallel first
    (downloaded when the images are checked), so each row's own check costs no round trip.
    The next chunk, when its rows are ready, is fetched while this one's rows are checked and
    stored: the store's latency and the client's own work per request overlap with ours
    instead of adding to it.  Only what ``scope``'s gate admits is asked for, in ``scope``
    (its failures kept there for the rows' own checks)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from iqa_tools.images import prefetch

    remote_base = is_url(os.fspath(base))

    def fetch(chunk: list[_RawRow]) -> None:
        with reading(scope):
            wanted = [
                location
                for location in _objects_named(chunk, base, remote_base)
                if _admitted(scope, location)
            ]
            if len(wanted) > 1:
                prefetch(wanted, read=check_images)

    current = ahead.take(block=True)
    if not current:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="iqa-lookahead") as pool:
        pending: Future[None] | None = pool.submit(fetch, current)
        while current:
            failure: BaseException | None = None
            try:
                following = ahead.take(block=False)
            except Exception as exc:  # raised where it was met: after this chunk's rows
                following, failure = [], exc
            if pending is not None:
                pending.result()
            pending = pool.submit(fetch, following) if following else None
            yield current
            if failure is not None:
                raise failure
            if not following:
                following = ahead.take(block=True)
                pending = pool.submit(fetch, following) if following else None
            current = following


def _admitted(scope: Reading, location: str) -> bool:
    """Whether the gate lets ``location`` be asked for (the row's own check says why not)."""
    try:
        scope.admit(location)
    except Exception:
        return False
    return True


def _objects_named(chunk: list[_RawRow], base: Path | str, remote_base: bool) -> list[str]:
    """The object URLs a chunk of rows names (URL cells, or names under a base URL)."""
    from iqa_tools.storage import join_under

    wanted: list[str] = []
    for _, row in chunk:
        if isinstance(row, str):
            continue
        for column in ("image", "reference"):
            text = row.get(column)
            if not isinstance(text, str) or not text:
                continue
            if "://" in text and is_url(text):  # a URL has one: most paths are over at once
                wanted.append(text)
            elif remote_base:
                try:
                    wanted.append(join_under(os.fspath(base), text))
                except Exception:  # the row's own check says why
                    continue
    return wanted


def _item(
    row: Mapping[str, Any],
    line: int,
    item_id: str,
    image_text: str,
    *,
    paths: Root,
    mos_range: tuple[float, float] | None,
    range_source: str,
) -> ManifestItem:
    mos = _mos(row.get("mos"), line, mos_range, range_source)
    options = _options(row.get("options"), line)
    answer = _answer(row.get("answer"), line, options)
    query = _question(row, line)
    reference_text = _text(row.get("reference"), "reference", line)
    digests: dict[str, str | None] = {}
    image = _located(image_text, "image", line, paths, digests)
    reference = (
        _located(reference_text, "reference", line, paths, digests)
        if reference_text is not None
        else None
    )
    extra = {key: value for key, value in row.items() if key not in KNOWN_COLUMNS}
    return ManifestItem(
        line=line,
        item_id=item_id,
        image=image,
        reference=reference,
        query=query,
        mos=mos,
        answer=answer,
        extra=extra,
        options=options,
        image_digest=digests.get(str(image)),
        reference_digest=digests.get(str(reference)) if reference else None,
    )


def _question(row: Mapping[str, Any], line: int) -> str | None:
    """The row's query with its options written in, lettered, as every backend will read it."""
    query = _text(row.get("query"), "query", line)
    options = _options(row.get("options"), line)
    if options and query is None:
        raise _BadRow(f"line {line} has options but no query to ask")
    return with_options(query, options) if query is not None else None


def _options(value: Any, line: int) -> tuple[str, ...]:
    """Candidate answers: a list (JSON), or a cell holding a JSON list or ``a | b | c``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise _BadRow(
                    f"options on line {line} start like a JSON list but are not one: {_shown(text)}"
                ) from None
        else:
            value = text.split("|")
    if not isinstance(value, list) or not all(
        isinstance(option, str | int | float) and not isinstance(option, bool) for option in value
    ):
        raise _BadRow(f"options on line {line} must be a list of texts, not {_shown(value)}")
    options = tuple(str(option).strip() for option in value)
    if len(options) < 2 or len(options) > len(ANSWER_LETTERS) or not all(options):
        raise _BadRow(
            f"options on line {line}: give 2 to {len(ANSWER_LETTERS)} non-empty "
            f"options, not {_shown(list(options))}"
        )
    if len({option.casefold() for option in options}) < len(options):
        raise _BadRow(f"options on line {line} repeat one another: {_shown(list(options))}")
    return options


def _text(value: Any, name: str, line: int) -> str | None:
    """A string cell, or None when empty or absent (so an empty cell means "not given")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _BadRow(f"{name} on line {line} must be text, not {type(value).__name__}")
    text = str(value).strip()
    if "\x00" in text:  # no file has such a name, and no database column stores one
        raise _BadRow(f"{name} {_shown(text, 80)} on line {line} contains a NUL byte")
    return text or None


#: Largest |MOS| taken as one: opinion scales run to 100 (or 10, or 5); beyond this a number
#: is a broken cell, not an opinion.
MAX_ABS_MOS = 1e6


def _shown(value: Any, limit: int = 40) -> str:
    """A cell as an error message quotes it: its repr, cut to ``limit`` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<a number of more than {limit} digits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mos(
    value: Any, line: int, mos_range: tuple[float, float] | None, range_source: str = "--mos-range"
) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    shown = _shown(value.strip() if isinstance(value, str) else value)
    if isinstance(value, bool):
        raise _BadRow(f"mos {shown} on line {line} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _BadRow(f"mos {shown} on line {line} is not a number") from None
    except OverflowError:  # an integer too large for a float (JSON has no limit on digits)
        raise _BadRow(f"mos {shown} on line {line} is not a finite number") from None
    if not math.isfinite(number):
        raise _BadRow(f"mos {shown} on line {line} is not a finite number")
    if abs(number) > MAX_ABS_MOS:
        raise _BadRow(
            f"mos {shown} on line {line} is beyond any opinion scale (|mos| > {MAX_ABS_MOS:g})"
        )
    if mos_range is not None and not mos_range[0] <= number <= mos_range[1]:
        raise _BadRow(
            f"mos {shown} on line {line} is outside the declared range "
            f"{mos_range[0]:g} to {mos_range[1]:g} ({range_source})"
        )
    return number


def _answer(value: Any, line: int, options: tuple[str, ...] = ()) -> str | None:
    """The true answer as a letter: given as one, or as the text of one of ``options``."""
    text = _text(value, "answer", line)
    if text is None:
        return None
    for letter, option in zip(ANSWER_ORDER, options, strict=False):
        if text.casefold() == option.casefold():
            return letter
    letter = text.upper().rstrip(".)")
    allowed = ANSWER_ORDER[: len(options)] if options else ANSWER_ORDER
    if letter not in allowed:
        if options:
            raise _BadRow(
                f"answer {text!r} on line {line} is neither one of the options "
                f"{_shown(list(options), 80)} nor a letter A-{allowed[-1]}"
            )
        raise _BadRow(f"answer {text!r} on line {line} is not a letter A-H")
    return letter


def _derived_id(image_text: str, base: Path | str, query: str | None = None) -> str:
    """The image path relative to the manifest folder, normalised so ./a.jpg and a.jpg agree;
    with the row's own question, ``path#<8 hex of its hash>``: one id per (image, question),
    the same on every read."""
    path = _derived_path(image_text, base)
    if query is None:
        return path
    return f"{path}#{hashlib.sha256(query.encode()).hexdigest()[:8]}"


def _derived_path(image_text: str, base: Path | str) -> str:
    if is_url(image_text) or is_url(os.fspath(base)):
        return _object_key(image_text, os.fspath(base))
    absolute = os.path.normpath(os.path.join(os.path.abspath(base), image_text))
    relative = os.path.relpath(absolute, os.path.abspath(base))
    chosen = absolute if relative.startswith(os.pardir) else relative
    return Path(chosen).as_posix()


def _object_key(image_text: str, base: str) -> str:
    """An object's id: its name under the base URL, or the whole URL when it lies elsewhere
    (never with a query string, which may sign the URL, nor a user or password)."""
    location = image_text.split("?", 1)[0]
    if is_url(location) and "@" in location.split("/", 3)[2]:
        location = display(location)
    if is_url(base) and location.startswith(base.rstrip("/") + "/"):
        return location[len(base.rstrip("/")) + 1 :]
    return location if is_url(location) else posixpath.normpath(location)


def _located(
    text: str, name: str, line: int, paths: Root, digests: dict[str, str | None] | None = None
) -> Path | str:
    """The file a cell names, through :func:`.paths.locate` (the one place paths are
    resolved and confined); a path it refuses is this row's error."""
    try:
        return locate(text, paths, digests=digests)
    except PathRejected as rejected:
        joint = ": path " if rejected.escape else " "
        raise _BadRow(
            f"{name} {_shown(_masked(text), 200)} on line {line}{joint}{rejected}"
        ) from None


def _masked(text: str) -> str:
    """A cell as messages quote it: a URL's user, password and query masked."""
    return display(text) if is_url(text) else text


def _check_image(
    path: Path | str, text: str, name: str, line: int
) -> tuple[tuple[int, int], str | None]:
    """Decode the whole file and check its size, as the tools will; returns (width, height)
    and, for an object read over HTTP(S), the ``sha256:`` of the bytes checked: the digest
    its items are read by later (a web server's ETag need not change with its bytes)."""
    text = _masked(text)
    checksum = None
    try:
        data = read_bytes(path)
        if scheme(str(path)) in ("http", "https"):
            checksum = "sha256:" + digest_bytes(data)
        size = probe_data(data, str(path))
        check_min_size(path, size)
    except ImageTooSmallError as small:
        width, height = small.size
        raise _BadRow(
            f"{name} {text!r} on line {line} is {width}x{height} pixels; the IQA "
            f"tools need at least {small.minimum}x{small.minimum}"
        ) from None
    except ImageTooLargeError as large:
        raise _BadRow(f"{name} on line {line}: {large}") from None
    except ImageLoadError as exc:
        raise _BadRow(
            f"{name} {text!r} on line {line} is not a readable image: {exc.reason}"
        ) from None
    except Exception as exc:  # a decoder bug on an odd file: still only this row is bad
        reason = str(exc) or type(exc).__name__
        raise _BadRow(f"{name} {text!r} on line {line} is not a readable image: {reason}") from None
    return size, checksum


def _check_reference(
    reference: Path | str, text: str, image_size: tuple[int, int], line: int
) -> str | None:
    """A reference must be readable and the image's size: FR tools compare pixel by pixel.
    ``text``: its cell, as messages quote it.  Returns the ``sha256:`` of an HTTP(S)
    reference's bytes (see :func:`_check_image`)."""
    reference_size, checksum = _check_image(reference, text, "reference", line)
    if reference_size != image_size:
        raise _BadRow(
            f"reference {text!r} on line {line} is "
            f"{reference_size[0]}x{reference_size[1]} but the image is "
            f"{image_size[0]}x{image_size[1]}; full-reference tools need the same "
            "size"
        )
    return checksum
