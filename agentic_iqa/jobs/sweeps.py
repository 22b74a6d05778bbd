"""A job's headline figure, and a sweep's jobs as one table: models down, datasets across.

``eval list`` shows one figure per job (SRCC and PLCC against the MOS, or MCQ accuracy) and
``eval compare --group`` puts a sweep's jobs (``eval submit --model A --model B --dataset X
--dataset Y``) in one grid.  Both read a job's report (:func:`.report.build_report`, without
bootstrap intervals: a listing wants the number, the report gives its interval).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..redact import redact


def headline(report: Mapping[str, Any], tools: Sequence[str] | None = None) -> dict[str, Any]:
    """The figure a job is known by: ``kind`` "correlation" (``srcc``, ``plcc``, ``n``) for
    scores against MOS (a metric job: its first tool's), "accuracy" (``accuracy``, ``n``) for
    multiple-choice questions, or None with nothing to measure yet."""
    mcq = report.get("mcq") or {}
    if mcq.get("accuracy") is not None:
        return {"kind": "accuracy", "accuracy": mcq["accuracy"], "n": mcq.get("n", 0)}
    entry: Mapping[str, Any] | None = report.get("agent")
    if report.get("kind") == "metric":
        by_tool = {tool["tool"]: tool for tool in report.get("tools") or ()}
        order = [name for name in (tools or ()) if name in by_tool] or sorted(by_tool)
        entry = by_tool[order[0]] if order else None
    if entry and entry.get("srcc") is not None:
        return {"kind": "correlation", "srcc": entry["srcc"], "plcc": entry.get("plcc"),
                "n": entry.get("n", 0)}
    return {"kind": None, "n": 0}


def figure_text(figure: Mapping[str, Any]) -> str:
    """``SRCC 0.812 / PLCC 0.790``, ``acc 0.750`` or ``-``."""
    if figure.get("kind") == "accuracy":
        return f"acc {figure['accuracy']:.3f}"
    if figure.get("kind") == "correlation":
        plcc = figure.get("plcc")
        return f"SRCC {figure['srcc']:.3f} / PLCC " + ("-" if plcc is None else f"{plcc:.3f}")
    return "-"


def model_label(job: Mapping[str, Any]) -> str:
    """``backend/model`` of a job as a list or table row names it (a metric job: its tools)."""
    if job.get("tools"):
        return "tools/" + "+".join(job["tools"])
    backend, model = str(job.get("backend") or "-"), str(job.get("model") or "-")
    return backend if model in ("-", backend) else f"{backend}/{model}"


def dataset_label(job: Mapping[str, Any]) -> str:
    """``livec/all`` for a public dataset, else the manifest's file name."""
    dataset = job.get("dataset")
    if dataset:
        return f"{dataset.get('name')}/{dataset.get('split')}"
    manifest = str(job.get("manifest") or "-")
    return manifest.rstrip("/").rsplit("/", 1)[-1]


def group_table(group: str, cells: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]
                ) -> dict[str, Any]:
    """One table of a sweep from (job description, headline) pairs: a row per model, a column
    per dataset, a cell per job (two jobs in one cell: the later one, and a warning)."""
    rows: list[str] = []
    columns: list[str] = []
    table: dict[str, dict[str, dict[str, Any]]] = {}
    warnings: list[str] = []
    for about, figure in cells:
        row, column = model_label(about), dataset_label(about)
        rows += [row] if row not in rows else []
        columns += [column] if column not in columns else []
        if column in table.get(row, {}):
            warnings.append(f"{row} on {column}: more than one job; showing "
                            f"{str(about.get('id'))[:8]}")
        table.setdefault(row, {})[column] = {
            "job": about.get("id"), "name": about.get("name"), "status": about.get("status"),
            **figure}
    return {"group": group, "rows": rows, "columns": columns, "cells": table,
            "warnings": warnings}


def aligned(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, whatever the terminal's width: a listing piped to
    a file or grep keeps one job per line."""
    widths = [max(len(line[index]) for line in [header, *lines]) for index in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            .rstrip() for line in [header, *lines]]


def render_group_text(document: Mapping[str, Any]) -> str:
    """The sweep's table as text: models down, datasets across, SRCC/PLCC or accuracy."""
    columns = list(document["columns"])
    lines = [[row, *(_cell_text(document["cells"][row].get(column)) for column in columns)]
             for row in document["rows"]]
    text = [f"group {document['group']}: {sum(len(v) for v in document['cells'].values())} "
            "jobs", *aligned(["model", *columns], lines)]
    text += [f"warning: {warning}" for warning in document.get("warnings") or ()]
    return redact("\n".join(text)) or ""


def _cell_text(cell: Mapping[str, Any] | None) -> str:
    if cell is None:
        return "(no job)"
    figure = figure_text(cell)
    return figure if cell.get("status") == "done" else f"{figure} ({cell.get('status')})"


__all__ = ["aligned", "dataset_label", "figure_text", "group_table", "headline", "model_label",
           "render_group_text"]
