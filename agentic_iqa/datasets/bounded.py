"""Reading files from strangers in bounded time and memory, and one bad row at a time.

Dataset files and manifests come from the internet.  A small file can declare or unpack into
gigabytes (a spreadsheet of 60 million shared strings, a MAT array that inflates to 4 GB), and
one line can hold a value nested too deep for any parser.  Each check here runs before the
parser, from the sizes the file declares and from a streamed, capped decompression, so a bomb
ends in one line within seconds; and text is decoded a line at a time, so a bad byte is the
fault of its row, not of the file.
"""

from __future__ import annotations

import codecs
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from agentic_iqa.datasets.base import DatasetPath

#: Deepest JSON value read: manifest rows are flat objects with a list of options at most.
MAX_JSON_DEPTH = 64
#: Largest whole JSON document (Q-Bench's question files are about 1 MB); JSONL has no limit
#: as a file, only per line.
MAX_JSON_BYTES = 64 * 2**20
#: Largest JSONL line: a row is a few hundred bytes.
MAX_JSON_LINE = 2**20
#: XLSX: entries in the archive, unpacked bytes of one entry and of all (SPAQ's sheet unpacks
#: to a few MB; its shared strings to under 1 MB).
MAX_XLSX_ENTRIES = 1000
MAX_XLSX_ENTRY_BYTES = 64 * 2**20
MAX_XLSX_SHARED_STRINGS_BYTES = 16 * 2**20
MAX_XLSX_TOTAL_BYTES = 128 * 2**20
#: XLSX, counted in the unpacked XML before openpyxl reads any of it: its memory is per
#: element, not per byte (five million empty shared strings are 25 MB of XML, 2 MB zipped, and
#: took 1.1 GB).  Shared strings: openpyxl keeps every one (SPAQ's sheet has 11,126 rows, a
#: few strings each).  Rows of a sheet: a row with attributes leaves a dict behind.  Elements
#: of one row: a row is parsed whole (16,384 columns is Excel's own limit, four elements a
#: cell).  Elements of every other part (styles, workbook, relationships), which are parsed
#: whole into objects.  With these, any XLSX is read within a few hundred MB.
MAX_XLSX_SHARED_STRINGS = 200_000
MAX_XLSX_ROWS = 200_000
MAX_XLSX_ROW_ELEMENTS = 4 * 16_384
MAX_XLSX_ELEMENTS = 100_000
#: Content types by which openpyxl finds an archive's parts (not their names, which a file
#: may choose freely).
_SHARED_STRINGS_TYPE = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
)
_WORKSHEET_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"
#: An element's start tag (not a closing tag, declaration or comment), its local name.
_START_TAG = re.compile(rb"<(?![/?!])(?:[A-Za-z_][\w.\-]*:)?([A-Za-z_][\w.\-]*)")
#: Longest tag name looked at across a chunk's end.
_NAME_SPAN = 256
#: MAT: bytes one file may inflate to, and elements its arrays may declare (LIVE-C's two files
#: hold 1169 names and 1169 numbers).
MAX_MAT_BYTES = 8 * 2**20
MAX_MAT_CELLS = 200_000

_MAT_COMPRESSED = 15
_MAT_MATRIX = 14
_MAT_CELL_CLASSES = {1, 2, 3}  # cell, struct, object: one Python object per element
_MAT_ITEM_BYTES = {4: 2, 6: 8, 7: 4, 8: 1, 9: 1, 10: 2, 11: 2, 12: 4, 13: 4, 14: 8, 15: 8}


class TooLarge(ValueError):
    """A file declares or unpacks to more than its budget; the message says which and how
    much, in one line."""


# -- text, a line at a time ----------------------------------------------------------------------


