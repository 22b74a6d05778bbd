"""Dataset evaluation jobs, the pure parts: manifests in, metrics and reports out.

A job points the agent at thousands of images listed in a manifest and compares what it says
with human opinion when that is known. This package holds what needs no database or queue, so
it can be tested on plain files and reused by the CLI, the workers and offline analysis:

- :mod:`.manifest` streams a CSV / JSONL / image-folder manifest as checked items and bad rows;
- :mod:`.metrics` computes SRCC, PLCC (raw and after a logistic fit), KRCC with bootstrap
  intervals, and MCQ accuracy;
- :mod:`.report` turns exported per-item rows into a report (text or self-contained HTML);
- :mod:`.export` writes those rows to CSV, JSONL or Parquet as a stream.
"""

from .export import (
    ROW_COLUMNS,
    TOOL_PREFIX,
    export_columns,
    tool_column,
    write_rows,
)
from .manifest import (
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    count_rows,
    read_manifest,
)
from .metrics import (
    LogisticFit,
    answer_letter,
    bootstrap_ci,
    correlation_report,
    krcc,
    mcq_accuracy,
    plcc,
    plcc_after_logistic,
    srcc,
)
from .report import build_report, failure_reason, render_html, render_text

__all__ = [
    "ROW_COLUMNS",
    "TOOL_PREFIX",
    "LogisticFit",
    "ManifestError",
    "ManifestFormatError",
    "ManifestItem",
    "answer_letter",
    "bootstrap_ci",
    "build_report",
    "correlation_report",
    "count_rows",
    "export_columns",
    "failure_reason",
    "krcc",
    "mcq_accuracy",
    "plcc",
    "plcc_after_logistic",
    "read_manifest",
    "render_html",
    "render_text",
    "srcc",
    "tool_column",
    "write_rows",
]
