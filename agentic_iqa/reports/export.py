"""Writing a job's per-item rows to CSV, JSONL or Parquet without holding them all in memory.

Rows arrive as an iterable (typically a database cursor over thousands of items) and are written
as they come: line by line for CSV and JSONL, in row groups of ``batch_size`` for Parquet. The
output appears under its final name only once complete, so a crash never leaves a file that
looks whole. A missing value is an empty CSV cell and a null in JSONL and Parquet.

CSV is opened by spreadsheets, which run a cell starting with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return as a formula; ids, paths and queries come from the manifest, so anyone who
writes one could plant ``=HYPERLINK(...)`` there.  Such text cells are written with a leading
single quote (OWASP's advice for CSV injection); numbers (a negative score or MOS) stay plain
numbers.  JSONL and Parquet are data formats, not opened as spreadsheets: they keep the raw
values, and a program that copies them into a spreadsheet must neutralise them itself.
"""

from __future__ import annotations

import csv
import json
import math
import numbers
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import IO, Any, Literal

from ..redact import redact_url_secrets

ExportFormat = Literal["csv", "jsonl", "parquet"]
FORMATS: tuple[ExportFormat, ...] = ("csv", "jsonl", "parquet")

#: The exported row format, in column order; one ``tool:<NAME>`` column (mean normalized
#: score) per tool follows, then, where asked for, one ``raw:<NAME>`` column (mean raw score).
#: ``scored_on`` says what those scores measured: "whole image" (also when the query named
#: objects: tools cannot locate them) or a region's crop ("left half (crop)").  ``unread``: why
#: no answer was read from the model's reply ("the model says it cannot see the image: ...",
#: "the reply names more than one option ..."), empty where one was.
ROW_COLUMNS: tuple[str, ...] = (
    "item_id",
    "line",
    "image",
    "reference",
    "query",
    "status",
    "error",
    "run_id",
    "final_answer",
    "quality_score",
    "reasoning",
    "unread",
    "level_distribution",
    "answered_by",
    "mos",
    "answer_truth",
    "correct",
    "severities",
    "fallbacks",
    "tools",
    "scored_on",
    "question_type",
    "meta",
)
TOOL_PREFIX = "tool:"
RAW_PREFIX = "raw:"
#: Parquet types of the known columns; score columns are floats, any other column text.
COLUMN_TYPES: dict[str, str] = {
    "line": "int64",
    "quality_score": "float64",
    "mos": "float64",
    "correct": "bool",
    "fallbacks": "int64",
}


def tool_column(name: str) -> str:
    """The column holding a tool's mean normalized score for an item."""
    return f"{TOOL_PREFIX}{name}"


def raw_column(name: str) -> str:
    """The column holding a tool's mean raw score (on the tool's own scale) for an item."""
    return f"{RAW_PREFIX}{name}"


def export_columns(tool_names: Iterable[str], *, raw: bool = False) -> list[str]:
    """The row format's columns followed by one column per tool, tools sorted by name; with
    ``raw``, one raw-score column per tool after them."""
    tools = sorted(set(tool_names))
    return [
        *ROW_COLUMNS,
        *(tool_column(name) for name in tools),
        *(raw_column(name) for name in tools if raw),
    ]


def column_type(name: str) -> str:
    """The Parquet type of a column: known columns typed, tool scores float64, else string."""
    if name.startswith((TOOL_PREFIX, RAW_PREFIX)):
        return "float64"
    return COLUMN_TYPES.get(name, "string")


