"""A comparison, or a sweep's table, as a table a paper can print: LaTeX, Markdown or CSV.

``eval compare JOB JOB --format latex`` and ``eval compare --group NAME --format markdown``
write SRCC, PLCC and KRCC (and MCQ accuracy where the jobs answered questions) with their
bootstrap intervals, one row per (job, tool), the best value of each column in bold, and a
caption that says n, the convention the tools are scored by (:data:`.own_scores.CONVENTION`)
and how the intervals were drawn, so the table can be quoted without the terminal beside it.
Names come from users and datasets: LaTeX escapes its special characters, Markdown its
markup, and a CSV cell never starts a formula (:func:`.export.neutralise`).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..redact import redact
from .export import neutralise

TableFormat = Literal["latex", "markdown", "csv"]
TABLE_FORMATS: tuple[TableFormat, ...] = ("latex", "markdown", "csv")
#: Metrics in column order, and their headings.
METRIC_NAMES: dict[str, str] = {"srcc": "SRCC", "plcc": "PLCC", "krcc": "KRCC", "accuracy": "Acc."}
#: Digits shown; "best" is decided on the values as shown, so a tie in print is a tie in bold.
DIGITS = 3


@dataclass
class Entry:
    """One cell of the table: a (job, tool) line on one column (dataset)."""

    method: str
    column: str
    n: int | None
    values: dict[str, float | None]
    intervals: dict[str, Sequence[float] | None]
    job: str | None = None
    tool: str | None = None
    lower_is_better: bool | None = None


@dataclass
class PaperTable:
    """Rows (methods) by columns (datasets; one unnamed column for a comparison), the metrics
    shown, and the caption."""

    entries: list[Entry]
    methods: list[str]
    columns: list[str]
    metrics: list[str]
    caption: str
    best: set[tuple[str, str, str]] = field(default_factory=set)
    #: What a reader must know of the figures (in-sample items, a job still running), said
    #: with the table in every format, as the report and the page say it.
    warnings: list[str] = field(default_factory=list)

    def entry(self, method: str, column: str) -> Entry | None:
        return next((e for e in self.entries if e.method == method and e.column == column), None)


def _shown(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


def _mark_best(table: PaperTable) -> None:
    """(method, column, metric) of the highest value in each column and metric, ties all
    marked; only where at least two rows have a value (one row is no contest).  Every metric
    is higher-is-better: the tools' correlations are sign-corrected."""
    for column in table.columns:
        for metric in table.metrics:
            values = [
                (e.method, _shown(e.values.get(metric)))
                for e in table.entries
                if e.column == column and e.values.get(metric) is not None
            ]
            if len(values) < 2:
                continue
            top = max(value for _, value in values if value is not None)
            table.best |= {(method, column, metric) for method, value in values if value == top}


