"""What every reader does the same way: find its files under the root, check the split, read a
score, join an image folder and a file name.

Errors name the file looked for, the root it was looked for under, and what to pass instead,
because the person reading them has a dataset folder in front of them and nothing else.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from agentic_iqa.datasets.base import DatasetFormatError, DatasetInfo
from agentic_iqa.datasets.bounded import not_utf8, text_lines


def choose_split(info: DatasetInfo, split: str | None) -> str:
    """``split``, or the default one; an unknown split is a format error listing the known."""
    chosen = info.default_split if split is None else split
    if chosen not in info.splits:
        raise DatasetFormatError(
            f"{info.title} has no split {chosen!r}; pass --split {' | '.join(info.splits)} "
            f"(default {info.default_split})")
    return chosen


def find_file(root: Path, info: DatasetInfo, *names: str) -> Path:
    """The first of ``names`` (relative to ``root``) that is a file; none is a format error."""
    if not root.is_dir():
        raise DatasetFormatError(
            f"{info.title}: {root} is not a folder; --root must be the folder the dataset "
            f"unpacks to, the one holding {info.files}")
    for name in names:
        path = root / name
        if path.is_file():
            return path
    looked = " or ".join(names)
    raise DatasetFormatError(
        f"{info.title}: {looked} not found under {root}; --root must be the folder the "
        f"dataset unpacks to, the one holding {info.files} ({info.url})")


def image_folder(root: Path, *candidates: str) -> str:
    """The first candidate folder that exists under ``root``, else the first: where a dataset
    is unpacked under more than one name, the one on disk wins, and a missing one is reported
    per image by the caller with the path it tried."""
    for candidate in candidates:
        if (root / candidate).is_dir():
            return candidate
    return candidates[0]


def case_names(folder: Path) -> dict[str, str]:
    """File names in ``folder`` by their lower-case spelling (empty when it is not there), for
    datasets whose files and score lists disagree on case."""
    if not folder.is_dir():
        return {}
    return {entry.name.lower(): entry.name for entry in folder.iterdir()}


def joined(folder: str, name: str) -> str:
    """``folder/name`` with forward slashes, or ``name`` alone when the folder is the root or
    the name is absolute: left absolute, the job's confinement to ``--root`` refuses it."""
    name = name.replace("\\", "/")
    return f"{folder}/{name}" if folder and not name.startswith("/") else name


def score(value: object) -> float | None:
    """A finite number from a cell (text or number), or None: the reader turns None into a
    :class:`~agentic_iqa.datasets.base.DatasetProblem` naming the record."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class BadRecord:
    """A record of a dataset's CSV that cannot be read (bytes that are not UTF-8, a row the
    csv module cannot split): why, for the reader to turn into a problem on that record."""

    reason: str


def read_csv(path: Path, info: DatasetInfo, required: tuple[str, ...]
             ) -> list[dict[str, str] | BadRecord]:
    """The data records of a CSV file with a header, which must hold the ``required`` columns.

    Each line is decoded on its own, so a byte that is not UTF-8 makes its record a
    :class:`BadRecord` and the others are read; a byte-order mark (spreadsheet exports) is
    dropped rather than becoming part of the first column's name.
    """
    with path.open("rb") as handle:
        reader = csv.reader(text_lines(handle))
        try:
            header = [name.strip() for name in next(reader, [])]
        except csv.Error as exc:
            raise DatasetFormatError(f"{info.title}: {path}: unreadable header: {exc}") from None
        if fault := not_utf8(header):
            raise DatasetFormatError(f"{info.title}: {path}: the header {fault}")
        missing = [name for name in required if name not in header]
        if missing:
            raise DatasetFormatError(
                f"{info.title}: {path} has no column {', '.join(missing)} (its columns: "
                f"{', '.join(header) or 'none'}); is this the file as the dataset ships it?")
        records: list[dict[str, str] | BadRecord] = []
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return records
            except csv.Error as exc:  # the reader goes on at the next line
                records.append(BadRecord(f"cannot be read as CSV: {exc}"))
                continue
            if not row:
                continue
            if fault := not_utf8(row):
                records.append(BadRecord(fault))
                continue
            values = [value.strip() for value in row] + [""] * (len(header) - len(row))
            records.append(dict(zip(header, values, strict=False)))
