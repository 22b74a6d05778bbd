"""Reading a dataset manifest as a stream of items to assess, one bad row at a time.

A job may cover tens of thousands of images, so the manifest is never loaded whole: rows are
parsed, checked and yielded one by one. A bad row (missing image, unreadable file, MOS that is
not a number...) becomes a :class:`ManifestError` in the stream instead of an exception, so one
typo does not sink a 10,000-image job; only a file that cannot be a manifest at all (wrong
extension, unreadable, no ``image`` column) raises :class:`ManifestFormatError`, and it does so
when :func:`read_manifest` is called, before the first item, so a job can refuse it up front.

The one thing kept per row is the set of ids already seen (duplicate detection needs it): a few
hundred bytes per row, nothing of the rows themselves.  Only good rows claim an id: a row that
turns out bad never makes a later, valid row with the same id a "duplicate".  A bad row is
stored under :func:`bad_row_key`, a key in a form no row's id may take, so the keys of bad and
good rows can never collide.  A bad row that gave an id of its own (an ``id`` cell) keeps it,
so the user finds the failure under the id they wrote, when no other row has that id: such rows
are held back (up to :data:`MAX_HELD_IDS`) and come out keyed by their id at the end, or keyed
by their line as soon as a good row claims the id.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

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
COLUMN_ALIASES = {"img_path": "image", "image_path": "image", "question": "query",
                  "candidates": "options", "choices": "options", "correct_ans": "answer",
                  "correct_answer": "answer", "type": "question_type"}
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
    it, else :func:`bad_row_key`.  ``given``: that id, while it may still be the key."""

    line: int
    item_id: str | None
    message: str
    key: str = ""
    given: str | None = None

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", bad_row_key(self.line))


ManifestEntry = ManifestItem | ManifestError
#: A raw row from a reader: its line and either its cells or why it could not be parsed.
_RawRow = tuple[int, Mapping[str, Any] | str]


class _BadRow(Exception):
    """Internal: the current row is bad; turned into a ManifestError by the reader."""


def read_manifest(path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None,
                  check_images: bool = True,
                  mos_range: tuple[float, float] | None = None,
                  image_dir: str | os.PathLike[str] | None = None,
                  limit: int | None = None,
                  access: AccessPolicy | None = None,
                  subset: RowChoice | None = None) -> Iterator[ManifestEntry]:
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
    else:
        _check_readable(source)
        if kind == "csv":
            _csv_header(source)
            rows = _csv_rows(source)
        elif kind == "json":
            rows = _json_rows(source)
        else:
            rows = _jsonl_rows(source)
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
    return _entries(rows, base=base, paths=Root.of(base, confine), check_images=check_images,
                    mos_range=mos_range, access=access)


def read_records(records: Iterable[_RawRow], base: str | os.PathLike[str], *,
                 root: str | os.PathLike[str] | None = None, check_images: bool = True,
                 mos_range: tuple[float, float] | None = None,
                 range_source: str = "--mos-range",
                 limit: int | None = None,
                 access: AccessPolicy | None = None,
                 subset: RowChoice | None = None) -> Iterator[ManifestEntry]:
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
    return _entries(rows, base=text if is_url(text) else Path(base), paths=Root.of(base, root),
                    check_images=check_images, mos_range=mos_range, range_source=range_source,
                    access=access)


def _check_mos_range(mos_range: tuple[float, float]) -> None:
    low, high = mos_range
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ManifestFormatError(
            f"MOS range {low:g} {high:g} is not a range: give two finite numbers, LOW < HIGH")


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
        "files: --dataset NAME --root DIR)")


def _check_readable(source: Path) -> None:
    try:
        with source.open("rb") as handle:
            handle.read(1)
    except FileNotFoundError as exc:
        raise ManifestFormatError(f"manifest {source} not found") from exc
    except OSError as exc:
        raise ManifestFormatError(f"manifest {source} cannot be read: {exc}") from exc