def text_lines(handle: BinaryIO) -> Iterator[str]:
    """The lines of a binary file as text for :mod:`csv`, each decoded on its own.

    A byte that is not UTF-8 is kept as a lone surrogate (``surrogateescape``), so the csv
    reader still splits the row and :func:`not_utf8` can name it; the BOM spreadsheet programs
    write is dropped.  Lines end at ``\n``, ``\r\n`` or a lone ``\r`` (older spreadsheet
    programs on the Mac), as in text mode with ``newline=""``.
    """
    for number, raw in enumerate(handle, start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        for piece in raw.splitlines(keepends=True) if b"\r" in raw.rstrip(b"\r\n") else (raw,):
            yield piece.decode("utf-8", "surrogateescape")


def not_utf8(cells: Iterable[str]) -> str | None:
    """Why a row read through :func:`text_lines` is not text, or None when it is."""
    for cell in cells:
        try:
            cell.encode("utf-8")
        except UnicodeEncodeError as exc:
            byte = ord(cell[exc.start]) - 0xDC00
            return f"is not UTF-8 text (byte 0x{byte:02x})"
    return None


# -- JSON ------------------------------------------------------------------------------------------


def load_json(text: str | bytes) -> Any:
    """A JSON value no deeper than :data:`MAX_JSON_DEPTH`; raises ValueError with one line.

    The C parser stops at Python's recursion limit with a RecursionError, which is caught here;
    what it returns is then measured without recursion.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def json_depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def read_json_file(path: DatasetPath) -> Any:
    """A whole JSON document, refused above :data:`MAX_JSON_BYTES` or too deep."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise TooLarge(
            f"{path} is {size / 2**20:.0f} MB, more than the "
            f"{MAX_JSON_BYTES // 2**20} MB read as one JSON document (use JSONL)"
        )
    with path.open("rb") as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    return load_json(data.decode("utf-8"))


def bounded_lines(handle: BinaryIO, limit: int = MAX_JSON_LINE) -> Iterator[bytes | None]:
    """The lines of a binary file, each as bytes, or None for one longer than ``limit``
    (skipped in chunks, never held whole)."""
    while True:
        raw = handle.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(limit)
            yield None
            continue
        yield raw


# -- XLSX ------------------------------------------------------------------------------------------


def check_xlsx(handle: BinaryIO, name: str) -> None:
    """Refuse a spreadsheet (an open, seekable file called ``name``) whose archive declares
    too many entries or unpacks to too much.

    Python's zipfile never inflates an entry past the size its directory declares, so the
    declared sizes bound what openpyxl can unpack.
    """
    try:
        with zipfile.ZipFile(handle) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ValueError(f"not an XLSX (zip) file: {exc}") from None
    if len(entries) > MAX_XLSX_ENTRIES:
        raise TooLarge(
            f"{name} holds {len(entries)} entries, more than the "
            f"{MAX_XLSX_ENTRIES} a spreadsheet needs"
        )
    total = 0
    for entry in entries:
        budget = (
            MAX_XLSX_SHARED_STRINGS_BYTES
            if entry.filename.lower().endswith("sharedstrings.xml")
            else MAX_XLSX_ENTRY_BYTES
        )
        if entry.file_size > budget:
            raise TooLarge(
                f"{name}: {entry.filename} unpacks to "
                f"{entry.file_size / 2**20:.0f} MB, more than {budget // 2**20} MB"
            )
        total += entry.file_size
    if total > MAX_XLSX_TOTAL_BYTES:
        raise TooLarge(
            f"{name} unpacks to {total / 2**20:.0f} MB, more than "
            f"{MAX_XLSX_TOTAL_BYTES // 2**20} MB"
        )
    handle.seek(0)
    with zipfile.ZipFile(handle) as archive:
        _check_xlsx_parts(archive, name)