def write_rows(
    rows: Iterable[Mapping[str, Any]],
    path: str | os.PathLike[str],
    fmt: ExportFormat,
    columns: list[str],
    *,
    batch_size: int = 1000,
) -> int:
    """Write exactly ``columns`` of each row (missing keys are empty) and return the row count.

    Keys not in ``columns`` are not written: the caller decides the columns up front, because
    a streamed CSV header and a Parquet schema cannot grow afterwards.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not columns:
        raise ValueError("no columns to export")
    if len(set(columns)) != len(columns):
        raise ValueError("columns must not repeat")
    if os.fspath(path) == "-":  # standard output, as it comes
        if fmt == "parquet":
            raise ValueError("Parquet is binary and needs a file: give -o FILE.parquet")
        import sys

        return (_write_csv if fmt == "csv" else _write_jsonl)(rows, sys.stdout, columns)
    from iqa_tools.storage import is_url, output_file

    if is_url(os.fspath(path)):  # written here, then put in the store whole
        with output_file(path) as local:
            return write_rows(rows, local, fmt, columns, batch_size=batch_size)
    target = Path(path)
    with _staged(target) as partial:
        if fmt == "csv":
            return _write_csv(rows, partial, columns)
        if fmt == "jsonl":
            return _write_jsonl(rows, partial, columns)
        return _write_parquet(rows, partial, columns, batch_size)


@contextmanager
def _staged(target: Path) -> Iterator[Path]:
    """A temporary name beside ``target``, renamed onto it only when writing succeeded."""
    target.parent.mkdir(parents=True, exist_ok=True)  # -o results/x.csv on a fresh machine
    partial = target.with_name(f".{target.name}.partial")
    try:
        yield partial
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _plain(value: Any) -> Any:
    """JSON-safe value: non-finite floats become None, paths become text; a URL's signature
    (a presigned URL's ``X-Amz-Signature``, ``sig=``, ``token=``) masked in any text, nested
    ones included: an export is shared, the stored location keeps them to be read."""
    kind = type(value)  # the common cells first, by their exact type: millions of them
    if value is None or kind is int or kind is bool:
        return value
    if kind is str:
        return redact_url_secrets(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, str):
        return redact_url_secrets(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


#: First characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralise(text: str) -> str:
    """``text`` as a spreadsheet shows it, never as a formula: a quote before a risky start."""
    return f"'{text}" if text.startswith(FORMULA_PREFIXES) else text


def _cell(value: Any) -> str:
    kind = type(value)  # the common cells first, as :func:`_plain` then the rules below would
    if value is None:
        return ""
    if kind is str:
        return neutralise(redact_url_secrets(value))
    if kind is float:
        return repr(value) if math.isfinite(value) else ""
    if kind is int or kind is bool:
        return str(value)
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, numbers.Real):  # numbers (and bools) are never formulas
        return str(value)
    if isinstance(value, dict | list | tuple):
        return neutralise(json.dumps(value, ensure_ascii=False))
    return neutralise(str(value))


@contextmanager
def _opened(target: Path | IO[str], **options: Any) -> Iterator[IO[str]]:
    """A path opened for writing, or an already open stream (standard output) left open."""
    if isinstance(target, Path):
        with target.open("w", encoding="utf-8", **options) as handle:
            yield handle
    else:
        yield target


def _write_csv(rows: Iterable[Mapping[str, Any]], path: Path | IO[str], columns: list[str]) -> int:
    count = 0
    with _opened(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(name)) for name in columns])
            count += 1
    return count


def _write_jsonl(
    rows: Iterable[Mapping[str, Any]], path: Path | IO[str], columns: list[str]
) -> int:
    count = 0
    with _opened(path) as handle:
        for row in rows:
            record = {name: _plain(row.get(name)) for name in columns}
            handle.write(json.dumps(record, ensure_ascii=False, allow_nan=False, default=str))
            handle.write("\n")
            count += 1
    return count


def _parquet_value(value: Any, kind: str) -> Any:
    value = _plain(value)
    if value is None or kind != "string":
        return value
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _write_parquet(
    rows: Iterable[Mapping[str, Any]], path: Path, columns: list[str], batch_size: int
) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    kinds = [column_type(name) for name in columns]
    schema = pa.schema(
        [pa.field(name, pa.type_for_alias(kind)) for name, kind in zip(columns, kinds, strict=True)]
    )
    count = 0
    iterator = iter(rows)
    with pq.ParquetWriter(path, schema) as writer:
        while batch := list(islice(iterator, batch_size)):
            arrays = {
                name: [_parquet_value(row.get(name), kind) for row in batch]
                for name, kind in zip(columns, kinds, strict=True)
            }
            try:
                table = pa.Table.from_pydict(arrays, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise ValueError(
                    f"rows {count + 1}-{count + len(batch)} do not fit the Parquet schema: {exc}"
                ) from exc
            writer.write_table(table)
            count += len(batch)
    return count
