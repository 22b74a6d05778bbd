"""Recognise a public dataset's own score file given where a manifest was expected.

A researcher who passes KonIQ-10k's ``koniq10k_scores_and_distributions.csv`` as a manifest gets
"no 'image' column"; the dataset readers (``--dataset NAME --root DIR``) read that very file.  The
header's columns tell which dataset's file it is, so the error can name the flags to use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetFile:
    """A dataset's score file, recognised by columns its header always has."""

    dataset: str
    title: str
    file: str
    columns: frozenset[str]


#: Each reader's file and the columns that give it away (compared case-insensitively); the
#: first match wins, so more specific signatures come first.
DATASET_FILES = (
    DatasetFile(
        "koniq10k",
        "KonIQ-10k",
        "koniq10k_scores_and_distributions.csv",
        frozenset({"image_name", "mos_zscore"}),
    ),
    DatasetFile(
        "koniq10k", "KonIQ-10k", "koniq10k_distributions_sets.csv", frozenset({"image_name", "set"})
    ),
    DatasetFile(
        "koniq10k",
        "KonIQ-10k",
        "koniq10k_scores_and_distributions.csv",
        frozenset({"image_name", "mos"}),
    ),
    DatasetFile("kadid10k", "KADID-10k", "dmos.csv", frozenset({"dist_img", "ref_img", "dmos"})),
    DatasetFile("agiqa3k", "AGIQA-3K", "data.csv", frozenset({"name", "mos_quality"})),
    DatasetFile(
        "spaq", "SPAQ", "MOS and Image attribute scores.xlsx", frozenset({"image name", "mos"})
    ),
)


def recognise(columns: Sequence[str]) -> DatasetFile | None:
    """The dataset file whose signature columns all appear in ``columns``, if any."""
    present = {column.strip().lower() for column in columns}
    for known in DATASET_FILES:
        if known.columns <= present:
            return known
    return None


def dataset_hint(columns: Sequence[str]) -> str:
    """``"; this looks like ...: use `--dataset NAME --root DIR` ..."`` or ``""``."""
    known = recognise(columns)
    if known is None:
        return ""
    return (
        f"; this looks like {known.title}'s score file ({known.file}): use "
        f"`--dataset {known.dataset} --root DIR` instead of a manifest (DIR: the folder holding "
        "that file and the images)"
    )
