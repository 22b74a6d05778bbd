"""Figures of reports and comparisons (SVG, PDF, inline in HTML) and the breakdown by distortion."""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from agentic_iqa.reports.breakdown import breakdown, distortion_of
from agentic_iqa.reports.compare import build_comparison
from agentic_iqa.reports.compare_html import render_html as compare_html
from agentic_iqa.reports.export import export_columns, write_rows
from agentic_iqa.reports.figure_files import svg, write_figures
from agentic_iqa.reports.figures import comparison_figures, report_figures
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.report_html import render_html
from agentic_iqa.reports.report_text import render_text

SVG = "{http://www.w3.org/2000/svg}"
TYPES = ["gaussian_blur", "white_noise", "jpeg"]


def distorted_rows(seed: int = 0) -> list[dict[str, Any]]:
    """KADID-like rows: three distortion types at five levels (two items each), meta as the
    KADID reader stores it, two items of a fourth type, and one item with no distortion."""
    rng = np.random.default_rng(seed)
    rows = []
    for index, name in enumerate(TYPES, start=1):
        for level in range(1, 6):
            for copy in range(2):
                mos = 5.0 - 0.8 * level + float(rng.normal(0, 0.3))
                rows.append(
                    {
                        "item_id": f"I0{copy + 1}_{index:02d}_{level:02d}.png",
                        "status": "done",
                        "quality_score": mos + float(rng.normal(0, 0.4 * index)),
                        "mos": mos,
                        "tool:PSNR": mos + float(rng.normal(0, 1.0)),
                        "meta": json.dumps(
                            {"distortion": name, "distortion_index": index, "level": level}
                        ),
                    }
                )
    for copy in range(2):
        rows.append(
            {
                "item_id": f"I0{copy + 1}_25_01.png",
                "status": "done",
                "quality_score": 3.0 + copy,
                "mos": 3.5 + copy,
                "tool:PSNR": 2.0 + copy,
                "meta": json.dumps(
                    {"distortion": "contrast_change", "distortion_index": 25, "level": 1}
                ),
            }
        )
    rows.append(
        {
            "item_id": "plain.png",
            "status": "done",
            "quality_score": 3.0,
            "mos": 3.0,
            "tool:PSNR": 3.0,
            "meta": None,
        }
    )
    return rows


