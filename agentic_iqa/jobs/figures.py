"""The figures of a job report and of a comparison, for a paper (SVG, PDF) and for the HTML
pages (the same figures, inline SVG).

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), text
kept as SVG text (``svg.fonttype: none``), which matplotlib escapes, so a tool or group name
from the data can neither break the XML nor turn into markup; ``$`` in such a name is escaped
too, so it is never read as mathtext.  The figures:

* ``scatter-agent``: the agent's score against MOS with the monotone fit behind PLCC logistic
  (:func:`agentic_iqa.jobs.metrics.plcc_after_logistic`); ``scatter-tool-<T>``: the same for
  each tool of a metric job;
* ``breakdown-distortion`` and ``breakdown-level``: SRCC per distortion type and per level
  (:mod:`.breakdown`);
* ``paired-differences``: each line's difference from the baseline of ``eval compare`` with its
  paired bootstrap interval.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .cells import number, text
from .export import TOOL_PREFIX

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The formats ``--figures`` writes, one file each per figure.
FORMATS = ("svg", "pdf")
#: Above this many points a scatter is drawn as an image inside the SVG or PDF: ten thousand
#: vector markers make a file of megabytes that a PDF viewer renders slowly.
RASTER_POINTS = 4000
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


@dataclass(frozen=True)
class NamedFigure:
    """A figure, the file stem it is written under (safe as a file name and as an XML id) and
    what it shows (its SVG ``<title>`` and the HTML caption)."""

    name: str
    title: str
    figure: Figure


def _label(value: Any) -> str:
    """Text from the data as matplotlib must be given it: credentials redacted, ``$`` literal."""
    return (redact(str(value)) or "").replace("$", r"\$")


def slug(name: str) -> str:
    """A file-name-safe form of a tool or group name ("tools/<a b>" -> "tools-a-b")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "x"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)  # Agg directly: no pyplot, no global backend switch
    return figure


# -- the figures ----------------------------------------------------------------------------------


def scatter(pred: Sequence[float], mos: Sequence[float], *, title: str, xlabel: str,
            gid: str) -> Figure:
    """Scores against MOS, with the monotone fit of PLCC logistic drawn where there is one; the
    points are the SVG group ``<gid>-points``, the fitted curve ``<gid>-fit``."""
    import numpy as np

    from .metrics import plcc_after_logistic

    figure = _figure(6.0, 4.5)
    axes = figure.add_subplot()
    points = axes.scatter(pred, mos, s=12, alpha=0.6, edgecolors="none")
    points.set_gid(f"{gid}-points")
    points.set_rasterized(len(pred) > RASTER_POINTS)
    fit = plcc_after_logistic(pred, mos) if len(pred) >= 3 and np.ptp(pred) > 0 else None
    if fit is not None and fit.fitted:
        grid = np.linspace(min(pred), max(pred), 200)
        axes.plot(grid, fit.curve(grid), color="#d62728", gid=f"{gid}-fit",
                  label=f"monotone {fit.label} (PLCC {fit.plcc:.3f})")
        axes.legend(loc="lower right")
    axes.set_xlabel(_label(xlabel))
    axes.set_ylabel("MOS")
    axes.set_title(_label(f"{title} (n={len(pred)})"))
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def breakdown_figure(result: Mapping[str, Any], by: str, *, gid: str) -> Figure | None:
    """Horizontal bars of SRCC per group (one bar per line and group), a group's item count in
    its label; a group with no correlation (too few items) has no bar.  Each bar is the SVG
    element ``<gid>-<line>-<group>`` (positions).  None when there is no such grouping."""
    import numpy as np

    groups = result.get(by) or []
    if not groups:
        return None
    names = result["lines"]
    height = 0.8 / max(1, len(names))
    figure = _figure(7.5, max(2.5, 1.0 + 0.28 * len(groups) * max(1, len(names)) ** 0.5))
    axes = figure.add_subplot()
    positions = np.arange(len(groups))
    for line, name in enumerate(names):
        values = [group["lines"][name]["srcc"] for group in groups]
        offsets = positions - 0.4 + height * (line + 0.5)
        drawn = [(offset, value, index) for index, (offset, value)
                 in enumerate(zip(offsets, values, strict=True)) if value is not None]
        if not drawn:
            continue
        bars = axes.barh([o for o, _, _ in drawn], [v for _, v, _ in drawn], height=height,
                         color=_COLORS[line % len(_COLORS)], label=_label(name))
        for patch, (_, _, index) in zip(bars.patches, drawn, strict=True):
            patch.set_gid(f"{gid}-{line}-{index}")
    for position, group in zip(positions, groups, strict=True):
        if not _srccs(group):
            axes.text(0.01, position, f"no correlation (fewer than {result['min_items']} "
                      "scored items, or constant)", va="center", fontsize="small",
                      color="#666")
    labels = [_label(f"{_short(group['group'])} (n={group['n']})") for group in groups]
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()  # the first group on top, as in the table
    axes.axvline(0.0, color="#444", linewidth=0.8)
    axes.set_xlim(min([-0.05, *(v - 0.05 for g in groups for v in _srccs(g))]), 1.0)
    axes.set_xlabel("SRCC with MOS")
    axes.set_title(f"SRCC per {'distortion type' if by == 'distortion' else 'distortion level'}")
    if len(names) > 1:
        axes.legend(loc="lower right", fontsize="small")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return figure


