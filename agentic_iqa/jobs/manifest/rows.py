"""Check one manifest row: its cells, its paths and its image, as an item or a bad row.

A bad row (missing image, unreadable file, MOS that is not a number...) becomes a
:class:`ManifestError` instead of an exception, so one typo does not sink a job of thousands of
images.  A row is checked in two steps: :func:`prepare_row` reads its cells and confines its
paths (cheap, in file order), :func:`check_image` decodes its image (costly, in a pool, see
:mod:`.prefetch`), and :func:`to_entry` settles it as an item or a bad row.

The one thing kept per row is the set of ids already seen (duplicate detection needs it):
:class:`SeenIds`, a few bytes a row past its first rows, nothing of the rows themselves.  Only
good rows claim an id: a row that turns out bad never makes a later, valid row with the same
id a "duplicate".  A bad row is stored under :func:`bad_row_key`, a key in a form no row's
id may take, so the keys of bad and good rows can never collide.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iqa_tools.errors import ImageLoadError, ImageTooLargeError, ImageTooSmallError
from iqa_tools.images import check_min_size, digest_bytes, probe_data, read_bytes
from iqa_tools.storage import display, is_url, scheme
from iqa_tools.storage.locations import local_path

from ...query import MAX_OPTION_CHARS, MAX_QUERY_CHARS, with_options
from ..paths import PathRejected, Root, locate
from .formats import KNOWN_COLUMNS

ANSWER_ORDER = "ABCDEFGH"
ANSWER_LETTERS = frozenset(ANSWER_ORDER)
#: The form of :func:`bad_row_key`; an id of this form is refused, so the two never meet.
_BAD_ROW_KEY = re.compile(r"<line \d+>")


def bad_row_key(line: int) -> str:
    """The item key of the bad row on ``line``: unique per line, and never a row's id."""
    return f"<line {line}>"


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


class BadRow(Exception):
    """The current row is bad; turned into a :class:`ManifestError` by the reader."""


@dataclass(frozen=True)
class PreparedRow:
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


