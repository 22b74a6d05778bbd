"""The figures of a job report and of a comparison, for a paper (SVG, PDF) and for the HTML
pages (the same figures, inline SVG).

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), text
kept as SVG text (``svg.fonttype: none``), which matplotlib escapes, so a tool or group name
from the data can neither break the XML nor turn into markup; ``$`` in such a name is escaped
too, so it is never read as mathtext.  A PDF embeds its fonts as TrueType (``pdf.fonttype``
42, set for our figures only): publishers' checkers (IEEE PDF eXpress) refuse the Type 3 fonts
matplotlib writes by default.  Colours are Okabe and Ito's colour-blind-safe palette
(:data:`OKABE_ITO`); a legend goes where it covers no point, or outside the axes.  The figures:

* ``scatter-agent``: the agent's [1, 5] score against MOS; ``scatter-tool-<T>``: each tool of
  a metric job, on its own (raw) score, the axis saying which way is better.  Each shows the
  report's n, SRCC and PLCC and the monotone fit behind PLCC logistic
  (:func:`agentic_iqa.reports.metrics.plcc_after_logistic`);
* ``breakdown-distortion`` and ``breakdown-level``: SRCC per distortion type and per level
  (:mod:`.breakdown`);
* ``paired-differences``: each line's difference from the baseline of ``eval compare`` with its
  paired bootstrap interval, each line by its name (``--label``, or the job's name);
* ``group-srcc``, ``group-accuracy``: a sweep's table (``eval compare --group``) as bars, a row
  per model or tool, a bar per dataset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..redact import redact

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend
    from matplotlib.typing import LegendLocType, RcKeyType

    from .columns import JobColumns

#: Above this many points a scatter is drawn as an image inside the SVG or PDF: ten thousand
#: vector markers make a file of megabytes that a PDF viewer renders slowly.
RASTER_POINTS = 4000
#: Okabe and Ito's palette (Color Universal Design), told apart with any colour vision; in the
#: order lines take it (the yellow, faint on white, last but one).
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
#: Settings of every figure, applied around drawing and saving only (never globally): TrueType
#: fonts in a PDF (42; Type 3 is refused by IEEE PDF eXpress), text as text in an SVG.
RC: dict[RcKeyType, Any] = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}
#: Where a legend may go inside the axes, tried in this order before it goes outside.
_CORNERS: tuple[LegendLocType, ...] = (
    "upper left",
    "lower right",
    "upper right",
    "lower left",
    "center right",
    "center left",
    "lower center",
    "upper center",
)
#: A fit's name in a legend (5PL: the 5-parameter logistic, as the report's text says it).
_FIT_SHORT = {"logistic5": "5PL", "logistic4": "4PL", "logistic3": "3PL", "linear": "linear"}
#: Scatter markers' area (points squared): their radius pads the legend's box in the check.
_MARKER_AREA = 12.0


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


def _color(index: int) -> str:
    return OKABE_ITO[index % len(OKABE_ITO)]


def _legend_outside(axes: Axes, **options: Any) -> Legend:
    """A legend right of the axes, the layout made room for it: it covers nothing drawn."""
    legend = axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **options)
    cast("Figure", axes.figure).tight_layout()  # our axes are a Figure's, not a SubFigure's
    return legend


def _legend_clear_of(axes: Axes, xy: Any, **options: Any) -> Legend:
    """A legend in the first corner of the axes where its box, padded by a marker's radius,
    holds none of the points ``xy`` (data coordinates); outside the axes when no corner is
    free.  Called once the layout is final, so the points stay where they were checked."""
    import numpy as np

    figure = cast("Figure", axes.figure)  # our axes are a Figure's, drawn on an Agg canvas
    renderer = cast("FigureCanvasAgg", figure.canvas).get_renderer()
    shown = axes.transData.transform(np.asarray(xy, dtype=float).reshape(-1, 2))
    pad = (_MARKER_AREA**0.5) / 2.0 * figure.dpi / 72.0 + 1.0
    for corner in _CORNERS:
        legend = axes.legend(loc=corner, **options)
        if not legend.get_window_extent(renderer).padded(pad).count_contains(shown):
            return legend
    return _legend_outside(axes, **options)


def _inside(figure: Figure, box: Any) -> bool:
    """Whether a window extent lies within the figure (a pixel of rounding allowed)."""
    edge = figure.bbox
    return (
        box.x0 >= edge.x0 - 1
        and box.x1 <= edge.x1 + 1
        and box.y0 >= edge.y0 - 1
        and box.y1 <= edge.y1 + 1
    )


def _fit_title(axes: Axes, text: str, *, lines: int = 2) -> str:
    """Title the axes with ``text`` so that the whole title lies inside the figure: as it is
    when it fits, else wrapped at spaces (or, in a long name, after ``-``, ``+``, ``_`` or
    ``/``) on up to ``lines`` lines, else those lines with the end cut to an ellipsis.  The
    layout is made again for each try, so the title is measured where it is drawn; returns the
    title shown."""
    import textwrap

    figure = cast("Figure", axes.figure)
    renderer = cast("FigureCanvasAgg", figure.canvas).get_renderer()

    def shown(candidate: str) -> Any:
        title = axes.set_title(_label(candidate))
        figure.tight_layout()  # an outside legend is part of the layout: it stays in too
        return title.get_window_extent(renderer)

    box = shown(text)
    if _inside(figure, box):
        return text
    # Centred on the axes, a title has twice the room to the nearer edge of the figure.
    middle = (box.x0 + box.x1) / 2
    room = 2 * min(middle - figure.bbox.x0, figure.bbox.x1 - middle)
    start = max(5, int(len(text) * room / max(box.width, 1.0)) + 1)
    # Break points after "+", "_" and "/" too (textwrap breaks after "-" itself): a marked
    # space, taken out of the lines made.
    breakable = re.sub(r"([+_/])(?=\S)", "\\1\x00 ", text)

    def unmarked(line: str) -> str:
        return line.replace("\x00 ", "").replace("\x00", "")

    for width in range(start, 4, -1):
        wrapped = textwrap.wrap(breakable, width, break_long_words=False)
        if len(wrapped) > lines or any(len(unmarked(line)) > width for line in wrapped):
            break
        candidate = "\n".join(unmarked(line) for line in wrapped)
        if _inside(figure, shown(candidate)):
            return candidate
    for width in range(start, 1, -1):
        wrapped = [unmarked(line) for line in textwrap.wrap(breakable, width)]
        head = [line[:width] for line in wrapped[:lines]]
        if len(wrapped) > lines or len(wrapped[lines - 1 if len(wrapped) >= lines else -1]) > width:
            head[-1] = head[-1][: max(width - 1, 1)].rstrip() + "…"
        candidate = "\n".join(head)
        if _inside(figure, shown(candidate)):
            return candidate
    shown("")
    return ""


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"


# -- the figures ----------------------------------------------------------------------------------


def scatter(
    pred: Sequence[float],
    mos: Sequence[float],
    *,
    title: str,
    xlabel: str,
    gid: str,
    figures: Mapping[str, Any] | None = None,
    note: str | None = None,
) -> Figure:
    """Scores against MOS, with the monotone fit of PLCC logistic drawn where there is one; the
    points are the SVG group ``<gid>-points``, the fitted curve ``<gid>-fit``.

    The legend's title gives n, SRCC and PLCC: ``figures`` (a report's correlation entry:
    ``n``, ``srcc``, ``plcc``, ``plcc_logistic``), so that the figure quotes the table's
    numbers; without them they are computed from the points.  ``note``: a line under them
    (how a lower-is-better tool's figures were signed)."""
    import numpy as np

    from .metrics import plcc, plcc_after_logistic, srcc

    if figures is None:
        usable = len(pred) >= 3 and np.ptp(pred) > 0 and np.ptp(mos) > 0
        figures = {
            "n": len(pred),
            "srcc": srcc(pred, mos) if usable else None,
            "plcc": plcc(pred, mos) if usable else None,
        }
    figure = _figure(6.0, 4.5)
    axes = figure.add_subplot()
    points = axes.scatter(
        pred, mos, s=_MARKER_AREA, alpha=0.7, edgecolors="none", color=OKABE_ITO[0], label="items"
    )
    points.set_gid(f"{gid}-points")
    points.set_rasterized(len(pred) > RASTER_POINTS)
    fit = plcc_after_logistic(pred, mos) if len(pred) >= 3 and np.ptp(pred) > 0 else None
    if fit is not None and fit.fitted:
        grid = np.linspace(min(pred), max(pred), 200)
        logistic = figures.get("plcc_logistic", fit.plcc)
        axes.plot(
            grid,
            fit.curve(grid),
            color=OKABE_ITO[5],
            gid=f"{gid}-fit",
            label=f"monotone fit ({_FIT_SHORT.get(fit.form, fit.label)}), PLCC {_fmt(logistic)}",
        )
    axes.set_xlabel(_label(xlabel))
    axes.set_ylabel("MOS")
    axes.set_title(_label(title))
    axes.grid(alpha=0.3)
    figure.tight_layout()
    heading = (
        f"n = {figures.get('n', len(pred))}, SRCC {_fmt(figures.get('srcc'))}, "
        f"PLCC {_fmt(figures.get('plcc'))}"
    )
    _legend_clear_of(
        axes,
        np.column_stack([pred, mos]) if len(pred) else [],
        title=heading + (f"\n{_label(note)}" if note else ""),
        fontsize="small",
        title_fontsize="small",
        framealpha=0.9,
    )
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
        drawn = [
            (offset, value, index)
            for index, (offset, value) in enumerate(zip(offsets, values, strict=True))
            if value is not None
        ]
        if not drawn:
            continue
        bars = axes.barh(
            [o for o, _, _ in drawn],
            [v for _, v, _ in drawn],
            height=height,
            color=_color(line),
            label=_label(name),
        )
        for patch, (_, _, index) in zip(bars.patches, drawn, strict=True):
            patch.set_gid(f"{gid}-{line}-{index}")
    for position, group in zip(positions, groups, strict=True):
        if not _srccs(group):
            axes.text(
                0.01,
                float(position),
                f"no correlation (fewer than {result['min_items']} scored items, or constant)",
                va="center",
                fontsize="small",
                color="#666",
            )
    labels = [_label(f"{_short(group['group'])} (n={group['n']})") for group in groups]
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()  # the first group on top, as in the table
    axes.axvline(0.0, color="#444", linewidth=0.8)
    axes.set_xlim(min([-0.05, *(v - 0.05 for g in groups for v in _srccs(g))]), 1.0)
    axes.set_xlabel("SRCC with MOS")
    axes.set_title(f"SRCC per {'distortion type' if by == 'distortion' else 'distortion level'}")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    if len(names) > 1:
        _legend_outside(axes, fontsize="small")
    return figure


def _srccs(group: Mapping[str, Any]) -> list[float]:
    return [entry["srcc"] for entry in group["lines"].values() if entry["srcc"] is not None]


def _short(name: str, width: int = 40) -> str:
    """A long group name (TID2013's run to 90 characters) cut for a tick label."""
    return name if len(name) <= width else name[: width - 1] + "…"


#: The differences of a comparison that the figure shows, and their markers.
DIFFERENCES = (
    ("srcc", "ΔSRCC", "o"),
    ("plcc", "ΔPLCC", "s"),
    ("krcc", "ΔKRCC", "^"),
    ("accuracy", "ΔMCQ accuracy", "D"),
)


def differences_figure(doc: Mapping[str, Any], *, gid: str) -> Figure | None:
    """Each line's difference from the baseline (ΔSRCC, ΔPLCC, ΔKRCC, Δaccuracy) with its
    paired bootstrap interval, a row per line named as :func:`.names.line_names` says (or
    ``--label`` said); each difference's markers are the SVG group ``<gid>-<name>``.  None
    when no line has a difference."""
    from .names import with_line_names

    doc = with_line_names(doc)
    rows = []
    for line in doc["lines"]:
        values = {}
        for name, _label_text, _marker in DIFFERENCES:
            source = line["mcq_difference"] if name == "accuracy" else line["difference"]
            if source and source.get(name) is not None:
                values[name] = (source[name], source.get(f"{name}_ci"))
        if values:
            rows.append((line["name"], values))
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
        bars = axes.errorbar(
            xs, ys, xerr=[low, high], fmt=marker, capsize=3, color=_color(kind), label=legend
        )
        bars.lines[0].set_gid(f"{gid}-{name}")
    axes.set_yticks(range(len(rows)), [_label(_short(label)) for label, _ in rows])
    axes.invert_yaxis()
    axes.axvline(0.0, color="#444", linewidth=0.8)
    settings = doc["bootstrap"]
    axes.set_xlabel(
        f"line - baseline ({settings['confidence']:.0%} paired bootstrap interval, "
        f"{settings['resamples']} resamples)"
    )
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    _legend_outside(axes, fontsize="small")
    _fit_title(axes, f"Difference from the baseline {doc['baseline_name']}")
    return figure


# -- which figures a report and a comparison have -------------------------------------------------


def _pairs(columns: JobColumns, scores: np.ndarray | None) -> tuple[list[float], list[float]]:
    """The items with a score and a MOS, in item order."""
    if scores is None:
        return [], []
    at = columns.positions(scores)
    return scores[at].tolist(), columns.mos[at].tolist()


def report_figures(
    report: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]] | JobColumns,
    *,
    scored: str = "Agent",
) -> list[NamedFigure]:
    """The figures of a job report (:func:`agentic_iqa.reports.report.build_report`): the agent's
    scatter (done items with a score and a MOS, its [1, 5] score; ``scored`` names what gave
    the scores, as :func:`agentic_iqa.reports.report.scored_label` does), or one per tool of a
    metric job, then the breakdown's.  A tool's scatter is on the score its correlations are on
    (``basis``): its own (``raw:`` column), where a lower-is-better one falls with MOS, or the
    [1, 5] one where the rows carry no raw score; items with that score and a MOS, whatever
    the run's outcome, as its correlations.  Each quotes the report's n, SRCC and PLCC.
    ``rows``: exported rows, or the job's :class:`.columns.JobColumns`."""
    import numpy as np

    from .columns import JobColumns

    columns = rows if isinstance(rows, JobColumns) else JobColumns.from_rows(rows, identities=False)
    figures = []
    if report.get("agent") is not None:
        pred, mos = _pairs(columns, columns.score)
        if pred:
            title = f"{scored} score vs MOS"
            figures.append(
                NamedFigure(
                    "scatter-agent",
                    title,
                    scatter(
                        pred,
                        mos,
                        title=title,
                        xlabel=f"{scored} score ([1,5], higher is better)",
                        gid="scatter-agent",
                        figures=report["agent"],
                    ),
                )
            )
    else:
        taken: set[str] = set()
        for tool in report.get("tools") or ():
            name = tool["tool"]
            own = columns.raw.get(name)
            has_raw = own is not None and bool(np.count_nonzero(~np.isnan(own)))
            raw = tool.get("basis", "raw" if has_raw else "normalized") == "raw"
            pred, mos = _pairs(columns, own if raw else columns.normalized.get(name))
            if not pred:
                continue
            stem = _unique(f"scatter-tool-{slug(name)}", taken)
            direction = tool.get("direction") or "direction unknown"
            xlabel = (
                f"{name} (raw, {direction})" if raw else f"{name} ([1,5] score, higher is better)"
            )
            note = (
                f"sign-corrected: {name} negated" if raw and tool.get("lower_is_better") else None
            )
            title = f"{name} vs MOS"
            figures.append(
                NamedFigure(
                    stem,
                    title,
                    scatter(
                        pred, mos, title=title, xlabel=xlabel, gid=stem, figures=tool, note=note
                    ),
                )
            )
    result = report.get("breakdown")
    for by in ("distortion", "level"):
        figure = breakdown_figure(result, by, gid=f"breakdown-{by}") if result else None
        if figure is not None:
            figures.append(
                NamedFigure(
                    f"breakdown-{by}",
                    f"SRCC per distortion {by}" if by == "level" else "SRCC per distortion type",
                    figure,
                )
            )
    return figures


