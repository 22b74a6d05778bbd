"""What every reader does the same way: find its files under the root, check the split, read a
score, join an image folder and a file name.

Errors name the file looked for, the root it was looked for under, and what to pass instead,
because the person reading them has a dataset folder in front of them and nothing else.

The root may be a folder in an object store (:func:`dataset_root`): the readers use only
pathlib calls (``/``, ``is_file``, ``is_dir``, ``iterdir``, ``open``), which ``UPath`` answers
from the store, a "folder" being a prefix.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import SupportsFloat, cast
from urllib.parse import unquote, urlsplit

from agentic_iqa.datasets.base import DatasetFormatError, DatasetInfo, DatasetPath
from agentic_iqa.datasets.bounded import not_utf8, text_lines
from iqa_tools.storage import REMOTE_SCHEMES, display, scheme


def dataset_root(location: str | os.PathLike[str]) -> DatasetPath:
    """``location`` as the readers walk it: a path (or ``file://`` URL) as a
    :class:`~pathlib.Path`, so a symlink out of it is refused as for any folder; a store's URL
    (``s3://bucket/prefix``, ``gs://``, ``az://``) as a ``UPath`` over fsspec.

    The URL obeys :mod:`iqa_tools.storage`'s rules: no user or password in it (credentials
    come from the backend's environment and config files only), no query or fragment.  Its
    filesystem is its own, not fsspec's shared instance, so the endpoint and credential are
    the environment's as it is now, as :mod:`iqa_tools.storage` reads them.
    """
    text = os.fspath(location)
    kind = scheme(text)
    if kind is None:
        return Path(text)
    parts = urlsplit(text)
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise DatasetFormatError(
            f"--root {display(text)}: give the bucket and prefix alone, with no user, "
            "password, query or fragment; the credential comes from the backend's environment "
            "or config file (for S3: AWS_PROFILE, AWS_ACCESS_KEY_ID, ~/.aws/credentials)"
        )
    if kind == "file":
        if parts.netloc not in ("", "localhost"):
            raise DatasetFormatError(
                f"--root {text}: a file:// URL names a folder on this "
                f"machine, not on {parts.netloc}"
            )
        return Path(unquote(parts.path))
    if kind not in REMOTE_SCHEMES:
        raise DatasetFormatError(
            f"--root {display(text)}: unsupported scheme {kind!r} (use "
            "a folder, s3://, gs://, az:// or https://)"
        )
    from upath import UPath

    if kind in ("http", "https"):
        # fsspec's web filesystem follows redirects on its own, past the gate that confines
        # every other read under --root (iqa_tools/storage/access.py): it is told not to, so a
        # file that answers a redirect is read as that answer and fails as a bad file, never
        # fetched from wherever it points.
        return UPath(text.rstrip("/"), skip_instance_cache=True, allow_redirects=False)
    return UPath(text.rstrip("/"), skip_instance_cache=True)


def choose_split(info: DatasetInfo, split: str | None) -> str:
    """``split``, or the default one; an unknown split is a format error listing the known."""
    chosen = info.default_split if split is None else split
    if chosen not in info.splits:
        raise DatasetFormatError(
            f"{info.title} has no split {chosen!r}; pass --split {' | '.join(info.splits)} "
            f"(default {info.default_split})"
        )
    return chosen


def find_file(root: DatasetPath, info: DatasetInfo, *names: str) -> DatasetPath:
    """The first of ``names`` (relative to ``root``) that is a file; none is a format error."""
    if not root.is_dir():
        raise DatasetFormatError(
            f"{info.title}: {root} is not a folder; --root must be the folder the dataset "
            f"unpacks to, the one holding {info.files}"
        )
    for name in names:
        path = root / name
        if path.is_file():
            return path
    looked = " or ".join(names)
    raise DatasetFormatError(
        f"{info.title}: {looked} not found under {root}; --root must be the folder the "
        f"dataset unpacks to, the one holding {info.files} ({info.url})"
    )


def image_folder(root: DatasetPath, *candidates: str) -> str:
    """The first candidate folder that exists under ``root``, else the first: where a dataset
    is unpacked under more than one name, the one on disk wins, and a missing one is reported
    per image by the caller with the path it tried."""
    for candidate in candidates:
        if (root / candidate).is_dir():
            return candidate
    return candidates[0]


def case_names(folder: DatasetPath) -> dict[str, str]:
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
        # Anything but text or a number raises TypeError here, and is no score.
        number = (
            float(str(value).strip())
            if isinstance(value, str)
            else float(cast("SupportsFloat", value))
        )
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class BadRecord:
    """A record of a dataset's CSV that cannot be read (bytes that are not UTF-8, a row the
    csv module cannot split): why, for the reader to turn into a problem on that record."""

    reason: str


def read_csv(
    path: DatasetPath, info: DatasetInfo, required: tuple[str, ...]
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
                f"{', '.join(header) or 'none'}); is this the file as the dataset ships it?"
            )
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