def prepare_row(
    line: int,
    row: Mapping[str, Any] | str,
    *,
    base: Path | str,
    paths: Root,
    mos_range: tuple[float, float] | None,
    range_source: str,
) -> PreparedRow:
    """Read a row's cells and confine its paths (the cheap checks, in file order): its item,
    or why it is bad, before its image is opened and its id claimed."""
    if isinstance(row, str):
        return PreparedRow(line, None, error=row)
    item_id: str | None = None
    given: str | None = None
    try:
        given = item_id = _text(row.get("id"), "id", line)
        image_text = _text(row.get("image"), "image", line)
        if image_text is None:
            raise BadRow(f"line {line} has no image")
        if item_id is None:
            item_id = _derived_id(image_text, base, _question(row, line))
        if _BAD_ROW_KEY.fullmatch(item_id):
            raise BadRow(
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
    except BadRow as bad:
        return PreparedRow(line, row, given, item_id, error=str(bad))
    reference_text = (
        _masked(_text(row.get("reference"), "reference", line) or str(item.reference))
        if item.reference is not None
        else ""
    )
    return PreparedRow(line, row, given, item_id, image_text, item, reference_text=reference_text)


def to_entry(
    prepared: PreparedRow, verdict: ManifestItem | str | None, seen: SeenIds
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


def _salvaged(prepared: PreparedRow) -> tuple[str | None, str | None, float | None]:
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
        except BadRow:
            return None

    options = read(lambda: _options(row.get("options"), line)) or ()
    query = read(lambda: _question(row, line)) or read(
        lambda: _text(row.get("query"), "query", line, MAX_QUERY_CHARS)
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
    query = _text(row.get("query"), "query", line, MAX_QUERY_CHARS)
    options = _options(row.get("options"), line)
    if options and query is None:
        raise BadRow(f"line {line} has options but no query to ask")
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
                raise BadRow(
                    f"options on line {line} start like a JSON list but are not one: {_shown(text)}"
                ) from None
        else:
            value = text.split("|")
    if not isinstance(value, list) or not all(
        isinstance(option, str | int | float) and not isinstance(option, bool) for option in value
    ):
        raise BadRow(f"options on line {line} must be a list of texts, not {_shown(value)}")
    options = tuple(str(option).strip() for option in value)
    for letter, option in zip(ANSWER_ORDER, options, strict=False):
        if len(option) > MAX_OPTION_CHARS:
            raise BadRow(
                f"option {letter} on line {line} is {len(option):,} characters long: "
                f"at most {MAX_OPTION_CHARS:,}"
            )
    if len(options) < 2 or len(options) > len(ANSWER_LETTERS) or not all(options):
        raise BadRow(
            f"options on line {line}: give 2 to {len(ANSWER_LETTERS)} non-empty "
            f"options, not {_shown(list(options))}"
        )
    if len({option.casefold() for option in options}) < len(options):
        raise BadRow(f"options on line {line} repeat one another: {_shown(list(options))}")
    return options


def _text(value: Any, name: str, line: int, limit: int | None = None) -> str | None:
    """Return a string cell, or None when empty or absent (an empty cell means "not given").

    ``limit``: the most characters the cell may hold; a longer one is a bad row.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadRow(f"{name} on line {line} must be text, not {type(value).__name__}")
    text = str(value).strip()
    if limit is not None and len(text) > limit:
        raise BadRow(f"{name} on line {line} is {len(text):,} characters long: at most {limit:,}")
    if "\x00" in text:  # no file has such a name, and no database column stores one
        raise BadRow(f"{name} {_shown(text, 80)} on line {line} contains a NUL byte")
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
        raise BadRow(f"mos {shown} on line {line} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadRow(f"mos {shown} on line {line} is not a number") from None
    except OverflowError:  # an integer too large for a float (JSON has no limit on digits)
        raise BadRow(f"mos {shown} on line {line} is not a finite number") from None
    if not math.isfinite(number):
        raise BadRow(f"mos {shown} on line {line} is not a finite number")
    if abs(number) > MAX_ABS_MOS:
        raise BadRow(
            f"mos {shown} on line {line} is beyond any opinion scale (|mos| > {MAX_ABS_MOS:g})"
        )
    if mos_range is not None and not mos_range[0] <= number <= mos_range[1]:
        raise BadRow(
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
            raise BadRow(
                f"answer {text!r} on line {line} is neither one of the options "
                f"{_shown(list(options), 80)} nor a letter A-{allowed[-1]}"
            )
        raise BadRow(f"answer {text!r} on line {line} is not a letter A-H")
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
    """The file a cell names, through :func:`..paths.locate` (the one place paths are
    resolved and confined); a path it refuses is this row's error."""
    try:
        return locate(text, paths, digests=digests)
    except PathRejected as rejected:
        joint = ": path " if rejected.escape else " "
        raise BadRow(
            f"{name} {_shown(_masked(text), 200)} on line {line}{joint}{rejected}"
        ) from None


def _masked(text: str) -> str:
    """A cell as messages quote it: a URL's user, password and query masked."""
    return display(text) if is_url(text) else text


def check_image(
    path: Path | str, text: str, name: str, line: int
) -> tuple[tuple[int, int], str | None]:
    """Decode the whole file and check its size, as the tools will; returns (width, height)
    and, for a local file or an object read over HTTP(S), the ``sha256:`` of the bytes
    checked: the digest its items are read by later, so a file changed since submit is never
    scored (a web server's ETag need not change with its bytes; a file has none)."""
    text = _masked(text)
    checksum = None
    try:
        data = read_bytes(path)
        if scheme(str(path)) in ("http", "https") or local_path(str(path)) is not None:
            checksum = "sha256:" + digest_bytes(data)
        size = probe_data(data, str(path))
        check_min_size(path, size)
    except ImageTooSmallError as small:
        width, height = small.size
        raise BadRow(
            f"{name} {text!r} on line {line} is {width}x{height} pixels; the IQA "
            f"tools need at least {small.minimum}x{small.minimum}"
        ) from None
    except ImageTooLargeError as large:
        raise BadRow(f"{name} on line {line}: {large}") from None
    except ImageLoadError as exc:
        raise BadRow(
            f"{name} {text!r} on line {line} is not a readable image: {exc.reason}"
        ) from None
    except Exception as exc:  # a decoder bug on an odd file: still only this row is bad
        reason = str(exc) or type(exc).__name__
        raise BadRow(f"{name} {text!r} on line {line} is not a readable image: {reason}") from None
    return size, checksum


def check_reference(
    reference: Path | str, text: str, image_size: tuple[int, int], line: int
) -> str | None:
    """A reference must be readable and the image's size: FR tools compare pixel by pixel.
    ``text``: its cell, as messages quote it.  Returns the ``sha256:`` of a local or HTTP(S)
    reference's bytes (see :func:`check_image`)."""
    reference_size, checksum = check_image(reference, text, "reference", line)
    if reference_size != image_size:
        raise BadRow(
            f"reference {text!r} on line {line} is "
            f"{reference_size[0]}x{reference_size[1]} but the image is "
            f"{image_size[0]}x{image_size[1]}; full-reference tools need the same "
            "size"
        )
    return checksum
