"""Read public IQA datasets in the layout each one ships in.

Each reader takes a dataset's own score or question file and image folder, no converted
manifest.

The registry names each reader by a ``"module:attribute"`` string and imports the module on
first use, so that importing this package costs nothing: listing the datasets for ``--help``
never loads scipy (LIVE-C's MAT files) or openpyxl (SPAQ's spreadsheet).
"""

from __future__ import annotations

import importlib
import re

from agentic_iqa.datasets.base import (
    Dataset,
    DatasetFormatError,
    DatasetInfo,
    DatasetPath,
    DatasetProblem,
    DatasetRow,
)

__all__ = [
    "Dataset",
    "DatasetFormatError",
    "DatasetInfo",
    "DatasetPath",
    "DatasetProblem",
    "DatasetRow",
    "dataset_names",
    "get_dataset",
]

_READERS = {
    "agiqa3k": "agentic_iqa.datasets.agiqa:DATASET",
    "kadid10k": "agentic_iqa.datasets.kadid:DATASET",
    "koniq10k": "agentic_iqa.datasets.koniq:DATASET",
    "livec": "agentic_iqa.datasets.livec:DATASET",
    "qbench": "agentic_iqa.datasets.qbench:DATASET",
    "spaq": "agentic_iqa.datasets.spaq:DATASET",
    "tid2013": "agentic_iqa.datasets.tid2013:DATASET",
}
# Keys are compared without case, spaces, hyphens or underscores: "KonIQ-10k" is "koniq10k".
_ALIASES = {
    "agiqa": "agiqa3k",
    "kadid": "kadid10k",
    "koniq": "koniq10k",
    "clive": "livec",
    "livechallenge": "livec",
    "liveitw": "livec",
    "liveinthewild": "livec",
    "llvisionqa": "qbench",
    "qbencha1": "qbench",
    "tid": "tid2013",
}


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower())


def dataset_names() -> list[str]:
    """The canonical names, sorted."""
    return sorted(_READERS)


def get_dataset(name: str) -> Dataset:
    """The reader named ``name`` or one of its aliases, in any case and with or without
    hyphens; an unknown name is a :class:`DatasetFormatError` listing the known ones."""
    key = _key(name)
    canonical = key if key in _READERS else _ALIASES.get(key)
    if canonical is None:
        raise DatasetFormatError(
            f"unknown dataset {name!r}; known: {', '.join(dataset_names())} "
            f"(also: {', '.join(sorted(_ALIASES))})"
        )
    module, attribute = _READERS[canonical].split(":")
    reader: Dataset = getattr(importlib.import_module(module), attribute)
    return reader
