"""Figures a paper can take: TrueType fonts in the PDF, the report's n/SRCC/PLCC on every
scatter, a tool's own score on its axis, legends clear of the points, a colour-blind-safe
palette, names instead of job ids, and a sweep's table as bars."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pytest
from matplotlib.colors import to_hex
from pypdf import PdfReader
from scipy import stats

from agentic_iqa.reports.compare import build_comparison
from agentic_iqa.reports.compare_html import render_html as compare_html
from agentic_iqa.reports.figure_files import svg, write_figures
from agentic_iqa.reports.figures import (
    OKABE_ITO,
    NamedFigure,
    comparison_figures,
    group_figures,
    report_figures,
    scatter,
)
from agentic_iqa.reports.names import line_names
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.sweeps import group_table, render_group_html
from tests.agentic_iqa.reports.test_figures import comparison

SVG = "{http://www.w3.org/2000/svg}"


def metric_rows(n: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    """A BRISQUE job's rows: its own score falls with MOS (lower is better), and its [1, 5]
    score is squeezed into 3.1-3.33, as the paper's logistic leaves LIVE-C's photos."""
    rng = np.random.default_rng(seed)
    mos = rng.uniform(1.0, 5.0, n)
    raw = 60.0 - 9.0 * mos + rng.normal(0.0, 6.0, n)
    return [
        {
            "item_id": f"i{k}",
            "status": "done",
            "mos": float(m),
            "raw:BRISQUE": float(r),
            "tool:BRISQUE": 3.1 + 0.23 * (k % 7) / 6.0,
        }
        for k, (m, r) in enumerate(zip(mos, raw, strict=True))
    ]


def agent_rows(n: int = 20, seed: int = 1) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    mos = rng.uniform(1.0, 5.0, n)
    return [
        {
            "item_id": f"i{k}",
            "status": "done",
            "mos": float(m),
            "quality_score": float(np.clip(m + rng.normal(0.0, 0.6), 1.0, 5.0)),
        }
        for k, m in enumerate(mos)
    ]


def texts(root: ET.Element) -> list[str]:
    return [node.text or "" for node in root.iter(f"{SVG}text")]


def points_of(named: NamedFigure) -> Any:
    (points,) = [
        c for c in named.figure.axes[0].collections if (c.get_gid() or "").endswith("-points")
    ]
    return points


def comparison_doc() -> dict[str, Any]:
    rng = np.random.default_rng(3)
    mos = rng.normal(50.0, 15.0, 40)
    noisy = mos + rng.normal(0.0, 15.0, 40)
    rows = [
        {
            "item_id": f"i{k}",
            "status": "done",
            "quality_score": float(noisy[k]),
            "mos": float(mos[k]),
        }
        for k in range(40)
    ]
    tools = [
        {
            **row,
            "quality_score": None,
            "raw:BRISQUE": -float(mos[k]) + rng.normal(0, 5),
            "raw:NIQE": -float(mos[k]),
            "tool:BRISQUE": 3.0,
            "tool:NIQE": 3.0,
        }
        for k, row in enumerate(rows)
    ]
    return build_comparison(
        [
            ({"id": "aaaaaaaa-1", "name": "qwen-agent", "status": "done", "tools": None}, rows),
            (
                {
                    "id": "bbbbbbbb-2",
                    "name": "metrics",
                    "status": "done",
                    "tools": ["BRISQUE", "NIQE"],
                },
                tools,
            ),
        ],
        bootstrap=50,
    )


# -- PDF fonts ------------------------------------------------------------------------------------


def pdf_fonts(path: Path) -> list[tuple[str, str | None, bool]]:
    """(subtype, descendant's subtype, embedded as a TrueType font file) of every font the
    PDF's pages and their form XObjects use."""
    found = []

    def walk(resources: Any) -> None:
        resources = resources.get_object() if resources is not None else {}
        for ref in (resources.get("/Font") or {}).values():
            font = ref.get_object()
            descendant = None
            described = font
            if font["/Subtype"] == "/Type0":
                described = font["/DescendantFonts"][0].get_object()
                descendant = str(described["/Subtype"])
            descriptor = described.get("/FontDescriptor")
            embedded = descriptor is not None and "/FontFile2" in descriptor.get_object()
            found.append((str(font["/Subtype"]), descendant, embedded))
        for ref in (resources.get("/XObject") or {}).values():
            form = ref.get_object()
            if form.get("/Subtype") == "/Form" and "/Resources" in form:
                walk(form["/Resources"])

    for page in PdfReader(path).pages:
        walk(page.get("/Resources"))
    return found


@pytest.mark.slow
def test_pdf_figures_embed_truetype_fonts_only_and_leave_matplotlib_as_it_was(
    tmp_path: Path,
) -> None:
    rows = metric_rows()
    before = dict(matplotlib.rcParams)
    figures = [
        *report_figures(build_report(rows, bootstrap=0, metric_job=True), rows),
        *report_figures(build_report(agent_rows(), bootstrap=0), agent_rows()),
        *comparison_figures(comparison(bootstrap=50)),
    ]
    written = [p for p in write_figures(figures, tmp_path) if p.suffix == ".pdf"]
    assert [p.stem for p in written] == [
        "scatter-tool-BRISQUE",
        "scatter-agent",
        "paired-differences",
    ]
    for path in written:
        fonts = pdf_fonts(path)
        assert fonts, path.name  # the text is text, in some font
        for subtype, descendant, embedded in fonts:
            # Type 42: a TrueType font, or a composite one over a TrueType (CIDFontType2).
            assert subtype == "/TrueType" or (subtype, descendant) == ("/Type0", "/CIDFontType2"), (
                path
            )
            assert embedded, path.name
    assert matplotlib.rcParams["pdf.fonttype"] == before["pdf.fonttype"]  # set for ours only
    assert dict(matplotlib.rcParams) == before


# -- scatter plots --------------------------------------------------------------------------------


def test_every_scatter_shows_the_reports_n_srcc_and_plcc(tmp_path: Path) -> None:
    agents = agent_rows()
    agent = build_report(agents, bootstrap=0)
    write_figures(report_figures(agent, agents), tmp_path)
    shown = texts(ET.parse(tmp_path / "scatter-agent.svg").getroot())
    entry = agent["agent"]
    assert entry["srcc"] == pytest.approx(
        stats.spearmanr([r["quality_score"] for r in agents], [r["mos"] for r in agents]).statistic
    )
    assert f"n = 20, SRCC {entry['srcc']:.3f}, PLCC {entry['plcc']:.3f}" in shown
    assert any(
        text.startswith("monotone fit (") and text.endswith(f"PLCC {entry['plcc_logistic']:.3f}")
        for text in shown
    )

    rows = metric_rows()
    report = build_report(rows, bootstrap=0, metric_job=True)
    (tool,) = report["tools"]
    raw = [row["raw:BRISQUE"] for row in rows]
    mos = [row["mos"] for row in rows]
    # The report's figures are BRISQUE's own score's, negated: lower is better.
    assert tool["srcc"] == pytest.approx(-stats.spearmanr(raw, mos).statistic)
    assert tool["plcc"] == pytest.approx(-stats.pearsonr(raw, mos).statistic)
    write_figures(report_figures(report, rows), tmp_path)
    shown = texts(ET.parse(tmp_path / "scatter-tool-BRISQUE.svg").getroot())
    assert f"n = 20, SRCC {tool['srcc']:.3f}, PLCC {tool['plcc']:.3f}" in shown
    assert tool["srcc"] > 0.5 and "sign-corrected: BRISQUE negated" in shown


def test_a_metric_tools_scatter_plots_its_own_score_and_the_agents_its_fused_one() -> None:
    rows = metric_rows()
    (brisque,) = report_figures(build_report(rows, bootstrap=0, metric_job=True), rows)
    offsets = points_of(brisque).get_offsets()
    assert offsets[:, 0].tolist() == pytest.approx([row["raw:BRISQUE"] for row in rows])
    assert offsets[:, 1].tolist() == pytest.approx([row["mos"] for row in rows])
    assert np.ptp(offsets[:, 0]) > 20  # not squeezed into [3.1, 3.33]
    axes = brisque.figure.axes[0]
    assert axes.get_xlabel() == "BRISQUE (raw, lower is better)"
    # The fit falls with the raw score, as BRISQUE does with MOS.
    (fit,) = [line for line in axes.lines if line.get_gid() == "scatter-tool-BRISQUE-fit"]
    ys = fit.get_ydata()
    assert ys[0] > ys[-1] and np.all(np.diff(ys) <= 1e-9)

    # Rows without raw scores (a CSV from before): its [1, 5] score, said on the axis.
    old = [{key: value for key, value in row.items() if key != "raw:BRISQUE"} for row in rows]
    (squeezed,) = report_figures(build_report(old, bootstrap=0, metric_job=True), old)
    assert squeezed.figure.axes[0].get_xlabel() == "BRISQUE ([1,5] score, higher is better)"
    assert points_of(squeezed).get_offsets()[:, 0].max() <= 3.33

    agents = agent_rows()
    (agent,) = report_figures(build_report(agents, bootstrap=0), agents)
    assert agent.figure.axes[0].get_xlabel() == "Agent score ([1,5], higher is better)"
    assert points_of(agent).get_offsets()[:, 0].tolist() == pytest.approx(
        [row["quality_score"] for row in agents]
    )


def legend_covers(named: NamedFigure) -> list[int]:
    """Indices of the points whose centre lies under the legend's box, as the file draws it."""
    svg(named)  # drawn as written: the layout the file has
    axes = named.figure.axes[0]
    box = axes.get_legend().get_window_extent(named.figure.canvas.get_renderer())
    shown = axes.transData.transform(points_of(named).get_offsets())
    return [i for i, (x, y) in enumerate(shown) if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1]


@pytest.mark.parametrize(
    "corners",
    [
        "lower-right",  # where the legend used to sit: the lowest-MOS points of a tool
        "falling",  # a lower-is-better tool: upper left and lower right taken
        "every",  # points in every corner and along every edge: the legend goes outside
    ],
)
def test_a_scatters_legend_covers_no_point(corners: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(0.0, 10.0, 20)
    y = 1.0 + 0.4 * x + rng.normal(0.0, 0.3, 20)
    if corners == "lower-right":
        x = np.append(x, [9.6, 9.8, 10.0])
        y = np.append(y, [1.0, 1.1, 1.2])
    elif corners == "falling":
        y = 6.0 - 0.4 * x + rng.normal(0.0, 0.3, 20)
    else:
        grid = np.linspace(0.0, 10.0, 7)
        x = np.concatenate([x, grid, grid, np.zeros(7), np.full(7, 10.0)])
        y = np.concatenate(
            [y, np.ones(7), np.full(7, 5.0), np.linspace(1, 5, 7), np.linspace(1, 5, 7)]
        )
    named = NamedFigure("s", "s", scatter(x.tolist(), y.tolist(), title="t", xlabel="x", gid="s"))
    assert legend_covers(named) == []
    figure_box = named.figure.bbox
    legend = named.figure.axes[0].get_legend().get_window_extent()
    # Wherever it went, the whole legend is on the figure (not cut off at its edge).
    assert figure_box.x0 <= legend.x0 and legend.x1 <= figure_box.x1
    assert figure_box.y0 <= legend.y0 and legend.y1 <= figure_box.y1


def test_bar_and_difference_legends_sit_outside_the_axes() -> None:
    doc = comparison(bootstrap=50)
    (named,) = comparison_figures(doc)
    svg(named)
    axes = named.figure.axes[0]
    legend = axes.get_legend().get_window_extent()
    assert legend.x0 >= axes.get_window_extent().x1  # right of the plot: covers no marker
    assert legend.x1 <= named.figure.bbox.x1


# -- colours --------------------------------------------------------------------------------------


def data_colours(named: NamedFigure) -> set[str]:
    """The colours of what a figure plots (points, fits, bars, markers), as #rrggbb."""
    axes = named.figure.axes[0]
    colours = {
        to_hex(c)
        for collection in axes.collections
        for c in [*collection.get_facecolors(), *collection.get_edgecolors()]
        if (collection.get_gid() or "").endswith("-points")
    }
    colours |= {
        to_hex(line.get_color())
        for line in axes.lines
        if line.get_gid() or line.get_marker() not in ("None", "", None)
    }
    colours |= {to_hex(patch.get_facecolor()) for patch in axes.patches if patch.get_gid()}
    return colours


def test_figures_take_their_colours_from_the_okabe_ito_palette() -> None:
    assert len(OKABE_ITO) == 8 and OKABE_ITO[0] == "#0072B2"
    palette = {colour.lower() for colour in OKABE_ITO}
    rows = metric_rows()
    brisque_niqe = [
        {**row, "raw:NIQE": row["raw:BRISQUE"] / 10.0, "tool:NIQE": row["mos"]} for row in rows
    ]
    drawn = [
        *report_figures(build_report(brisque_niqe, bootstrap=0, metric_job=True), brisque_niqe),
        *report_figures(build_report(agent_rows(), bootstrap=0), agent_rows()),
        *comparison_figures(comparison(bootstrap=50)),
    ]
    assert {named.name for named in drawn} == {
        "scatter-tool-BRISQUE",
        "scatter-tool-NIQE",
        "scatter-agent",
        "paired-differences",
    }
    for named in drawn:
        colours = data_colours(named)
        assert colours, named.name
        assert colours <= palette, (named.name, colours - palette)
    (bars,) = group_figures(sweep())
    assert data_colours(bars) == {"#0072b2", "#e69f00"}  # two datasets, the first two


# -- names instead of ids -------------------------------------------------------------------------


def test_labels_or_job_names_replace_ids_in_the_figure_and_the_page(tmp_path: Path) -> None:
    doc = comparison_doc()
    named = line_names(doc)
    assert [line["name"] for line in named["lines"]] == [
        "qwen-agent",
        "metrics: BRISQUE",
        "metrics: NIQE",
    ]
    assert named["baseline_name"] == "qwen-agent"
    assert [line["label"] for line in named["lines"]] == [line["label"] for line in doc["lines"]]
    labelled = line_names(doc, {"bbbbbbbb-2": "pyiqa <metrics>"})
    assert [line["name"] for line in labelled["lines"]][1:] == [
        "pyiqa <metrics>: BRISQUE",
        "pyiqa <metrics>: NIQE",
    ]
    # Two jobs of one name keep their short ids; a one-tool job named for its tool, no suffix.
    alike = {**doc, "jobs": [{**job, "name": "run"} for job in doc["jobs"]]}
    assert [line["name"] for line in line_names(alike)["lines"]] == [
        "run (aaaaaaaa)",
        "run (bbbbbbbb): BRISQUE",
        "run (bbbbbbbb): NIQE",
    ]
    one = {
        **doc,
        "jobs": [doc["jobs"][0], {**doc["jobs"][1], "name": "livec-brisque"}],
        "lines": doc["lines"][:2],
    }
    assert line_names(one)["lines"][1]["name"] == "livec-brisque"

    written = write_figures(comparison_figures(labelled), tmp_path, formats=("svg",))
    shown = texts(ET.parse(written[0]).getroot())
    assert {"pyiqa <metrics>: BRISQUE", "pyiqa <metrics>: NIQE"} <= set(shown)
    assert "Difference from the baseline qwen-agent" in shown
    assert not [text for text in shown if "bbbbbbbb" in text or "aaaaaaaa" in text]

    page = compare_html(labelled, tmp_path / "compare.html").read_text(encoding="utf-8")
    assert "Baseline: qwen-agent" in page
    assert (
        '<td class="text label" title="bbbbbbbb tools/BRISQUE">pyiqa &lt;metrics&gt;: '
        "BRISQUE</td>" in page
    )
    assert "pyiqa <metrics>" not in page  # escaped
    # Without labels the page names jobs by their names too.
    plain = compare_html(doc, tmp_path / "plain.html").read_text(encoding="utf-8")
    assert '<td class="text label" title="aaaaaaaa agent">qwen-agent</td>' in plain


# -- a sweep's table ------------------------------------------------------------------------------


def sweep() -> dict[str, Any]:
    """Two models and a metric job's two tools on two datasets; one model missing on one."""

    def about(job: str, dataset: str, **more: Any) -> dict[str, Any]:
        return {
            "id": job,
            "name": job,
            "status": "done",
            "backend": "openai",
            "dataset": {"name": dataset, "split": "all"},
            **more,
        }

    def srcc(value: float, tool: str | None = None) -> dict[str, Any]:
        return {"tool": tool, "kind": "correlation", "n": 50, "srcc": value, "plcc": value}

    return group_table(
        "paper",
        [
            (about("j1", "livec", model="gpt-4o"), srcc(0.61)),
            (about("j2", "koniq", model="gpt-4o"), srcc(0.72)),
            (about("j3", "livec", model="qwen"), srcc(0.55)),
            (about("j4", "livec", tools=["BRISQUE", "NIQE"], backend=None), srcc(0.27, "BRISQUE")),
            (about("j4", "livec", tools=["BRISQUE", "NIQE"], backend=None), srcc(-0.05, "NIQE")),
        ],
    )


def test_a_sweeps_table_has_a_bar_per_model_and_dataset_and_its_page_shows_it(
    tmp_path: Path,
) -> None:
    document = sweep()
    assert document["rows"] == ["openai/gpt-4o", "openai/qwen", "tools/BRISQUE", "tools/NIQE"]
    (named,) = group_figures(document)
    assert named.name == "group-srcc"
    write_figures([named], tmp_path, formats=("svg",))
    root = ET.parse(tmp_path / "group-srcc.svg").getroot()
    bars = sorted(
        node.get("id") for node in root.iter() if (node.get("id") or "").startswith("group-srcc-")
    )
    # dataset 0 (livec) for every row, dataset 1 (koniq) for gpt-4o only.
    assert bars == [
        "group-srcc-0-0",
        "group-srcc-0-1",
        "group-srcc-0-2",
        "group-srcc-0-3",
        "group-srcc-1-0",
    ]
    shown = set(texts(root))
    assert {"openai/gpt-4o", "tools/NIQE", "livec/all", "koniq/all"} <= shown
    page = render_group_html(document, tmp_path / "group.html").read_text(encoding="utf-8")
    assert '<figure class="plot" id="figure-group-srcc"><svg ' in page
    assert page.count("<svg ") == 1
    accuracy = group_table(
        "qa",
        [
            (
                {
                    "id": "j",
                    "status": "done",
                    "backend": "builtin",
                    "dataset": {"name": "qbench", "split": "dev"},
                },
                {"tool": None, "kind": "accuracy", "accuracy": 0.7, "n": 10},
            )
        ],
    )
    assert [f.name for f in group_figures(accuracy)] == ["group-accuracy"]
    assert group_figures(group_table("empty", [])) == []