def _check_xlsx_parts(archive: zipfile.ZipFile, name: str) -> None:
    """Count what openpyxl would build of each XML part, streamed (a chunk at a time), and
    refuse the file at the first count above its budget: shared strings in the shared-strings
    part (found by its content type, whatever its name), rows and elements per row in a
    worksheet, elements in every other part."""
    types = _content_types(archive, name)
    others = 0
    for entry in archive.infolist():
        part = entry.filename
        kind = types.get(part.lower())
        if kind == _SHARED_STRINGS_TYPE or part.lower().endswith("sharedstrings.xml"):
            if entry.file_size > MAX_XLSX_SHARED_STRINGS_BYTES:
                raise TooLarge(
                    f"{name}: {part} (its shared strings) unpacks to "
                    f"{entry.file_size / 2**20:.0f} MB, more than "
                    f"{MAX_XLSX_SHARED_STRINGS_BYTES // 2**20} MB"
                )
            strings = _count(archive, entry, name, strings=True)[2]
            if strings > MAX_XLSX_SHARED_STRINGS:
                raise TooLarge(
                    f"{name}: {part} holds more than {MAX_XLSX_SHARED_STRINGS:,} "
                    "shared strings (a spreadsheet of this dataset needs a few "
                    "thousand)"
                )
        elif kind == _WORKSHEET_TYPE:
            _count(archive, entry, name, rows=True)
        elif part.lower().endswith((".xml", ".rels", ".vml")) or (kind or "").endswith("xml"):
            others += _count(archive, entry, name, budget=MAX_XLSX_ELEMENTS - others)[0]


def _content_types(archive: zipfile.ZipFile, name: str) -> dict[str, str]:
    """Part name (lower case, no leading slash) to its declared content type, from
    ``[Content_Types].xml`` (itself counted first)."""
    import xml.etree.ElementTree as ElementTree

    try:
        entry = archive.getinfo("[Content_Types].xml")
    except KeyError:
        return {}
    _count(archive, entry, name, budget=MAX_XLSX_ELEMENTS)
    try:
        root = ElementTree.fromstring(archive.read(entry))
    except ElementTree.ParseError as exc:
        raise ValueError(f"its content types cannot be read: {exc}") from None
    return {
        str(node.get("PartName", "")).lstrip("/").lower(): str(node.get("ContentType"))
        for node in root
        if node.tag.rsplit("}", 1)[-1] == "Override"
    }


def _count(
    archive: zipfile.ZipFile,
    entry: zipfile.ZipInfo,
    name: str,
    *,
    budget: int | None = None,
    rows: bool = False,
    strings: bool = False,
) -> tuple[int, int, int]:
    """(elements, rows, shared strings) of one XML part, counted from its start tags as it
    unpacks; raises :class:`TooLarge` past ``budget`` elements or, with ``rows``, past the
    rows or elements of one row a sheet may have."""
    elements = row_count = row_elements = shared = 0
    pending = b""
    with archive.open(entry) as stream:
        while True:
            chunk = stream.read(2**20)
            data = pending + chunk
            # A tag cut by the chunk's end waits for the next chunk, unless its name is
            # already whole (a long text after it).
            cut = data.rfind(b"<") if chunk else -1
            if cut < 0 or len(data) - cut > _NAME_SPAN:
                cut = len(data)
            for found in _START_TAG.finditer(data, 0, cut):
                elements += 1
                tag = found.group(1)
                if tag == b"row":
                    row_count, row_elements = row_count + 1, 0
                    if rows and row_count > MAX_XLSX_ROWS:
                        raise TooLarge(
                            f"{name}: {entry.filename} holds more than {MAX_XLSX_ROWS:,} rows"
                        )
                else:
                    row_elements += 1
                    if rows and row_count and row_elements > MAX_XLSX_ROW_ELEMENTS:
                        raise TooLarge(
                            f"{name}: {entry.filename}: row {row_count} holds more than "
                            f"{MAX_XLSX_ROW_ELEMENTS:,} XML elements (Excel's 16,384 columns)"
                        )
                shared += tag == b"si"
            pending = data[cut:]
            if budget is not None and elements > budget:
                raise TooLarge(
                    f"{name}: {entry.filename} brings the XML elements of its parts "
                    f"other than sheets and shared strings above "
                    f"{MAX_XLSX_ELEMENTS:,}, more than a dataset's spreadsheet "
                    "needs"
                )
            if strings and shared > MAX_XLSX_SHARED_STRINGS:
                break
            if not chunk:
                break
    return elements, row_count, shared


