"""Render a job's report as one self-contained HTML page, and the cells other pages share.

The page has inline CSS and its figures as inline SVG (:mod:`.figures`), so it can be mailed
around; every value is HTML-escaped.  The comparison's and a sweep's pages build their tables
from the same cells and style (:data:`STYLE`, :func:`render_cell`, :func:`render_header`).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .report import WITHHELD
from .report_text import describe_fit, format_ci, format_value, job_lines, mcq_line, scored_label

if TYPE_CHECKING:
    from .columns import JobColumns
    from .figures import NamedFigure
    from .item_pages import ItemPages


#: The pages' style.  Numbers and intervals never wrap (a line break inside "[0.451, 0.726]"
#: makes two numbers of one); text wraps between words (and after a hyphen), never inside a
#: word ("5-paramet er"): only a long token (a path, a URL, a long name: :func:`text_html`
#: marks it ``span.long``) may break anywhere; a text cell keeps a few words' width (a row
#: label is never squeezed to a letter a line); headers wrap between words.  In a window under
#: 1000 pixels the cells and their padding shrink, so the tables of a report and a comparison
#: fit an 800-pixel window; a table wider still (many long names) scrolls in its own box.
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em;
       max-width: 1120px; color: #222; hyphens: manual; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
td { white-space: nowrap; }
th { background: #f2f2f2; white-space: normal; overflow-wrap: normal; }
td.text, th.text { text-align: left; white-space: normal; overflow-wrap: break-word;
                   min-width: 5em; }
td.label { min-width: 11em; }
td.ci { white-space: nowrap; }
.long { overflow-wrap: anywhere; }
tr.agent td { font-weight: bold; background: #f8f8ff; }
.note { color: #666; font-size: 0.9em; }
.scroll { max-width: 100%; overflow-x: auto; }
p, li, h1, figcaption { overflow-wrap: break-word; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
@media (max-width: 1000px) {
  body { margin: 1em auto; padding: 0 0.5em; }
  table { font-size: 0.8em; }
  th, td { padding: 0.2em 0.25em; }
  td.text, th.text { min-width: 3.5em; }
  td.label { min-width: 6em; }
}
"""

#: A token (no white space) longer than this may break anywhere (``span.long``): a path, a
#: URL, a digest, a long generated name; shorter ones are words and never break inside.
LONG_TOKEN = 24


def text_html(text: str) -> str:
    """Return ``text`` escaped, each token longer than :data:`LONG_TOKEN` characters in a
    ``span.long`` (it may break anywhere; every other word breaks only between words)."""
    return re.sub(
        rf"\S{{{LONG_TOKEN + 1},}}",
        lambda found: f'<span class="long">{found.group(0)}</span>',
        html.escape(text),
    )


def render_cell(value: Any, digits: int = 3, *, text: bool = False) -> str:
    """Return a value as an escaped table cell (``text``: left-aligned, wrapping)."""
    if text:
        return f'<td class="text">{text_html(format_value(value, digits))}</td>'
    return f"<td>{html.escape(format_value(value, digits))}</td>"


def render_ci_cell(interval: list[float] | None) -> str:
    """A confidence interval, kept on one line (``td.ci``)."""
    return f'<td class="ci">{html.escape(format_ci(interval))}</td>'


def render_label_cell(value: Any, title: str | None = None) -> str:
    """A row's name (``td.label``: a few words wide at least); ``title``: what it stands for,
    shown on hover (the job id behind a name)."""
    hover = f' title="{html.escape(redact(title) or "")}"' if title else ""
    return f'<td class="text label"{hover}>{text_html(redact(format_value(value)) or "")}</td>'


def render_header(*names: str) -> str:
    """Return a table's header row: the first name a text column, the rest numbers."""
    first, *rest = names
    cells = f'<th class="text">{html.escape(first)}</th>' + "".join(
        f"<th>{html.escape(name)}</th>" for name in rest
    )
    return f"<tr>{cells}</tr>"


def _correlation_rows(label: str, entry: Mapping[str, Any], css: str = "") -> str:
    return (
        f'<tr class="{css}">{render_cell(label, text=True)}{render_cell(entry["n"])}'
        f"{render_cell(entry['srcc'])}{render_ci_cell(entry['srcc_ci'])}"
        f"{render_cell(entry['plcc'])}{render_ci_cell(entry['plcc_ci'])}"
        f"{render_cell(entry['plcc_logistic'])}{render_cell(describe_fit(entry), text=True)}"
        f"{render_cell(entry['krcc'])}{render_ci_cell(entry['krcc_ci'])}</tr>"
    )


