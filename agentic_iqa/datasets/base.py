"""What a dataset reader gives: its description, its records, the records it could not read.

A reader yields a :class:`DatasetProblem` for one bad record instead of raising, so that one
non-numeric score does not lose the other ten thousand; it raises
:class:`DatasetFormatError` only when the folder cannot be the dataset at all, before the first
record, so that a job is refused at submit and not half-way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from upath import UPath

#: Where a dataset lives: a folder on this disk, or a bucket and prefix in an object store read
#: through the same pathlib calls (``UPath``), so one reader serves both
#: (:func:`agentic_iqa.datasets.files.dataset_root`).
DatasetPath: TypeAlias = "Path | UPath"


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset as published: its scale, its direction, its splits and the files it reads."""

    name: str
    title: str
    kind: Literal["score", "mcq"]
    mos_range: tuple[float, float] | None
    higher_is_better: bool
    full_reference: bool
    splits: tuple[str, ...]
    default_split: str
    files: str
    url: str


@dataclass(frozen=True)
class DatasetRow:
    """One record: paths relative to the root the user gave, values as the dataset gives them."""

    line: int
    image: str
    reference: str | None = None
    mos: float | None = None
    query: str | None = None
    options: tuple[str, ...] | None = None
    answer: str | None = None
    item_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetProblem:
    """A record that cannot be read; ``message`` names the file, the record and the fault."""

    line: int
    message: str


class DatasetFormatError(ValueError):
    """The folder cannot be this dataset: a file is missing, a column is not there, a split is
    unknown.  The message says what was looked for where, and what to pass instead."""


class Dataset(Protocol):
    """A reader of one dataset in its own published layout."""

    info: DatasetInfo

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        """The records of ``split`` (None: ``info.default_split``) under ``root``.

        Raises :class:`DatasetFormatError` when called, before the first record, if the files
        are not there.
        """
        ...