def svg_tree(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def element(root: ET.Element, gid: str) -> ET.Element:
    found = [node for node in root.iter() if node.get("id") == gid]
    assert len(found) == 1, gid
    return found[0]


# -- the breakdown --------------------------------------------------------------------------------


def test_meta_gives_type_and_level_however_it_was_stored() -> None:
    kadid = {"distortion": "jpeg", "distortion_index": 10, "level": 3}
    assert distortion_of(json.dumps(kadid)) == ("jpeg", "10", "3")
    assert distortion_of(kadid) == ("jpeg", "10", "3")
    # A manifest's own columns, read from a CSV as text, or a "meta" column holding JSON.
    assert distortion_of({"distortion_type": "blur", "level": "2"}) == ("blur", None, "2")
    assert distortion_of({"meta": '{"distortion": "noise", "level": 4}'}) == ("noise", None, "4")
    assert distortion_of({"distortion_index": 7, "level": 2.0}) == ("type 7", "7", "2")
    assert (
        distortion_of(None)
        == distortion_of("not json")
        == distortion_of("{}")
        == (None, None, None)
    )


def test_breakdown_groups_counts_and_correlations_are_scipys() -> None:
    types = ["b", "a", "a", "a", "b", "b", "c", "c", None]
    levels = ["10", "2", "2", "10", "2", "10", "2", "10", None]
    mos = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    agent = [1.5, 2.0, 2.5, 5.0, 4.0, 8.0, 1.0, 2.0, 9.0]
    tool = [None, 1.0, 2.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    result = breakdown(types, levels, mos, {"agent": agent, "T": tool}, order={"b": "1"})
    assert result["lines"] == ["agent", "T"] and result["min_items"] == 3
    # "b" has the dataset's index 1: first; then names without one, alphabetically.
    assert [(g["group"], g["n"]) for g in result["distortion"]] == [("b", 3), ("a", 3), ("c", 2)]
    b, a, c = result["distortion"]
    assert b["lines"]["agent"]["srcc"] == pytest.approx(
        stats.spearmanr([1.5, 4.0, 8.0], [1.0, 5.0, 6.0]).statistic
    )
    assert b["lines"]["agent"]["plcc"] == pytest.approx(
        stats.pearsonr([1.5, 4.0, 8.0], [1.0, 5.0, 6.0]).statistic
    )
    # T scored only two of b's items; c has two items: counts, no correlation.
    assert b["lines"]["T"] == {"n": 2, "srcc": None, "plcc": None}
    assert c["lines"]["agent"] == {"n": 2, "srcc": None, "plcc": None}
    assert a["lines"]["T"]["srcc"] == pytest.approx(1.0)
    # Levels in numeric order, not as text ("10" after "2").
    assert [(g["group"], g["n"]) for g in result["level"]] == [("2", 4), ("10", 4)]
    assert breakdown([None, None], [None, None], [1.0, 2.0], {"agent": [1.0, 2.0]}) is None


def test_report_breaks_down_by_distortion_in_json_text_and_from_a_csv(tmp_path: Path) -> None:
    rows = distorted_rows()
    report = build_report(rows, bootstrap=0)
    result = json.loads(json.dumps(report))["breakdown"]
    assert [(g["group"], g["n"]) for g in result["distortion"]] == [
        ("gaussian_blur", 10),
        ("white_noise", 10),
        ("jpeg", 10),
        ("contrast_change", 2),
    ]
    assert [(g["group"], g["n"]) for g in result["level"]] == [
        ("1", 8),
        ("2", 6),
        ("3", 6),
        ("4", 6),
        ("5", 6),
    ]
    blur = [r for r in rows if "gaussian_blur" in (r["meta"] or "")]
    assert result["distortion"][0]["lines"]["agent"]["srcc"] == pytest.approx(
        stats.spearmanr([r["quality_score"] for r in blur], [r["mos"] for r in blur]).statistic
    )
    assert result["distortion"][3]["lines"]["agent"] == {"n": 2, "srcc": None, "plcc": None}
    assert result["lines"] == ["agent"]
    text = render_text(report)
    assert "By distortion type" in text and "By distortion level" in text
    assert re.search(r"gaussian_blur\s+10\s+0\.\d{3}\s+0\.\d{3}", text)
    assert re.search(r"contrast_change\s+2\s+-\s+-", text)

    path = tmp_path / "rows.csv"
    write_rows(rows, path, "csv", export_columns(["PSNR"]))
    with path.open(newline="", encoding="utf-8") as handle:
        assert build_report(csv.DictReader(handle), bootstrap=0)["breakdown"] == report["breakdown"]
    # A metric job breaks down each tool; items without a distortion give no breakdown.
    metric = build_report(rows, bootstrap=0, metric_job=True)["breakdown"]
    assert metric["lines"] == ["PSNR"] and metric["distortion"][1]["lines"]["PSNR"]["n"] == 10
    plain = [{**row, "meta": None} for row in rows]
    assert build_report(plain, bootstrap=0)["breakdown"] is None
    assert "By distortion" not in render_text(build_report(plain, bootstrap=0))


# -- the report's figures -------------------------------------------------------------------------


def test_report_figures_are_svg_and_pdf_with_every_point_and_bar(tmp_path: Path) -> None:
    rows = distorted_rows()
    report = build_report(rows, bootstrap=0)
    figures = report_figures(report, rows)
    assert [named.name for named in figures] == [
        "scatter-agent",
        "breakdown-distortion",
        "breakdown-level",
    ]
    written = write_figures(figures, tmp_path / "new" / "figures")
    assert sorted(p.name for p in written) == sorted(
        f"{name}.{fmt}"
        for name in ("scatter-agent", "breakdown-distortion", "breakdown-level")
        for fmt in ("svg", "pdf")
    )
    for path in written:
        if path.suffix == ".pdf":
            assert path.read_bytes().startswith(b"%PDF")
    scatter = svg_tree(tmp_path / "new/figures/scatter-agent.svg")
    assert scatter.find(f"{SVG}title").text == "Agent score vs MOS"
    points = element(scatter, "scatter-agent-points")
    assert len(list(points.iter(f"{SVG}use"))) == 33  # every done item with a score and MOS
    assert len(list(element(scatter, "scatter-agent-fit").iter(f"{SVG}path"))) == 1
    texts = [node.text for node in scatter.iter(f"{SVG}text")]
    assert "Agent score vs MOS" in texts
    agent = report["agent"]
    assert f"n = 33, SRCC {agent['srcc']:.3f}, PLCC {agent['plcc']:.3f}" in texts
    assert any(text and text.startswith("monotone fit (") for text in texts)

    bars = svg_tree(tmp_path / "new/figures/breakdown-distortion.svg")
    ids = [
        node.get("id")
        for node in bars.iter()
        if (node.get("id") or "").startswith("breakdown-distortion-")
    ]
    assert sorted(ids) == [
        "breakdown-distortion-0-0",
        "breakdown-distortion-0-1",
        "breakdown-distortion-0-2",
    ]  # contrast_change: n=2, no bar
    labels = {node.text for node in bars.iter(f"{SVG}text")}
    assert {"gaussian_blur (n=10)", "contrast_change (n=2)"} <= labels
    levels = svg_tree(tmp_path / "new/figures/breakdown-level.svg")
    assert (
        sum((node.get("id") or "").startswith("breakdown-level-0-") for node in levels.iter()) == 5
    )


def test_a_metric_job_has_a_scatter_per_tool_and_the_html_embeds_them(tmp_path: Path) -> None:
    rows = [
        {**row, "tool:NIQE": row["mos"] * 2 if i % 2 else None}
        for i, row in enumerate(distorted_rows())
    ]
    report = build_report(rows, bootstrap=0, metric_job=True)
    figures = report_figures(report, rows)
    assert [named.name for named in figures] == [
        "scatter-tool-NIQE",
        "scatter-tool-PSNR",
        "breakdown-distortion",
        "breakdown-level",
    ]
    write_figures(figures, tmp_path)
    niqe = svg_tree(tmp_path / "scatter-tool-NIQE.svg")
    assert len(list(element(niqe, "scatter-tool-NIQE-points").iter(f"{SVG}use"))) == 16
    psnr = svg_tree(tmp_path / "scatter-tool-PSNR.svg")
    assert len(list(element(psnr, "scatter-tool-PSNR-points").iter(f"{SVG}use"))) == 33
    bars = svg_tree(tmp_path / "breakdown-distortion.svg")
    assert (
        sum((node.get("id") or "").startswith("breakdown-distortion-") for node in bars.iter())
        == 2 * 3
    )  # two tools, three groups with a correlation

    page = render_html(report, rows, tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.count("<svg ") == 4 and "data:image/png" not in page
    for name in ("scatter-tool-NIQE", "scatter-tool-PSNR", "breakdown-distortion"):
        assert f'<figure class="plot" id="figure-{name}"><svg ' in page
    assert '<table id="breakdown-distortion">' in page and '<table id="breakdown-level">' in page
    assert "http://" not in page and "<?xml" not in page  # nothing outside the page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # four figures on one page, no id twice
    assert set(re.findall(r'(?:href="#|url\(#)([^")]+)', page)) <= set(ids)


def test_names_from_the_data_are_escaped_in_figures_and_pages(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script> $x^$"
    rows = [
        {**row, "meta": json.dumps({"distortion": hostile, "level": 1})} for row in distorted_rows()
    ]
    report = build_report(rows, bootstrap=0)
    write_figures(report_figures(report, rows), tmp_path)
    raw = (tmp_path / "breakdown-distortion.svg").read_text(encoding="utf-8")
    assert "<script>" not in raw and "&lt;script&gt;alert(1)&lt;/script&gt;" in raw
    texts = {
        node.text for node in svg_tree(tmp_path / "breakdown-distortion.svg").iter(f"{SVG}text")
    }
    assert f"{hostile} (n=33)" in texts  # "$" shown as written, not as mathtext
    page = render_html(report, rows, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<script>" not in page and page.count("&lt;script&gt;alert(1)") >= 2


# -- the comparison -------------------------------------------------------------------------------


def comparison(bootstrap: int = 200) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    mos = rng.normal(50.0, 15.0, 80)

    def rows(scores: np.ndarray, **columns: np.ndarray) -> list[dict[str, Any]]:
        return [
            {
                "item_id": f"i{k}",
                "image": f"/nowhere/{k}.png",
                "status": "done",
                "quality_score": float(s),
                "mos": float(m),
                **{key: float(value[k]) for key, value in columns.items()},
            }
            for k, (s, m) in enumerate(zip(scores, mos, strict=True))
        ]

    name = "a-very-long-job-name-" * 12
    base = {"id": "aaaaaaaa-1", "name": name, "status": "done", "tools": None}
    tools = {
        "id": "bbbbbbbb-2",
        "name": "<b>tools</b>",
        "status": "done",
        "tools": ["BRISQUE", "NIQE"],
    }
    noisy = mos + rng.normal(0, 15.0, 80)
    return build_comparison(
        [
            (base, rows(noisy)),
            (
                tools,
                [
                    {**row, "quality_score": None}
                    for row in rows(
                        noisy, **{"tool:BRISQUE": mos + rng.normal(0, 5.0, 80), "tool:NIQE": mos}
                    )
                ],
            ),
        ],
        bootstrap=bootstrap,
    )


def test_the_paired_differences_figure_has_a_marker_per_line_and_difference(tmp_path: Path) -> None:
    doc = comparison()
    figures = comparison_figures(doc)
    assert [named.name for named in figures] == ["paired-differences"]
    written = write_figures(figures, tmp_path)
    assert [p.name for p in written] == ["paired-differences.svg", "paired-differences.pdf"]
    assert written[1].read_bytes().startswith(b"%PDF")
    root = svg_tree(written[0])
    for name in ("srcc", "plcc", "krcc"):  # two lines differ from the baseline
        assert len(list(element(root, f"paired-differences-{name}").iter(f"{SVG}use"))) == 2
    texts = {node.text for node in root.iter(f"{SVG}text")}
    # Lines by their jobs' names (the tools job's escaped as text), not by ids.
    assert {"<b>tools</b>: BRISQUE", "<b>tools</b>: NIQE", "ΔSRCC"} <= texts
    # The long name wraps onto a second line and ends in an ellipsis, inside the figure.
    assert "Difference from the baseline a-very-long-job-name-a-very-long-job-" in texts
    assert any(text and text.endswith("…") and "a-very-long" in text for text in texts)
    # No difference to show (every line the baseline's): no figure.
    single = {**doc, "lines": doc["lines"][:1]}
    assert comparison_figures(single) == []


def _title_inside(named: Any) -> tuple[str, bool]:
    """The figure's title and whether its drawn extent lies inside the figure."""
    figure = named.figure
    title = figure.axes[0].title
    box = title.get_window_extent(figure.canvas.get_renderer())
    edge = figure.bbox
    return title.get_text(), (
        edge.x0 - 1 <= box.x0 and box.x1 <= edge.x1 + 1 and box.y1 <= edge.y1 + 1
    )


@pytest.mark.parametrize(
    "name",
    [
        "livec-all-tools-BRISQUE+NIQE+PIQE+MUSIQ+CLIPIQA+HyperIQA+DBCNN",  # a default name
        "koniq10k-test-agent-gpt-4o-2024-08-06+claude-3-5-sonnet-20241022",
        "x" * 150,
        "short",
    ],
)
def test_the_differences_title_stays_inside_the_figure(name: str) -> None:
    """A default job name ran off the figure ("...BRISQUE+NIQE+F"): the title wraps, and is cut
    to an ellipsis only when two lines cannot hold it."""
    from agentic_iqa.reports.names import line_names

    doc = comparison(bootstrap=0)
    doc["jobs"][0]["name"] = name
    (named,) = comparison_figures(line_names(doc))
    svg(named)  # drawn as written
    title, inside = _title_inside(named)
    assert inside, title
    assert title.count("\n") <= 1
    if len(name) < 80:  # two lines hold it: every character is shown
        full = f"Difference from the baseline {name}"
        assert full in (title.replace("\n", ""), title.replace("\n", " "))
    else:
        assert title.endswith("…")


def test_the_compare_page_fits_a_1280_pixel_window_and_embeds_the_figure(tmp_path: Path) -> None:
    page = compare_html(comparison(), tmp_path / "out" / "compare.html").read_text(encoding="utf-8")
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL).group(1)
    widths = [int(w) for w in re.findall(r"width:\s*(\d+)px", page)]
    assert widths and max(widths) <= 1280  # the body's cap; nothing wider is fixed
    assert re.search(r"\.scroll \{[^}]*max-width: 100%;[^}]*overflow-x: auto;", style)
    assert re.search(r"td\.ci \{[^}]*white-space: nowrap", style)
    assert re.search(r"figure\.plot svg \{[^}]*max-width: 100%", style)
    # Every table scrolls inside its own wrapper, never the page (test_pages_in_a_browser
    # measures that they fit); every interval is a td.ci.
    assert page.count("<table") == page.count('<div class="scroll"><table') == 3
    assert page.count('<td class="ci">[') == 3 * 3 + 2 * 3
    svg = re.search(r'<figure class="plot" id="figure-paired-differences">(<svg [^>]*>)', page)
    assert svg and 'viewBox="' in svg.group(1)  # scales down with max-width
    assert "&lt;b&gt;tools&lt;/b&gt;" in page and "<b>tools</b>" not in page
