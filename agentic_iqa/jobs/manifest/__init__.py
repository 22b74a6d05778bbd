"""Read a dataset manifest as a stream of items to assess, one bad row at a time.

A bad row becomes a :class:`ManifestError` in the stream instead of an exception, so one typo
does not sink a job; only a file that cannot be a manifest at all raises
:class:`ManifestFormatError`, when :func:`read_manifest` is called, before the first item, so a
job can refuse it up front.

- :mod:`.formats` reads the CSV, JSONL, JSON and image-folder files as raw rows;
- :mod:`.rows` checks one row's cells, paths and image, and keeps the ids seen;
- :mod:`.prefetch` runs the checks as a pipeline: a reader thread, the objects a chunk names
  fetched ahead, images decoded in pools of threads and processes;
- :mod:`.reading` ties them together: :func:`read_manifest` and :func:`read_records`.
"""

from __future__ import annotations

from .formats import IMAGE_EXTENSIONS, KNOWN_COLUMNS, ManifestFormatError, count_rows
from .prefetch import PREFETCH_ROWS, PROCESS_CHECKS_AFTER
from .reading import read_manifest, read_records
from .rows import ManifestEntry, ManifestError, ManifestItem, SeenIds, bad_row_key

__all__ = [
    "IMAGE_EXTENSIONS",
    "KNOWN_COLUMNS",
    "PREFETCH_ROWS",
    "PROCESS_CHECKS_AFTER",
    "ManifestEntry",
    "ManifestError",
    "ManifestFormatError",
    "ManifestItem",
    "SeenIds",
    "bad_row_key",
    "count_rows",
    "read_manifest",
    "read_records",
]