def _csv_header(source: Path) -> list[str]:
    with source.open("rb") as handle:
        try:
            header = next(csv.reader(text_lines(handle)), None)
        except csv.Error as exc:
            raise ManifestFormatError(f"manifest {source}: unreadable header: {exc}") from exc
    if header and (fault := not_utf8(header)):
        raise ManifestFormatError(f"manifest {source}: the header (line 1) {fault}")
    if not header:
        raise ManifestFormatError(f"manifest {source} is empty: expected a header row "
                                  "naming at least an 'image' column")
    names = [name.strip() for name in header]
    known = [name for name in canonical_keys(names) if name in KNOWN_COLUMNS]
    if "image" not in known:
        raise ManifestFormatError(
            f"manifest {source}: the header ({', '.join(names)}) has no 'image' column")
    repeated = sorted({name for name in names if names.count(name) > 1}
                      | {name for name in known if known.count(name) > 1})
    if repeated:
        raise ManifestFormatError(
            f"manifest {source}: column(s) {', '.join(repeated)} appear more than once")
    return names


# -- raw rows: (line, mapping of column -> value) -------------------------------------------------


def _csv_rows(source: Path) -> Iterator[_RawRow]:
    with source.open("rb") as handle:
        reader = csv.reader(text_lines(handle))
        keys = canonical_keys([name.strip() for name in next(reader)])
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


def _jsonl_rows(source: Path) -> Iterator[_RawRow]:
    with source.open("rb") as handle:
        for line, raw in enumerate(bounded_lines(handle), start=1):
            if raw is None:
                yield line, f"line {line} is longer than {MAX_JSON_LINE} bytes"
                continue
            if line == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
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
        raise ManifestFormatError(f"manifest {source}: expected a JSON list of objects (one per "
                                  f"item), found a {type(document).__name__}")
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
        return sorted(entry.name for entry in entries
                      if Path(entry.name).suffix.lower() in IMAGE_EXTENSIONS
                      and entry.is_file())


def _folder_rows(folder: Path) -> Iterator[_RawRow]:
    try:
        names = _image_names(folder)
    except OSError as exc:
        raise ManifestFormatError(f"folder {folder} cannot be listed: {exc}") from exc
    for index, name in enumerate(names, start=1):
        yield index, {"image": name}


# -- checking a row -------------------------------------------------------------------------------


def _entries(rows: Iterator[_RawRow], *, base: Path | str, paths: Root, check_images: bool,
             mos_range: tuple[float, float] | None, access: AccessPolicy,
             range_source: str = "--mos-range") -> Iterator[ManifestEntry]:
    seen: dict[str, int] = {}
    held: dict[str, ManifestError] = {}  # bad rows that may keep their own id, by that id
    scope = Reading(access)
    for line, row in _prefetched(rows, base, check_images, scope):
        if isinstance(row, str):
            yield ManifestError(line, None, row)
            continue
        with reading(scope):
            entry = _entry(line, row, base=base, paths=paths, check_images=check_images,
                           mos_range=mos_range, range_source=range_source, seen=seen)
        if isinstance(entry, ManifestError):
            if entry.given is not None and entry.given not in held \
                    and len(held) < MAX_HELD_IDS:
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