def _unique(name: str, taken: set[str]) -> str:
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name}-{number}", number + 1
    taken.add(candidate)
    return candidate


def comparison_figures(doc: Mapping[str, Any]) -> list[NamedFigure]:
    """The figures of ``eval compare`` (:func:`agentic_iqa.reports.compare.build_comparison`)."""
    figure = differences_figure(doc, gid="paired-differences")
    if figure is None:
        return []
    return [NamedFigure("paired-differences", "Paired differences from the baseline", figure)]


#: A sweep's figures: the cell's kind, what it plots, the axis and the file stem.
_GROUP_FIGURES = (
    ("correlation", "srcc", "SRCC with MOS", "group-srcc"),
    ("accuracy", "accuracy", "MCQ accuracy", "group-accuracy"),
)


def group_figures(document: Mapping[str, Any]) -> list[NamedFigure]:
    """The figures of ``eval compare --group`` (:func:`agentic_iqa.reports.sweeps.group_table`):
    per kind of figure in its cells (SRCC against MOS, MCQ accuracy), horizontal bars, a row
    per model or tool, a bar per dataset; a bar is the SVG element
    ``<stem>-<dataset>-<row>`` (positions in the table).  Empty when no cell has a figure."""
    figures = []
    for kind, key, axis, stem in _GROUP_FIGURES:
        figure = _group_bars(document, kind, key, axis, gid=stem)
        if figure is not None:
            title = f"{axis} per model and dataset, group {document['group']}"
            figures.append(NamedFigure(stem, title, figure))
    return figures