# -- MAT (version 5) -------------------------------------------------------------------------------


def check_mat(path: DatasetPath) -> None:
    """Refuse a MAT file whose arrays declare, or whose compressed parts inflate to, more than
    the budget, before scipy loads any of it.

    Only version 5 files are walked (the LIVE-C release's); a version 4 file holds its data
    uncompressed, so it cannot be bigger than itself, and a version 7.3 (HDF5) file is refused
    by scipy.
    """
    with path.open("rb") as handle:
        header = handle.read(128)
        if len(header) < 128 or header[126:128] not in (b"IM", b"MI"):
            return
        order = "<" if header[126:128] == b"IM" else ">"
        used = 0
        while True:
            tag = handle.read(8)
            if len(tag) < 8:
                return
            kind, size = _tag(tag, order)
            if kind == _MAT_COMPRESSED:
                used += _inflated(handle, size, order, MAX_MAT_BYTES - used)
            else:
                _check_matrix(handle.read(min(size, 64)), kind, order)
                handle.seek(size - min(size, 64) + (-size % 8), 1)
                used += size
            if used > MAX_MAT_BYTES:
                raise TooLarge(f"{path.name} holds more than {MAX_MAT_BYTES // 2**20} MB")


def _tag(tag: bytes, order: str) -> tuple[int, int]:
    kind, size = struct.unpack(order + "II", tag)
    if kind >> 16:  # small data element: type and size share the first word
        return kind & 0xFFFF, kind >> 16
    return kind, size


def _inflated(handle: BinaryIO, size: int, order: str, budget: int) -> int:
    """Bytes a compressed element inflates to, streamed and capped at ``budget``; its inner
    matrix header is checked as soon as it appears."""
    inflater = zlib.decompressobj()
    left, total, head = size, 0, b""
    while left > 0:
        chunk = handle.read(min(left, 2**16))
        if not chunk:
            break
        left -= len(chunk)
        while chunk:
            try:
                out = inflater.decompress(chunk, 2**20)
            except zlib.error as exc:
                raise ValueError(f"a compressed variable is corrupt: {exc}") from None
            chunk = inflater.unconsumed_tail
            total += len(out)
            if len(head) < 72:
                head += out[: 72 - len(head)]
                if len(head) >= 72 or total == len(head):
                    kind, _ = _tag(head[:8], order)
                    _check_matrix(head[8:], kind, order)
            if total > budget:
                raise TooLarge(
                    f"a compressed variable inflates to more than {MAX_MAT_BYTES // 2**20} MB"
                )
    return total


def _check_matrix(body: bytes, kind: int, order: str) -> None:
    """From a matrix element's first bytes (array flags, then dimensions), refuse one that
    declares more than the budget."""
    if kind != _MAT_MATRIX or len(body) < 24:
        return
    array_class = struct.unpack(order + "I", body[8:12])[0] & 0xFF
    dims_kind, dims_size = _tag(body[16:24], order)
    small = dims_kind != struct.unpack(order + "I", body[16:20])[0]
    start = 20 if small else 24
    count = dims_size // 4
    dims = (
        struct.unpack(order + "i" * count, body[start : start + 4 * count])
        if len(body) >= start + 4 * count
        else ()
    )
    elements = 1
    for dim in dims:
        elements *= max(dim, 0)
    if array_class in _MAT_CELL_CLASSES and elements > MAX_MAT_CELLS:
        raise TooLarge(f"a cell array declares {elements} elements, more than {MAX_MAT_CELLS}")
    declared = elements * _MAT_ITEM_BYTES.get(array_class, 8)
    if declared > MAX_MAT_BYTES:
        raise TooLarge(
            f"an array declares {declared / 2**20:.0f} MB, more than {MAX_MAT_BYTES // 2**20} MB"
        )