def _direction_text(tool: Mapping[str, Any]) -> str:
    """ "lower is better, negated", "higher is better", or "[1,5] score" without a raw one."""
    if tool.get("basis") == "normalized":
        return "[1,5] score: no raw score in the rows"
    text = str(tool.get("direction") or "direction unknown")
    return f"{text}, negated" if tool.get("lower_is_better") else text


def _normalized_html(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tools' [1,5] figures (secondary), the raw score's with the tool's own sign, and a
    warning per tool whose mapping is not monotone over the job's raw scores."""
    parts = [
        '<table id="normalized">'
        + render_header(
            "tool",
            "scored",
            "SRCC [1,5]",
            "PLCC [1,5]",
            "KRCC [1,5]",
            "[1,5] mapping monotone on this job's raw scores",
            "SRCC, tool's own sign",
            "PLCC, tool's own sign",
        )
    ]
    for tool in tools:
        normalized, mapping = tool.get("normalized") or {}, tool.get("mapping") or {}
        verdicts: dict[object, str] = {
            True: "yes",
            False: f"no: {mapping.get('items', 0)} item(s) ranked the wrong way",
        }
        monotone = verdicts.get(mapping.get("monotone"), "-")
        parts.append(
            f"<tr>{render_cell(tool['tool'], text=True)}{render_cell(tool['scored'])}"
            f"{render_cell(normalized.get('srcc'))}{render_cell(normalized.get('plcc'))}"
            f"{render_cell(normalized.get('krcc'))}{render_cell(monotone, text=True)}"
            f"{render_cell(tool.get('srcc_raw'))}{render_cell(tool.get('plcc_raw'))}</tr>"
        )
    parts.append("</table>")
    parts += [
        f'<p class="note warning">{html.escape(tool["mapping"]["warning"])}</p>'
        for tool in tools
        if (tool.get("mapping") or {}).get("warning")
    ]
    parts.append(
        '<p class="note">[1,5]: the same on the score mapped by the paper\'s logistic '
        "(Table 5), secondary; a mapping that is not monotone over the photos' raw "
        "scores ranks some of them the wrong way. Tool's own sign: the raw score's "
        "correlation as pyiqa prints it.</p>"
    )
    return "".join(parts)


def _interval_note(report: Mapping[str, Any]) -> str:
    settings = report["bootstrap"]
    return (
        f"{settings['confidence']:.0%} intervals: percentile bootstrap over "
        f"{settings['resamples']} resamples of the pairs (seed {settings['seed']}); "
        "PLCC logistic: PLCC after a monotone fit of scores to MOS: the 5-parameter "
        "logistic, bounded so that it rises (or falls) with the scores everywhere, or, "
        "when that fit fails or there are fewer than 10 points, a 4- or 3-parameter "
        "logistic (at least 8 or 6 points), else a straight line (the fit column)."
    )


def _vlm_html(vlm: Mapping[str, Any]) -> str:
    from ..vlm.usage import format_cost

    unpriced = (
        f'<p class="note">No price for {html.escape(", ".join(vlm["unpriced_models"]))}'
        " in the price table: cost unknown.</p>"
        if vlm.get("unpriced_models")
        else ""
    )
    follow_ups = vlm.get("follow_ups") or {}
    asked = (
        f'<p class="note">{int(follow_ups["calls"])} of the calls were follow-up questions (a '
        "reply naming no option, asked about once), cost "
        f"{html.escape(format_cost(follow_ups.get('cost_usd')))}.</p>"
        if follow_ups.get("calls")
        else ""
    )
    return (
        '<h2>VLM usage</h2><table id="vlm">'
        + render_header(
            "calls",
            "cache hits",
            "input tokens",
            "cached input tokens",
            "output tokens",
            "cost (USD)",
            "cost per item",
        )
        + f"<tr>{render_cell(vlm['calls'])}{render_cell(vlm['cache_hits'])}"
        f"{render_cell(vlm['input_tokens'])}"
        f"{render_cell(vlm['cached_tokens'])}{render_cell(vlm['output_tokens'])}"
        f"{render_cell(format_cost(vlm['cost_usd']), text=True)}"
        f"{render_cell(format_cost(vlm.get('cost_per_item_usd')), text=True)}</tr></table>"
        + unpriced
        + asked
    )


def report_title(report: Mapping[str, Any]) -> str:
    """ "Evaluation job report: NAME (1a2b3c4d)", or the generic title without a ``job``."""
    job = report.get("job")
    if not job:
        return "Evaluation job report"
    return f"Evaluation job report: {redact(str(job.get('name')))} ({str(job.get('id'))[:8]})"


def render_html(
    report: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]] | JobColumns,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    figures: Sequence[NamedFigure] | None = None,
    items: ItemPages | None = None,
) -> Path:
    """Write one self-contained HTML page (inline CSS, figures as inline SVG) and return its
    path.

    ``rows`` supply the scatter plots' points (:func:`.figures.report_figures`, unless the
    ``figures`` are given: those ``eval report --figures`` writes); everything else comes
    from ``report``.  The title and the header name the job (``report["job"]``: id,
    name, dates, query, backend, model) when the report has one; every value is HTML-escaped.
    ``items``: the items shown one by one, with their traces (:mod:`.item_pages_html`).
    """
    from .breakdown import html_tables
    from .figure_files import html_figure
    from .figures import report_figures
    from .item_pages_html import ITEMS_STYLE, items_html

    title = title or report_title(report)
    items_style = ITEMS_STYLE if items is not None else ""
    drawn = {
        named.name: named
        for named in (
            figures
            if figures is not None
            else report_figures(report, rows, scored=scored_label(report))
        )
    }
    counts = report["counts"]
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}{items_style}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if report.get("job"):
        parts.append(
            '<table id="job">'
            + "".join(
                f'<tr><th class="text">{html.escape(label)}</th>'
                f"{render_cell(value, text=True)}</tr>"
                for label, value in job_lines(report["job"])
            )
            + "</table>"
        )
    parts += ["<h2>Items</h2><table>", render_header("status", "items")]
    for status, n in counts["by_status"].items():
        parts.append(f"<tr>{render_cell(status, text=True)}{render_cell(n)}</tr>")
    parts.append(
        f"<tr>{render_cell('total', text=True)}{render_cell(counts['total'])}</tr></table>"
    )

    agent = report.get("agent")
    parts.append("<h2>Agreement with human opinion (MOS)</h2>")
    if agent is None:
        parts.append(
            '<p class="note">A metric job: no agent ran. Each tool\'s own score per '
            "item against MOS, sign-corrected so that higher is better (a "
            "lower-is-better tool's score is negated).</p>"
        )
        parts.append('<table id="correlations">')
        parts.append(
            render_header(
                "tool",
                "n",
                "SRCC",
                "95% CI",
                "PLCC",
                "95% CI",
                "PLCC logistic",
                "fit",
                "KRCC",
                "95% CI",
            )
        )
        for tool in report["tools"]:
            parts.append(
                _correlation_rows(f"{tool['tool']} ({_direction_text(tool)})", tool, "tool")
            )
        parts.append("</table>")
        parts.append(f'<p class="note">{_interval_note(report)}</p>')
        parts.append(_normalized_html(report["tools"]))
        parts += [
            html_figure(named) for name, named in drawn.items() if name.startswith("scatter-tool-")
        ]
    else:
        if agent["reason"]:
            parts.append(f'<p class="note">{html.escape(agent["reason"])}</p>')
        parts.append('<table id="correlations">')
        parts.append(
            render_header(
                "scores",
                "n",
                "SRCC",
                "95% CI",
                "PLCC",
                "95% CI",
                "PLCC logistic",
                "fit",
                "KRCC",
                "95% CI",
            )
        )
        parts.append(_correlation_rows(scored_label(report).lower(), agent, "agent"))
        parts.append("</table>")
        if agent.get("logistic_note"):
            parts.append(f'<p class="note">{html.escape(agent["logistic_note"])}</p>')
        parts.append(f'<p class="note">{_interval_note(report)}</p>')
        if "scatter-agent" in drawn:
            parts.append(html_figure(drawn["scatter-agent"]))
        else:
            parts.append('<p class="note">No done item has both a predicted score and a MOS.</p>')

    if report["tools"] and agent is not None:
        parts.append(
            '<h2>Per tool</h2><p class="note">Each tool\'s own score (mean per '
            "item), sign-corrected so that higher is better, against MOS, on the items "
            "where the tool gave a score; the agent's SRCC on the same items is beside "
            "it.</p>"
        )
        parts.append('<table id="tools">')
        parts.append(
            render_header(
                "tool",
                "better",
                "scored",
                "n with MOS",
                "SRCC",
                "95% CI",
                "PLCC",
                "PLCC logistic",
                "fit",
                "KRCC",
                "agent SRCC, same items",
            )
        )
        for tool in report["tools"]:
            parts.append(
                f'<tr class="tool">{render_cell(tool["tool"], text=True)}'
                f"{render_cell(_direction_text(tool), text=True)}{render_cell(tool['scored'])}"
                f"{render_cell(tool['n'])}{render_cell(tool['srcc'])}{render_ci_cell(tool['srcc_ci'])}"
                f"{render_cell(tool['plcc'])}{render_cell(tool['plcc_logistic'])}"
                f"{render_cell(describe_fit(tool), text=True)}{render_cell(tool['krcc'])}"
                f"{render_cell(tool['agent_srcc_same_items'])}</tr>"
            )
        parts.append("</table>")
        parts.append(_normalized_html(report["tools"]))

    if report.get("breakdown"):
        parts.append(
            "<h2>By distortion</h2>"
            + html_tables(report["breakdown"], {"agent": scored_label(report).lower()})
        )
        parts += [
            html_figure(named) for name, named in drawn.items() if name.startswith("breakdown-")
        ]
    mcq = report.get("mcq")
    if mcq and mcq.get("reason"):
        parts.append(
            f'<h2>Multiple choice</h2><p class="note" id="mcq">{html.escape(mcq_line(mcq))}</p>'
        )
    elif mcq:
        parts.append('<h2>Multiple choice</h2><table id="mcq">')
        parts.append(
            render_header(
                "accuracy",
                "95% CI",
                "correct",
                "questions",
                "failed",
                "no answer",
                "answered-only accuracy",
                "answered",
                "not run",
            )
        )
        parts.append(
            f"<tr>{render_cell(mcq['accuracy'])}{render_ci_cell(mcq.get('accuracy_ci'))}"
            f"{render_cell(mcq['correct'])}{render_cell(mcq['n'])}{render_cell(mcq.get('failed'))}"
            f"{render_cell(mcq.get('no_answer'))}{render_cell(mcq.get('answered_accuracy'))}"
            f"{render_cell(mcq.get('answered'))}{render_cell(mcq.get('not_run'))}</tr></table>"
        )
        parts.append(
            '<p class="note">Accuracy is over every question run: an item that failed, '
            'or finished without a letter ("Unable to determine", an unparseable '
            "reply), counts as wrong, as lm-evaluation-harness and VLMEvalKit count "
            "it; answered-only accuracy leaves those out. Questions not run (queued, or "
            "the job cancelled first) are not counted.</p>"
        )
        if mcq.get("withheld"):
            parts.append(
                f'<p class="note">{mcq["withheld"]} question(s) without a correct '
                f"answer ({WITHHELD}) are not counted.</p>"
            )
        if mcq.get("by_type"):
            parts.append(
                '<table id="mcq-types">'
                + render_header(
                    "question type",
                    "accuracy",
                    "correct",
                    "questions",
                    "failed or no answer",
                    "answered-only accuracy",
                )
            )
            parts.extend(
                f"<tr>{render_cell(e['type'], text=True)}{render_cell(e['accuracy'])}"
                f"{render_cell(e['correct'])}{render_cell(e['n'])}{render_cell(e.get('not_answered'))}"
                f"{render_cell(e.get('answered_accuracy'))}</tr>"
                for e in mcq["by_type"]
            )
            parts.append("</table>")

    failures = report["failures"]
    if failures["total"]:
        parts.append(
            f'<h2>Failures</h2><p class="note">{failures["total"]} failed item(s), '
            f"{failures['distinct_reasons']} distinct reason(s); the most common:</p>"
        )
        parts.append('<table id="failures">')
        parts.append(render_header("reason", "items", "example item", "example error"))
        for entry in failures["top"]:
            parts.append(
                f"<tr>{render_cell(entry['reason'], text=True)}{render_cell(entry['count'])}"
                f"{render_cell(entry['example_item'], text=True)}"
                f"{render_cell(entry['example_error'], text=True)}</tr>"
            )
        parts.append("</table>")
    if report.get("vlm"):
        parts.append(_vlm_html(report["vlm"]))
    if items is not None:
        parts.append(items_html(items))
    parts.append("</body></html>\n")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # --html out/report.html on a fresh machine
    target.write_text("\n".join(parts), encoding="utf-8")
    return target