def _group_bars(
    document: Mapping[str, Any], kind: str, key: str, axis: str, *, gid: str
) -> Figure | None:
    import numpy as np

    rows, columns = list(document["rows"]), list(document["columns"])
    values = {
        (r, c): cell[key]
        for r, row in enumerate(rows)
        for c, column in enumerate(columns)
        if (cell := document["cells"][row].get(column))
        and cell.get("kind") == kind
        and cell.get(key) is not None
    }
    if not values:
        return None
    shown = sorted({c for _, c in values})
    height = 0.8 / len(shown)
    figure = _figure(7.5, max(2.5, 1.2 + 0.3 * len(rows) * len(shown) ** 0.5))
    axes = figure.add_subplot()
    positions = np.arange(len(rows))
    for line, column in enumerate(shown):
        drawn = [(r, values[r, column]) for r in range(len(rows)) if (r, column) in values]
        bars = axes.barh(
            [positions[r] - 0.4 + height * (line + 0.5) for r, _ in drawn],
            [value for _, value in drawn],
            height=height,
            color=_color(line),
            label=_label(_short(columns[column])),
        )
        for patch, (r, _) in zip(bars.patches, drawn, strict=True):
            patch.set_gid(f"{gid}-{column}-{r}")
    axes.set_yticks(positions, [_label(_short(row)) for row in rows])
    axes.invert_yaxis()
    axes.axvline(0.0, color="#444", linewidth=0.8)
    lowest = min(values.values())
    axes.set_xlim(min(0.0, lowest - 0.05), 1.0)
    axes.set_xlabel(axis)
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    _legend_outside(axes, fontsize="small", title="dataset", title_fontsize="small")
    _fit_title(axes, f"{axis}, group {document['group']}")
    return figure
