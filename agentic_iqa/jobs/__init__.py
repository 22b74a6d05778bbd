"""Dataset evaluation jobs, the pure parts: manifests in, metrics and reports out.

A job points the agent at thousands of images listed in a manifest and compares what it says
with human opinion when that is known. This package holds what needs no database or queue, so
it can be tested on plain files and reused by the CLI, the workers and offline analysis (a job's
life, stored, is :mod:`agentic_iqa.runtime.lifecycle`):

- :mod:`.manifest` streams a CSV / JSONL / image-folder manifest as checked items and bad rows;
- :mod:`.metrics` computes SRCC, PLCC (raw and after a logistic fit), KRCC with bootstrap
  intervals, and MCQ accuracy;
- :mod:`.report` turns exported per-item rows into a report (text or self-contained HTML);
- :mod:`.export` writes those rows to CSV, JSONL or Parquet as a stream.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The re-exports load on first use (PEP 562): ``from agentic_iqa.jobs import srcc`` still works,
# but importing a submodule (``agentic_iqa.jobs.export`` for an export) no longer drags
# in scipy and numpy through ``.metrics``, nor ``.report`` and ``.export``.
_EXPORTS = {
    "ROW_COLUMNS": "export",
    "TOOL_PREFIX": "export",
    "export_columns": "export",
    "tool_column": "export",
    "write_rows": "export",
    "ManifestError": "manifest",
    "ManifestFormatError": "manifest",
    "ManifestItem": "manifest",
    "count_rows": "manifest",
    "read_manifest": "manifest",
    "LogisticFit": "metrics",
    "answer_letter": "metrics",
    "bootstrap_ci": "metrics",
    "correlation_report": "metrics",
    "krcc": "metrics",
    "mcq_accuracy": "metrics",
    "plcc": "metrics",
    "plcc_after_logistic": "metrics",
    "srcc": "metrics",
    "build_report": "report",
    "failure_reason": "report",
    "render_html": "report",
    "render_text": "report",
}

if TYPE_CHECKING:
    from .export import ROW_COLUMNS, TOOL_PREFIX, export_columns, tool_column, write_rows
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
