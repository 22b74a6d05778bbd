"""The HTML pages as a reader sees them: laid out by headless Chromium at 800, 1280 and 1920
pixels (:mod:`tests.browser`), nothing past the window's edge or cut off in a cell, every
confidence interval on one line, every row label a few words wide, every table inside the page
and the window (no sideways scrolling, KRCC in view), and no word broken inside itself
("5-paramet er")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentic_iqa.reports.compare_html import render_html as compare_html
from agentic_iqa.reports.names import line_names
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.report_html import render_html
from agentic_iqa.reports.sweeps import group_table, render_group_html
from tests.agentic_iqa.reports.test_figures import comparison
from tests.agentic_iqa.reports.test_figures_for_papers import metric_rows, sweep
from tests.browser import layout

# Left out of the README's test command (CI runs it): pages laid out in headless
# Chromium.
pytestmark = pytest.mark.slow


def assert_readable(facts: dict[str, Any], *, cis: int) -> None:
    """What makes a page readable in a window ``facts["width"]`` wide."""
    assert facts["document_width"] <= facts["width"]  # no sideways scrolling of the page
    assert facts["past_right_edge"] == []  # nothing drawn past the window's edge
    assert facts["clipped_cells"] == []  # no cell's content wider than the cell
    assert [cell for cell in facts["ci_cells"] if cell["lines"] != 1] == []
    assert len(facts["ci_cells"]) == cis
    for cell in facts["label_cells"]:
        # A label wraps between words or, a long word, a dozen letters a line at least.
        assert cell["lines"] == 1 or len(cell["text"]) / cell["lines"] >= 12, cell
    for table in facts["tables"]:
        assert table["wrapper_scroll"] <= table["wrapper_client"], table  # all of it shows
        assert table["right"] <= facts["width"], table  # its last column in the window
    assert facts["broken_words"] == []  # words wrap between words, or after a hyphen


@pytest.mark.parametrize("width", [800, 1280, 1920])
def test_the_compare_page_is_readable(tmp_path: Path, width: int) -> None:
    doc = comparison()  # a 250-character job name, a tools job with two tools, intervals
    page = compare_html(line_names(doc, {"bbbbbbbb-2": "pyiqa metrics"}), tmp_path / "compare.html")
    facts = layout(page, width)
    assert facts["width"] == width
    # Three lines, three intervals each against MOS and two lines' differences from the baseline.
    assert_readable(facts, cis=3 * 3 + 3 * 3)
    labels = {cell["text"]: cell for cell in facts["label_cells"]}
    assert labels["pyiqa metrics: BRISQUE"]["lines"] == 1
    assert {"jobs", "lines", "differences"} == {t["table"].split("#")[1] for t in facts["tables"]}


@pytest.mark.parametrize("width", [800, 1280, 1920])
def test_the_report_and_group_pages_are_readable(tmp_path: Path, width: int) -> None:
    rows = [
        {**row, "raw:NIQE": row["raw:BRISQUE"] / 7.0, "tool:NIQE": 3.0} for row in metric_rows()
    ]
    report = build_report(rows, bootstrap=100, metric_job=True)
    facts = layout(render_html(report, rows, tmp_path / "report.html"), width)
    assert_readable(facts, cis=2 * 3)  # two tools, SRCC, PLCC and KRCC intervals
    document = sweep()
    wide = group_table(
        "wide",
        [
            ({**about, "dataset": {"name": f"dataset-number-{k}", "split": "all"}}, figure)
            for k in range(4)
            for about, figure in [
                (
                    {"id": f"j{k}", "status": "done", "backend": "openai", "model": "gpt-4o"},
                    {
                        "tool": "BRISQUE" if k % 2 else None,
                        "kind": "correlation",
                        "n": 50,
                        "srcc": 0.6,
                        "plcc": 0.7,
                        "basis": "raw",
                        "lower_is_better": bool(k % 2),
                    },
                )
            ]
        ],
    )
    for name, table in (("group", document), ("wide", wide)):
        facts = layout(render_group_html(table, tmp_path / f"{name}.html"), width)
        assert_readable(facts, cis=0)