def _entry(line: int, row: Mapping[str, Any], *, base: Path | str, paths: Root,
           check_images: bool, mos_range: tuple[float, float] | None, range_source: str,
           seen: dict[str, int]) -> ManifestEntry:
    """One row checked: its item, or its error (with the id it gave, when no earlier good row
    has it: the key it may keep)."""
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
            raise _BadRow(f"id {item_id!r} on line {line} is reserved for rows that "
                          "cannot be assessed: choose another id")
        # Cheap checks (paths, --root) before the duplicate check, so an escaping path is
        # reported as an escape; the costly image decode after it.
        item = _item(row, line, item_id, image_text, paths=paths, mos_range=mos_range,
                     range_source=range_source)
        if item_id in seen:
            duplicate, item_id = item_id, None
            raise _BadRow(f"duplicate id {duplicate!r} on line {line}: "
                          f"first used on line {seen[duplicate]}")
        if check_images:
            size, checksum = _check_image(item.image, image_text, "image", line)
            reference_checksum = None
            if item.reference is not None:
                reference_checksum = _check_reference(item.reference, row, size, line)
            item = replace(item, image_digest=checksum or item.image_digest,
                           reference_digest=reference_checksum or item.reference_digest)
    except _BadRow as bad:
        free = given is not None and given == item_id and given not in seen \
            and not _BAD_ROW_KEY.fullmatch(given)
        return ManifestError(line, item_id, str(bad), given=given if free else None)
    seen[item.item_id] = line
    return item


#: Rows whose objects are asked about together (``_prefetched``).
PREFETCH_ROWS = 64