def _caption(
    entries: Sequence[Entry], metrics: Sequence[str], bootstrap: Mapping[str, Any], what: str
) -> str:
    counts = sorted({e.n for e in entries if e.n})
    n = (
        "n = "
        + (
            f"{counts[0]}"
            if len(counts) == 1
            else f"{counts[0]}-{counts[-1]} (per row: the n column)"
        )
        + " items with a score and a MOS"
    )
    shown = [METRIC_NAMES[m] for m in metrics if m != "accuracy"]
    measured = (
        [", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]]
        if shown
        else []
    )
    measured = [f"{measured[0]} against MOS"] if measured else []
    if "accuracy" in metrics:
        measured.append("MCQ accuracy (Acc.)")
    parts = [f"{what}: {'; '.join(measured)}", n]
    negated = sorted({e.tool for e in entries if e.tool and e.lower_is_better})
    if any(e.tool for e in entries):
        parts.append(
            "tools are scored on their own (raw) scores, sign-corrected so that higher "
            "is better"
            + (f" ({', '.join(negated)}: lower is better, negated)" if negated else "")
            + "; an agent or VLM on its [1, 5] score"
        )
    if "accuracy" in metrics:
        parts.append(
            "accuracy is over every question run, a failed or unanswered item counting as wrong"
        )
    resamples = bootstrap.get("resamples") or 0
    parts.append(
        f"{bootstrap.get('confidence', 0.95):.0%} CIs in brackets: percentile "
        f"bootstrap over {resamples} resamples of the items (seed "
        f"{bootstrap.get('seed', 0)})"
        if resamples
        else "no intervals (--bootstrap 0)"
    )
    parts.append("best of each column in bold")
    return "; ".join(parts) + "."


def _metrics(entries: Sequence[Entry]) -> list[str]:
    present = [m for m in METRIC_NAMES if any(e.values.get(m) is not None for e in entries)]
    return present or ["srcc", "plcc", "krcc"]


def from_comparison(doc: Mapping[str, Any]) -> PaperTable:
    """The table of :func:`.compare.build_comparison`'s document: one row per line (a job, a
    tool of a metric job), named as the page and figures name it (``name``, with ``--label``),
    else by the job's name and the line's source (its short id where names repeat)."""
    jobs = {str(job["id"]): job for job in doc["jobs"]}
    names = [job.get("name") for job in doc["jobs"]]
    unique = len(set(names)) == len(names) and all(names)
    entries = []
    for line in doc["lines"]:
        job = jobs.get(str(line["job"]), {})
        who = str(job.get("name")) if unique else str(line["job"])[:8]
        mos, mcq = line["mos"], line.get("mcq") or {}
        values = {m: mos.get(m) for m in ("srcc", "plcc", "krcc")}
        intervals = {m: mos.get(f"{m}_ci") for m in ("srcc", "plcc", "krcc")}
        values["accuracy"] = mcq.get("accuracy")
        intervals["accuracy"] = mcq.get("accuracy_ci")
        entries.append(
            Entry(
                line.get("name") or f"{who} {line['source']}",
                "",
                mos.get("n") or mcq.get("n"),
                values,
                intervals,
                str(line["job"]),
                line.get("tool"),
                line.get("lower_is_better"),
            )
        )
    metrics = _metrics(entries)
    table = PaperTable(
        entries,
        [e.method for e in entries],
        [""],
        metrics,
        _caption(entries, metrics, doc.get("bootstrap") or {}, "Comparison"),
        warnings=[str(text) for text in doc.get("warnings") or ()],
    )
    _mark_best(table)
    return table


def from_group(doc: Mapping[str, Any], bootstrap: Mapping[str, Any]) -> PaperTable:
    """The table of a sweep (:func:`.sweeps.group_table`, figures with intervals): a row per
    model or tool, the datasets across."""
    entries = []
    for row in doc["rows"]:
        for column in doc["columns"]:
            cell = doc["cells"][row].get(column)
            if cell is None:
                continue
            values = {m: cell.get(m) for m in METRIC_NAMES}
            intervals = {m: cell.get(f"{m}_ci") for m in METRIC_NAMES}
            entries.append(
                Entry(
                    row,
                    column,
                    cell.get("n"),
                    values,
                    intervals,
                    cell.get("job"),
                    cell.get("tool"),
                    cell.get("lower_is_better"),
                )
            )
    metrics = _metrics(entries)
    table = PaperTable(
        entries,
        list(doc["rows"]),
        list(doc["columns"]),
        metrics,
        _caption(entries, metrics, bootstrap, f"Group {doc['group']}"),
        warnings=[str(text) for text in doc.get("warnings") or ()],
    )
    _mark_best(table)
    return table


# -- LaTeX ----------------------------------------------------------------------------------------

_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX prints it literally: every special character escaped, line breaks
    made spaces (a name cannot end a row or a command)."""
    return "".join(_LATEX.get(char, char) for char in " ".join(text.split()))


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.{DIGITS}f}"


def _interval(interval: Sequence[float] | None) -> str:
    return "" if not interval else f"[{interval[0]:.{DIGITS}f}, {interval[1]:.{DIGITS}f}]"


def render_latex(table: PaperTable) -> str:
    """A ``table`` environment with a ``tabular`` (no package needed): a row per method, per
    column an n and each metric, the interval beside each value in small type."""
    span = 1 + len(table.metrics)
    named = any(table.columns)
    spec = "l" + "".join("|r" + "r" * len(table.metrics) for _ in table.columns)
    lines = [
        "% written by agentic-iqa eval compare (plain LaTeX: no package needed)",
        r"\begin{table}[t]",
        r"\centering",
        r"\caption{" + latex_escape(redact(table.caption) or "") + "}",
        r"\begin{tabular}{" + spec + "}",
        r"\hline",
    ]
    if named:
        lines.append(
            " & ".join(
                [
                    "",
                    *(
                        r"\multicolumn{"
                        + str(span)
                        + "}{c}{"
                        + latex_escape(redact(column) or "")
                        + "}"
                        for column in table.columns
                    ),
                ]
            )
            + r" \\"
        )
    heads = ["$n$", *(METRIC_NAMES[m] for m in table.metrics)]
    lines += [" & ".join(["Method", *(heads * len(table.columns))]) + r" \\", r"\hline"]
    for method in table.methods:
        cells = [latex_escape(redact(method) or "")]
        for column in table.columns:
            entry = table.entry(method, column)
            cells.append("-" if entry is None or entry.n is None else str(entry.n))
            for metric in table.metrics:
                value = None if entry is None else entry.values.get(metric)
                text = _number(value)
                if (method, column, metric) in table.best:
                    text = r"\textbf{" + text + "}"
                interval = None if entry is None or value is None else entry.intervals.get(metric)
                cells.append(
                    text + (r" {\scriptsize " + _interval(interval) + "}" if interval else "")
                )
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\hline", r"\end{tabular}"]
    # Under the table, inside its float: the warning travels with the figures it is about.
    lines += [
        r"\par\smallskip{\footnotesize\textbf{Warning:} " + latex_escape(redact(text) or "") + "}"
        for text in table.warnings
    ]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


# -- Markdown -------------------------------------------------------------------------------------

#: Every ASCII punctuation character that pandoc's or GitHub's Markdown gives a meaning:
#: emphasis, code, links, HTML, cells, headings, and what pandoc turns into TeX (``$`` math,
#: ``^`` and ``~`` super- and subscripts, ``{}`` attributes, ``@`` citations, ``&`` entities).
#: A backslash before any ASCII punctuation is an escape in both, so the text shows as written.
_MARKDOWN_SPECIAL = set("\\`*_[]<>|#$^~{}@&!")


def markdown_escape(text: str) -> str:
    """Return ``text`` as a Markdown table cell shows it, each markup character escaped.

    No character of the text reaches a Markdown reader as markup: through pandoc to LaTeX, a
    name such as ``$^^5cinput{x}$`` stays text and never becomes math (where TeX reads
    ``^^5c`` as a backslash) or a command.
    """
    return "".join(
        f"\\{char}" if char in _MARKDOWN_SPECIAL else char for char in " ".join(text.split())
    )


def render_markdown(table: PaperTable) -> str:
    """A pipe table (GitHub, pandoc), its caption after it as pandoc's ``Table:`` line."""
    heads = ["Method"]
    for column in table.columns:
        prefix = f"{markdown_escape(redact(column) or '')} " if column else ""
        heads += [f"{prefix}n", *(f"{prefix}{METRIC_NAMES[m]} [CI]" for m in table.metrics)]
    lines = [
        "| " + " | ".join(heads) + " |",
        "|" + "|".join([":--", *(["--:"] * (len(heads) - 1))]) + "|",
    ]
    for method in table.methods:
        cells = [markdown_escape(redact(method) or "")]
        for column in table.columns:
            entry = table.entry(method, column)
            cells.append("-" if entry is None or entry.n is None else str(entry.n))
            for metric in table.metrics:
                value = None if entry is None else entry.values.get(metric)
                text = _number(value)
                if (method, column, metric) in table.best:
                    text = f"**{text}**"
                interval = None if entry is None or value is None else entry.intervals.get(metric)
                cells.append(text + (f" {_interval(interval)}" if interval else ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Table: " + markdown_escape(redact(table.caption) or "")]
    lines += [
        line
        for text in table.warnings
        for line in ("", "**Warning:** " + markdown_escape(redact(text) or ""))
    ]
    return "\n".join(lines) + "\n"


# -- CSV ------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "method",
    "dataset",
    "job",
    "tool",
    "lower_is_better",
    "n",
    *(f"{m}{part}" for m in METRIC_NAMES for part in ("", "_low", "_high")),
    "best",
)


def render_csv(table: PaperTable) -> str:
    """One row per (method, dataset), numbers as numbers, the best metrics of a row in
    ``best`` (``srcc;plcc``); the caption and each warning first, as ``#`` comment lines (skipped by
    ``comment="#"`` readers), where no comma is followed by a formula's first character, so
    that no cell a spreadsheet splits it into starts a formula.  Text cells never start one."""
    buffer = io.StringIO()
    for line in (table.caption, *(f"warning: {text}" for text in table.warnings)):
        comment = " ".join((redact(line) or "").replace('"', "'").split())
        buffer.write(f"# {_RISKY_COMMA.sub(';', comment)}\r\n")
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for method in table.methods:
        for column in table.columns:
            entry = table.entry(method, column)
            if entry is None:
                continue
            cells: list[Any] = [
                method,
                column,
                entry.job,
                entry.tool,
                entry.lower_is_better,
                entry.n,
            ]
            for metric in METRIC_NAMES:
                interval = entry.intervals.get(metric) or (None, None)
                cells += [entry.values.get(metric), interval[0], interval[1]]
            cells.append(";".join(m for m in table.metrics if (method, column, m) in table.best))
            writer.writerow([_csv_cell(cell) for cell in cells])
    return buffer.getvalue()


#: A comma that a spreadsheet would end a cell at, before what would start a formula.
_RISKY_COMMA = re.compile(r",(?=\s*[=+\-@'\t\r])")


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool | int | float):
        return value
    return neutralise(redact(str(value)) or "")


def render(table: PaperTable, fmt: TableFormat) -> str:
    """The table in ``fmt`` ("latex", "markdown" or "csv")."""
    renderers = {"latex": render_latex, "markdown": render_markdown, "csv": render_csv}
    if fmt not in renderers:
        raise ValueError(f"unknown table format {fmt!r}: use {', '.join(TABLE_FORMATS)}")
    return renderers[fmt](table)
