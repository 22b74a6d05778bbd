"""A job's headline figures, and a sweep's jobs as one table: models down, datasets across.

``eval list`` shows one figure per line of a job (SRCC and PLCC against the MOS, or MCQ
accuracy): the agent's, or each tool's of a metric job, one row per (job, tool), so a two-tool
job is two rows and neither hides behind the other.  ``eval compare --group`` puts a sweep's
jobs (``eval submit --model A --model B --dataset X --dataset Y``) in one grid, a row per model
or tool.  Both read a job's report (:func:`.report.build_report`; without bootstrap intervals
for a listing, with them for a paper table), whose tools are on their own scores,
sign-corrected (:data:`.own_scores.CONVENTION`).
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .own_scores import CONVENTION_SHORT

if TYPE_CHECKING:
    from .figures import NamedFigure

_CORRELATIONS = ("srcc", "srcc_ci", "plcc", "plcc_ci", "krcc", "krcc_ci")


def headlines(
    report: Mapping[str, Any], tools: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The figures a job is known by, one per line: ``kind`` "accuracy" (``accuracy`` over every
    question run, failures wrong; ``answered_accuracy`` and the counts beside it) for
    multiple-choice questions, else "correlation" (``srcc``, ``plcc``, ``krcc`` and their
    intervals, ``n``) against MOS: the agent's, or each tool's of a metric job (``tool``, in
    ``tools``' order, on its own score sign-corrected, its [1,5] SRCC as ``srcc_normalized``),
    or ``kind`` None with nothing to measure yet."""
    mcq = report.get("mcq") or {}
    if mcq.get("accuracy") is not None:
        return [
            {
                "tool": None,
                "kind": "accuracy",
                **{
                    key: mcq.get(key)
                    for key in (
                        "accuracy",
                        "accuracy_ci",
                        "n",
                        "correct",
                        "answered",
                        "answered_accuracy",
                        "failed",
                        "no_answer",
                    )
                },
            }
        ]
    if report.get("kind") != "metric":
        return [_correlation(report.get("agent"), None)]
    by_tool = {tool["tool"]: tool for tool in report.get("tools") or ()}
    order = [name for name in (tools or ()) if name in by_tool]
    order += sorted(set(by_tool) - set(order))
    return [_correlation(by_tool[name], name) for name in order] or [
        {"tool": None, "kind": None, "n": 0}
    ]


def _correlation(entry: Mapping[str, Any] | None, tool: str | None) -> dict[str, Any]:
    if not entry or entry.get("srcc") is None:
        return {"tool": tool, "kind": None, "n": 0}
    figure = {
        "tool": tool,
        "kind": "correlation",
        "n": entry.get("n", 0),
        **{key: entry.get(key) for key in _CORRELATIONS},
    }
    if tool is not None:
        normalized, mapping = entry.get("normalized") or {}, entry.get("mapping") or {}
        figure.update(
            basis=entry.get("basis"),
            lower_is_better=entry.get("lower_is_better"),
            srcc_normalized=normalized.get("srcc"),
            plcc_normalized=normalized.get("plcc"),
            mapping_monotone=mapping.get("monotone"),
            mapping_warning=mapping.get("warning"),
        )
    return figure


def figure_text(figure: Mapping[str, Any]) -> str:
    """``SRCC 0.812 / PLCC 0.790`` (a lower-is-better tool's marked: its score was negated),
    ``acc 0.750 (15/20; 2 failed or unanswered)`` or ``-``."""
    if figure.get("kind") == "accuracy":
        wrong = (figure.get("failed") or 0) + (figure.get("no_answer") or 0)
        counts = f"{figure.get('correct')}/{figure.get('n')}" + (
            f"; {wrong} failed or unanswered, counted wrong" if wrong else ""
        )
        return f"acc {figure['accuracy']:.3f} ({counts})"
    if figure.get("kind") == "correlation":
        plcc = figure.get("plcc")
        text = f"SRCC {figure['srcc']:.3f} / PLCC " + ("-" if plcc is None else f"{plcc:.3f}")
        if figure.get("basis") == "normalized":
            return f"{text} ([1,5] score)"
        return f"{text} (lower is better: negated)" if figure.get("lower_is_better") else text
    return "-"