def _srccs(group: Mapping[str, Any]) -> list[float]:
    return [entry["srcc"] for entry in group["lines"].values() if entry["srcc"] is not None]


def _short(name: str, width: int = 40) -> str:
    """A long group name (TID2013's run to 90 characters) cut for a tick label."""
    return name if len(name) <= width else name[:width - 1] + "…"


#: The differences of a comparison that the figure shows, and their markers.
DIFFERENCES = (("srcc", "ΔSRCC", "o"), ("plcc", "ΔPLCC", "s"), ("krcc", "ΔKRCC", "^"),
               ("accuracy", "ΔMCQ accuracy", "D"))


def differences_figure(doc: Mapping[str, Any], *, gid: str) -> Figure | None:
    """Each line's difference from the baseline (ΔSRCC, ΔPLCC, ΔKRCC, Δaccuracy) with its
    paired bootstrap interval, a row per line; each difference's markers are the SVG group
    ``<gid>-<name>``.  None when no line has a difference."""
    rows = []
    for line in doc["lines"]:
        values = {}
        for name, _label_text, _marker in DIFFERENCES:
            source = line["mcq_difference"] if name == "accuracy" else line["difference"]
            if source and source.get(name) is not None:
                values[name] = (source[name], source.get(f"{name}_ci"))
        if values:
            rows.append((line["label"], values))
    if not rows:
        return None
    shown = [d for d in DIFFERENCES if any(d[0] in values for _, values in rows)]
    figure = _figure(7.0, max(2.5, 1.4 + 0.45 * len(rows) * len(shown) ** 0.5))
    axes = figure.add_subplot()
    step = 0.7 / max(1, len(shown))
    for kind, (name, legend, marker) in enumerate(shown):
        ys, xs, low, high = [], [], [], []
        for row, (_label_line, values) in enumerate(rows):
            if name not in values:
                continue
            value, interval = values[name]
            ys.append(row - 0.35 + step * (kind + 0.5))
            xs.append(value)
            low.append(value - interval[0] if interval else 0.0)
            high.append(interval[1] - value if interval else 0.0)
        bars = axes.errorbar(xs, ys, xerr=[low, high], fmt=marker, capsize=3,
                             color=_COLORS[kind % len(_COLORS)], label=legend)
        bars.lines[0].set_gid(f"{gid}-{name}")
    axes.set_yticks(range(len(rows)), [_label(label) for label, _ in rows])
    axes.invert_yaxis()
    axes.axvline(0.0, color="#444", linewidth=0.8)
    settings = doc["bootstrap"]
    axes.set_xlabel(f"line - baseline ({settings['confidence']:.0%} paired bootstrap interval, "
                    f"{settings['resamples']} resamples)")
    axes.set_title(_label(f"Difference from the baseline {doc['baseline'] or '-'}"))
    axes.legend(loc="best", fontsize="small")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return figure


# -- which figures a report and a comparison have -------------------------------------------------


def _pairs(rows: Iterable[Mapping[str, Any]], column: str, *, done_only: bool
           ) -> tuple[list[float], list[float]]:
    pred: list[float] = []
    mos: list[float] = []
    for row in rows:
        if done_only and text(row.get("status")) != "done":
            continue
        score, truth = number(row.get(column)), number(row.get("mos"))
        if score is not None and truth is not None:
            pred.append(score)
            mos.append(truth)
    return pred, mos


