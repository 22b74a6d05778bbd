"""Render a comparison of jobs as one self-contained HTML page."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .compare_text import describe_method, describe_secondary, format_money, format_seconds
from .in_sample import FITTED_IMAGES as FITTED_IMAGES
from .own_scores import CONVENTION
from .pairing import METRICS
from .report_html import STYLE, render_cell, render_ci_cell, render_header, render_label_cell

if TYPE_CHECKING:
    from .figures import NamedFigure


def render_html(
    doc: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    figures: Sequence[NamedFigure] | None = None,
) -> Path:
    """Write the comparison as one self-contained page (inline CSS, the paired differences as
    an inline SVG figure: ``figures``, or :func:`.figures.comparison_figures`), every text
    escaped, each line by its name (:func:`.names.line_names`; its id on hover).  It is read in a
    1280-pixel window: agreement and differences are two tables narrow enough to fit, numbers
    and intervals never wrap, a row label keeps a few words' width; a wider table (many
    jobs' names) scrolls in its own box, and figures shrink to the page."""
    from .figure_files import html_figure
    from .figures import comparison_figures
    from .names import with_line_names

    doc = with_line_names(doc)
    title = "Comparison of evaluation jobs"
    tools = any(line.get("tool") for line in doc["lines"])
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}</style></head><body><h1>{title}</h1>",
        f"<p>Baseline: {html.escape(redact(doc['baseline_name']) or '-')} "
        "(the first job given).</p>",
        '<h2>Jobs</h2><div class="scroll"><table id="jobs">'
        + render_header(
            "job",
            "name",
            "mode",
            "backend",
            "model",
            "items",
            "done",
            "with MOS",
            "with truth",
            "shared with baseline",
            "wall time per item",
            "cost per item",
        ),
    ]
    for job in doc["jobs"]:
        job_id, name = str(job["id"] or "-"), job["name"] or "-"
        shown = (
            name if job["shown_as"] in (name, job_id[:8]) else f"{job['shown_as']} (named {name})"
        )
        parts.append(
            f'<tr><td title="{html.escape(redact(job_id) or "")}">'
            f"{html.escape(redact(job_id[:8]) or '')}</td>"
            + render_label_cell(shown)
            + "".join(
                render_cell(redact(str(job[key] or "-")), text=True)
                for key in ("mode", "backend", "model")
            )
            + "".join(
                render_cell(job[key])
                for key in ("items", "done", "with_mos", "with_truth", "shared_with_baseline")
            )
            + render_cell(format_seconds(job["wall_time_per_item_s"]))
            + render_cell(format_money(job["cost_per_item_usd"]))
            + "</tr>"
        )
    parts.append(
        '</table></div><h2>Agreement with MOS</h2><div class="scroll">'
        '<table id="lines">'
        + render_header(
            "line",
            "n",
            "SRCC",
            "95% CI",
            "PLCC",
            "95% CI",
            "KRCC",
            "95% CI",
            *(("SRCC [1,5]", "better") if tools else ()),
        )
    )
    for line in doc["lines"]:
        entry = line["mos"]
        css = ' class="agent"' if line["baseline"] else ""
        value, better = describe_secondary(line)
        parts.append(
            f"<tr{css}>{render_label_cell(line['name'], line['label'])}{render_cell(entry['n'])}"
            + "".join(render_cell(entry[m]) + render_ci_cell(entry[f"{m}_ci"]) for m in METRICS)
            + (render_cell(value) + render_cell(better, text=True) if tools else "")
            + "</tr>"
        )
    parts.append(
        '</table></div><h2>Difference from the baseline</h2><div class="scroll">'
        '<table id="differences">'
        + render_header("line", "shared", "ΔSRCC", "95% CI", "ΔPLCC", "95% CI", "ΔKRCC", "95% CI")
    )
    for line in doc["lines"]:
        diff = line["difference"] or {}
        css = ' class="agent"' if line["baseline"] else ""
        parts.append(
            f"<tr{css}>{render_label_cell(line['name'], line['label'])}"
            + render_cell("baseline" if line["baseline"] else diff.get("n"))
            + "".join(
                render_cell(diff.get(m)) + render_ci_cell(diff.get(f"{m}_ci")) for m in METRICS
            )
            + "</tr>"
        )
    parts.append("</table></div>")
    parts += [
        html_figure(named)
        for named in (figures if figures is not None else comparison_figures(doc))
    ]
    notes = [
        f"{line['name']}: "
        + "; ".join(
            reason
            for reason in (line["mos"]["reason"], (line["difference"] or {}).get("reason"))
            if reason
        )
        for line in doc["lines"]
        if line["mos"]["reason"] or (line["difference"] or {}).get("reason")
    ]
    notes += [
        f"{line['name']}: {line['mapping']['warning']}"
        for line in doc["lines"]
        if (line.get("mapping") or {}).get("warning")
    ]
    if tools:
        notes.append(f"Tools: {CONVENTION}.")
    if any(line["mcq"] for line in doc["lines"]):
        parts.append(
            '<h2>Multiple choice</h2><div class="scroll"><table id="mcq">'
            + render_header(
                "line",
                "questions",
                "accuracy",
                "failed",
                "no answer",
                "answered-only accuracy",
                "shared",
                "Δaccuracy",
                "95% CI",
            )
        )
        for line in doc["lines"]:
            if line["mcq"] is None:
                continue
            diff = line["mcq_difference"] or {}
            if line["mcq"].get("reason"):
                parts.append(
                    f"<tr>{render_label_cell(line['name'], line['label'])}"
                    f'<td class="text" colspan="8">'
                    f"{html.escape(line['mcq']['reason'])}</td></tr>"
                )
                continue
            mcq = line["mcq"]
            parts.append(
                f"<tr>{render_label_cell(line['name'], line['label'])}"
                f"{render_cell(mcq['n'])}{render_cell(mcq['accuracy'])}{render_cell(mcq.get('failed'))}"
                f"{render_cell(mcq.get('no_answer'))}{render_cell(mcq.get('answered_accuracy'))}"
                f"{render_cell(diff.get('n'))}{render_cell(diff.get('accuracy'))}"
                f"{render_ci_cell(diff.get('accuracy_ci'))}</tr>"
            )
        parts.append("</table></div>")
    parts += [
        f'<p class="note">{html.escape(redact(note) or "")}</p>'
        for note in [*notes, describe_method(doc)]
    ]
    if doc["warnings"]:
        parts.append(
            '<h2>Warnings</h2><ul id="warnings">'
            + "".join(f"<li>{html.escape(redact(text) or '')}</li>" for text in doc["warnings"])
            + "</ul>"
        )
    parts.append("</body></html>\n")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target