def _prefetched(rows: Iterator[_RawRow], base: Path | str, check_images: bool, scope: Reading
                ) -> Iterator[tuple[int, _RawRow]]:
    """``rows`` unchanged; the objects their cells name in a store (URLs, or names under a
    base URL) are asked about a chunk at a time in parallel first (downloaded when the images
    are checked), so each row's own check costs no round trip.  The next chunk is fetched
    while this one's rows are checked and stored: the store's latency and the client's own
    work per request overlap with ours instead of adding to it.  Only what ``scope``'s gate
    admits is asked for, in ``scope`` (its failures kept there for the rows' own checks)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from iqa_tools.images import prefetch

    remote_base = is_url(os.fspath(base))

    def fetch(chunk: list[tuple[int, _RawRow]]) -> None:
        with reading(scope):
            wanted = [location for location in _objects_named(chunk, base, remote_base)
                      if _admitted(scope, location)]
            if len(wanted) > 1:
                prefetch(wanted, read=check_images)

    def read() -> list[tuple[int, _RawRow]]:
        return list(islice(rows, PREFETCH_ROWS))

    current = read()
    if not current:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="iqa-lookahead") as ahead:
        pending: Future[None] | None = ahead.submit(fetch, current)
        while current:
            failure: BaseException | None = None
            try:
                following = read()
            except Exception as exc:  # raised where it was met: after this chunk's rows
                following, failure = [], exc
            if pending is not None:
                pending.result()
            pending = ahead.submit(fetch, following) if following else None
            yield from current
            if failure is not None:
                raise failure
            current = following


def _admitted(scope: Reading, location: str) -> bool:
    """Whether the gate lets ``location`` be asked for (the row's own check says why not)."""
    try:
        scope.admit(location)
    except Exception:
        return False
    return True


def _objects_named(chunk: list[tuple[int, _RawRow]], base: Path | str, remote_base: bool
                   ) -> list[str]:
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
            if is_url(text):
                wanted.append(text)
            elif remote_base:
                try:
                    wanted.append(join_under(os.fspath(base), text))
                except Exception:  # the row's own check says why
                    continue
    return wanted


def _item(row: Mapping[str, Any], line: int, item_id: str, image_text: str, *, paths: Root,
          mos_range: tuple[float, float] | None, range_source: str) -> ManifestItem:
    mos = _mos(row.get("mos"), line, mos_range, range_source)
    options = _options(row.get("options"), line)
    answer = _answer(row.get("answer"), line, options)
    query = _question(row, line)
    reference_text = _text(row.get("reference"), "reference", line)
    digests: dict[str, str | None] = {}
    image = _located(image_text, "image", line, paths, digests)
    reference = (_located(reference_text, "reference", line, paths, digests)
                 if reference_text is not None else None)
    extra = {key: value for key, value in row.items() if key not in KNOWN_COLUMNS}
    return ManifestItem(line=line, item_id=item_id, image=image, reference=reference,
                        query=query, mos=mos, answer=answer, extra=extra, options=options,
                        image_digest=digests.get(str(image)),
                        reference_digest=digests.get(str(reference)) if reference else None)


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
                raise _BadRow(f"options on line {line} start like a JSON list but are not "
                              f"one: {_shown(text)}") from None
        else:
            value = text.split("|")
    if not isinstance(value, list) or not all(
            isinstance(option, str | int | float) and not isinstance(option, bool)
            for option in value):
        raise _BadRow(f"options on line {line} must be a list of texts, not {_shown(value)}")
    options = tuple(str(option).strip() for option in value)
    if len(options) < 2 or len(options) > len(ANSWER_LETTERS) or not all(options):
        raise _BadRow(f"options on line {line}: give 2 to {len(ANSWER_LETTERS)} non-empty "
                      f"options, not {_shown(list(options))}")
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


def _mos(value: Any, line: int, mos_range: tuple[float, float] | None,
         range_source: str = "--mos-range") -> float | None:
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
        raise _BadRow(f"mos {shown} on line {line} is beyond any opinion scale "
                      f"(|mos| > {MAX_ABS_MOS:g})")
    if mos_range is not None and not mos_range[0] <= number <= mos_range[1]:
        raise _BadRow(f"mos {shown} on line {line} is outside the declared range "
                      f"{mos_range[0]:g} to {mos_range[1]:g} ({range_source})")
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
    allowed = ANSWER_ORDER[:len(options)] if options else ANSWER_ORDER
    if letter not in allowed:
        if options:
            raise _BadRow(f"answer {text!r} on line {line} is neither one of the options "
                          f"{_shown(list(options), 80)} nor a letter A-{allowed[-1]}")
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
        return location[len(base.rstrip("/")) + 1:]
    return location if is_url(location) else posixpath.normpath(location)


def _located(text: str, name: str, line: int, paths: Root,
             digests: dict[str, str | None] | None = None) -> Path | str:
    """The file a cell names, through :func:`.paths.locate` (the one place paths are
    resolved and confined); a path it refuses is this row's error."""
    try:
        return locate(text, paths, digests=digests)
    except PathRejected as rejected:
        joint = ": path " if rejected.escape else " "
        raise _BadRow(f"{name} {_shown(_masked(text), 200)} on line {line}{joint}{rejected}"
                      ) from None


def _masked(text: str) -> str:
    """A cell as messages quote it: a URL's user, password and query masked."""
    return display(text) if is_url(text) else text


def _check_image(path: Path | str, text: str, name: str, line: int
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
        raise _BadRow(f"{name} {text!r} on line {line} is {width}x{height} pixels; the IQA "
                      f"tools need at least {small.minimum}x{small.minimum}") from None
    except ImageTooLargeError as large:
        raise _BadRow(f"{name} on line {line}: {large}") from None
    except ImageLoadError as exc:
        raise _BadRow(f"{name} {text!r} on line {line} is not a readable image: {exc.reason}"
                      ) from None
    except Exception as exc:  # a decoder bug on an odd file: still only this row is bad
        reason = str(exc) or type(exc).__name__
        raise _BadRow(f"{name} {text!r} on line {line} is not a readable image: {reason}"
                      ) from None
    return size, checksum


def _check_reference(reference: Path | str, row: Mapping[str, Any], image_size: tuple[int, int],
                     line: int) -> str | None:
    """A reference must be readable and the image's size: FR tools compare pixel by pixel.
    Returns the ``sha256:`` of an HTTP(S) reference's bytes (see :func:`_check_image`)."""
    text = _masked(_text(row.get("reference"), "reference", line) or str(reference))
    reference_size, checksum = _check_image(reference, text, "reference", line)
    if reference_size != image_size:
        raise _BadRow(f"reference {text!r} on line {line} is "
                      f"{reference_size[0]}x{reference_size[1]} but the image is "
                      f"{image_size[0]}x{image_size[1]}; full-reference tools need the same "
                      "size")
    return checksum