def report_figures(report: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], *,
                   scored: str = "Agent") -> list[NamedFigure]:
    """The figures of a job report (:func:`agentic_iqa.jobs.report.build_report`): the agent's
    scatter (done items with a score and a MOS; ``scored`` names what gave the scores, as
    :func:`agentic_iqa.jobs.report.scored_label` does), or one per tool of a metric job (items
    with that tool's score and a MOS, as its correlations), then the breakdown's."""
    rows = list(rows)
    figures = []
    if report.get("agent") is not None:
        pred, mos = _pairs(rows, "quality_score", done_only=True)
        if pred:
            title = f"{scored} score vs MOS"
            figures.append(NamedFigure("scatter-agent", title, scatter(
                pred, mos, title=title, xlabel="predicted quality score",
                gid="scatter-agent")))
    else:
        taken: set[str] = set()
        for tool in report.get("tools") or ():
            pred, mos = _pairs(rows, f"{TOOL_PREFIX}{tool['tool']}", done_only=False)
            if not pred:
                continue
            name = _unique(f"scatter-tool-{slug(tool['tool'])}", taken)
            title = f"{tool['tool']} vs MOS"
            figures.append(NamedFigure(name, title, scatter(
                pred, mos, title=title, xlabel=f"{tool['tool']} (normalized, higher is better)",
                gid=name)))
    result = report.get("breakdown")
    for by in ("distortion", "level"):
        figure = breakdown_figure(result, by, gid=f"breakdown-{by}") if result else None
        if figure is not None:
            figures.append(NamedFigure(f"breakdown-{by}", f"SRCC per distortion {by}"
                                       if by == "level" else "SRCC per distortion type", figure))
    return figures


def _unique(name: str, taken: set[str]) -> str:
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name}-{number}", number + 1
    taken.add(candidate)
    return candidate


def comparison_figures(doc: Mapping[str, Any]) -> list[NamedFigure]:
    """The figures of ``eval compare`` (:func:`agentic_iqa.jobs.compare.build_comparison`)."""
    figure = differences_figure(doc, gid="paired-differences")
    if figure is None:
        return []
    return [NamedFigure("paired-differences", "Paired differences from the baseline", figure)]


# -- output ---------------------------------------------------------------------------------------


def svg(named: NamedFigure) -> str:
    """The figure as a standalone SVG document, text as escaped SVG text, titled."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": named.name}):
        named.figure.savefig(buffer, format="svg",
                             metadata={"Title": redact(named.title) or "", "Date": None})
    return buffer.getvalue()


def pdf(named: NamedFigure) -> bytes:
    """The figure as a PDF (fonts embedded), titled."""
    buffer = io.BytesIO()
    named.figure.savefig(buffer, format="pdf",
                         metadata={"Title": redact(named.title) or "", "CreationDate": None})
    return buffer.getvalue()


_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
#: The ids matplotlib numbers in every figure alike ("axes_1", "text_3"): never referred to,
#: but one page holds several figures, and an id is unique on a page.
_NUMBERED_IDS = re.compile(r'\bid="([A-Za-z][A-Za-z0-9.]*_\d+)"')


def inline_svg(named: NamedFigure) -> str:
    """The figure for an HTML page: its SVG without the XML prologue, metadata and namespace
    declarations (an HTML parser knows them), so the page names no outside address; the ids
    matplotlib numbers alike in every figure take the figure's name before them."""
    document = _METADATA.sub("", _PROLOGUE.sub("", svg(named), count=1), count=1)
    start, rest = document.split(">", 1)
    return _NAMESPACES.sub("", start) + ">" + _NUMBERED_IDS.sub(rf'id="{named.name}-\1"', rest)


def html_figure(named: NamedFigure) -> str:
    """A ``<figure>`` with the inline SVG and an escaped caption."""
    return (f'<figure class="plot" id="figure-{named.name}">{inline_svg(named)}'
            f"<figcaption>{html.escape(redact(named.title) or '')}</figcaption></figure>")


def write_figures(figures: Iterable[NamedFigure], directory: str | Path,
                  formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write each figure as ``<directory>/<name>.<format>`` (the directory made if missing)
    and return the paths written."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for named in figures:
        for fmt in formats:
            path = target / f"{named.name}.{fmt}"
            if fmt == "svg":
                path.write_text(svg(named), encoding="utf-8")
            elif fmt == "pdf":
                path.write_bytes(pdf(named))
            else:
                raise ValueError(f"unknown figure format {fmt!r}: use svg or pdf")
            written.append(path)
    return written