def model_label(job: Mapping[str, Any], tool: str | None = None) -> str:
    """``backend/model`` of a job as a list or table row names it; a metric job's row is one
    of its tools (``tools/BRISQUE``), or all of them without ``tool``."""
    if tool is not None:
        return f"tools/{tool}"
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


def group_table(
    group: str, cells: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]
) -> dict[str, Any]:
    """One table of a sweep from (job description, figure) pairs, one pair per line of a job
    (:func:`headlines`): a row per model or tool, a column per dataset, a cell per (job, tool)
    (two in one cell: the later one, and a warning)."""
    rows: list[str] = []
    columns: list[str] = []
    table: dict[str, dict[str, dict[str, Any]]] = {}
    warnings: list[str] = []
    for about, figure in cells:
        row, column = model_label(about, figure.get("tool")), dataset_label(about)
        rows += [row] if row not in rows else []
        columns += [column] if column not in columns else []
        if column in table.get(row, {}):
            warnings.append(
                f"{row} on {column}: more than one job; showing {str(about.get('id'))[:8]}"
            )
        table.setdefault(row, {})[column] = {
            "job": about.get("id"),
            "name": about.get("name"),
            "status": about.get("status"),
            **figure,
        }
    return {"group": group, "rows": rows, "columns": columns, "cells": table, "warnings": warnings}


def aligned(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, whatever the terminal's width: a listing piped to
    a file or grep keeps one job per line."""
    widths = [max(len(line[index]) for line in [header, *lines]) for index in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *lines]
    ]


def _has_tools(document: Mapping[str, Any]) -> bool:
    return any(cell.get("tool") for cells in document["cells"].values() for cell in cells.values())


def render_group_text(document: Mapping[str, Any]) -> str:
    """The sweep's table as text: models (and tools) down, datasets across, SRCC/PLCC or
    accuracy."""
    columns = list(document["columns"])
    lines = [
        [row, *(_cell_text(document["cells"][row].get(column)) for column in columns)]
        for row in document["rows"]
    ]
    text = [
        f"group {document['group']}: {_job_count(document)} jobs",
        *aligned(["model", *columns], lines),
    ]
    if _has_tools(document):
        text.append(f"note: {CONVENTION_SHORT}")
    text += [f"warning: {warning}" for warning in document.get("warnings") or ()]
    return redact("\n".join(text)) or ""


def _job_count(document: Mapping[str, Any]) -> int:
    """Jobs, not cells: a two-tool job fills two rows."""
    return len({cell.get("job") for cells in document["cells"].values() for cell in cells.values()})


def _cell_text(cell: Mapping[str, Any] | None) -> str:
    if cell is None:
        return "(no job)"
    figure = figure_text(cell)
    return figure if cell.get("status") == "done" else f"{figure} ({cell.get('status')})"


def render_group_html(
    document: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    figures: Sequence[NamedFigure] | None = None,
) -> Path:
    """The sweep's table as one self-contained page, every name escaped, with its figures
    inline (``figures``, or :func:`.figures.group_figures`).  A cell's figures wrap between
    words, never inside a number."""
    from .figure_files import html_figure
    from .figures import group_figures
    from .report_html import STYLE, render_header, render_label_cell

    title = f"Group {document['group']}"
    columns = list(document["columns"])
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(redact(title) or '')}</title><style>{STYLE}</style></head>"
        f"<body><h1>{html.escape(redact(title) or '')}: {_job_count(document)} jobs</h1>",
        '<div class="scroll"><table id="group">' + render_header("model", *columns),
    ]
    for row in document["rows"]:
        parts.append(
            "<tr>"
            + render_label_cell(row)
            + "".join(
                '<td class="text">'
                f"{html.escape(redact(_cell_text(document['cells'][row].get(column))) or '')}"
                "</td>"
                for column in columns
            )
            + "</tr>"
        )
    parts.append("</table></div>")
    parts += [
        html_figure(named)
        for named in (figures if figures is not None else group_figures(document))
    ]
    if _has_tools(document):
        parts.append(f'<p class="note">Note: {html.escape(CONVENTION_SHORT)}.</p>')
    parts += [
        f'<p class="note">warning: {html.escape(redact(text) or "")}</p>'
        for text in document.get("warnings") or ()
    ]
    parts.append("</body></html>\n")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target


__all__ = [
    "aligned",
    "dataset_label",
    "figure_text",
    "group_table",
    "headlines",
    "model_label",
    "render_group_html",
    "render_group_text",
]
