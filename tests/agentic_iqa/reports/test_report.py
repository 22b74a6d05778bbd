"""Job reports from exported rows: counts, failures by reason, correlations, MCQ, text and HTML."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentic_iqa.reports.errors import failure_reason
from agentic_iqa.reports.export import export_columns, write_rows
from agentic_iqa.reports.metrics import srcc
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.report_html import render_html
from agentic_iqa.reports.report_text import render_text


def job_rows(n: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    """Rows as the export command produces them: a scoring job with MOS, some failures."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        mos = float(rng.uniform(0, 100))
        status = "failed" if i % 10 == 9 else "done"
        agent = 1 + 4 * mos / 100 + float(rng.normal(0, 0.4)) if status == "done" else None
        row: dict[str, Any] = {
            "item_id": f"img{i:03d}.jpg",
            "line": i + 2,
            "image": f"/data/img{i:03d}.jpg",
            "reference": None,
            "query": "Rate the quality of this image.",
            "status": status,
            "error": f"tool 'NIQE' timed out after {30 + i} s" if status == "failed" else None,
            "run_id": f"run-{i}",
            "final_answer": "Good" if agent else None,
            "quality_score": agent,
            "mos": mos,
            "answer_truth": None,
            "correct": None,
            "severities": "Blurs=none",
            "fallbacks": 1 if i % 7 == 0 else 0,
            "tools": "BRISQUE;NIQE" if i % 2 else "BRISQUE",
            "tool:BRISQUE": 1 + 4 * mos / 100 + float(rng.normal(0, 1.0)),
            "tool:NIQE": (1 + 4 * mos / 100 + float(rng.normal(0, 0.8))) if i % 2 else None,
        }
        rows.append(row)
    rows.append(
        {
            **rows[0],
            "item_id": "queued",
            "status": "queued",
            "quality_score": None,
            "mos": None,
            "tool:BRISQUE": None,
            "tool:NIQE": None,
            "fallbacks": 0,
        }
    )
    rows.append(
        {
            **rows[0],
            "item_id": "missing",
            "status": "failed",
            "quality_score": None,
            "error": "image 'x.jpg' on line 12 not found",
            "mos": None,
            "tool:BRISQUE": None,
            "tool:NIQE": None,
            "fallbacks": 0,
        }
    )
    return rows


def test_counts_failures_and_tool_usage() -> None:
    report = build_report(job_rows(), bootstrap=100)
    assert report["counts"] == {
        "total": 62,
        "done": 54,
        "failed": 7,
        "by_status": {"done": 54, "failed": 7, "queued": 1},
    }
    failures = report["failures"]
    assert failures["total"] == 7 and failures["distinct_reasons"] == 2
    top = failures["top"][0]
    assert top["reason"] == "tool '…' timed out after N s" and top["count"] == 6
    assert top["example_item"] == "img009.jpg" and top["example_error"].endswith("39 s")
    assert report["tool_usage"] == {"BRISQUE": 62, "NIQE": 30}
    assert report["fallbacks"]["items"] == 9
    assert json.loads(json.dumps(report)) == report  # JSON-able, to store with the job


def test_agent_and_tool_correlations_use_the_right_items() -> None:
    rows = job_rows()
    report = build_report(rows, bootstrap=200)
    done = [r for r in rows if r["status"] == "done" and r["mos"] is not None]
    agent = report["agent"]
    assert agent["n"] == len(done) == 54
    assert agent["srcc"] == pytest.approx(
        srcc([r["quality_score"] for r in done], [r["mos"] for r in done])
    )
    assert agent["srcc_ci"][0] <= agent["srcc"] <= agent["srcc_ci"][1]
    tools = {t["tool"]: t for t in report["tools"]}
    assert list(tools) == ["BRISQUE", "NIQE"]
    niqe_rows = [r for r in rows if r["tool:NIQE"] is not None and r["mos"] is not None]
    assert tools["NIQE"]["n"] == len(niqe_rows) == 30 and tools["NIQE"]["scored"] == 30
    assert tools["NIQE"]["srcc"] == pytest.approx(
        srcc([r["tool:NIQE"] for r in niqe_rows], [r["mos"] for r in niqe_rows])
    )
    same = [r for r in niqe_rows if r["quality_score"] is not None]
    assert tools["NIQE"]["agent_n_same_items"] == len(same)
    assert tools["NIQE"]["agent_srcc_same_items"] == pytest.approx(
        srcc([r["quality_score"] for r in same], [r["mos"] for r in same])
    )
    assert tools["BRISQUE"]["n"] == 60


def test_without_enough_mos_the_correlation_says_why() -> None:
    rows = [{**row, "mos": None} for row in job_rows(10)]
    rows[0]["mos"] = 50.0
    report = build_report(rows, bootstrap=50)
    assert report["agent"]["srcc"] is None and "at least 3" in report["agent"]["reason"]
    assert report["items_with_mos"] == 1
    assert "at least 3" in render_text(report)


def test_mcq_accuracy_over_done_items_with_known_truth() -> None:
    base = {"status": "done", "quality_score": None, "mos": None}
    rows = [
        {**base, "final_answer": "B", "answer_truth": "B"},
        {**base, "final_answer": "C. Noise", "answer_truth": "B"},
        {**base, "final_answer": "A", "answer_truth": "A"},
        {**base, "final_answer": "A", "answer_truth": None},
        {**base, "status": "failed", "final_answer": None, "answer_truth": "D", "error": "x"},
    ]
    mcq = build_report(rows, bootstrap=0)["mcq"]
    # The failed item is a wrong answer: 2 right of 4; answered only, 2 of 3.
    assert mcq == {
        "accuracy": 0.5,
        "n": 4,
        "correct": 2,
        "answered": 3,
        "answered_accuracy": pytest.approx(2 / 3),
        "no_answer": 0,
        "failed": 1,
        "not_answered": 1,
        "accuracy_ci": None,
        "not_run": 0,
        "by_type": [],
        "questions": 4,
        "withheld": 0,
        "reason": None,
    }
    kinds = ["yes-or-no", "what", "what", None, "what"]
    typed = [{**row, "question_type": kind} for row, kind in zip(rows, kinds, strict=True)]
    assert build_report(typed, bootstrap=0)["mcq"]["by_type"] == [
        {
            "type": "what",
            "accuracy": pytest.approx(1 / 3),
            "n": 3,
            "correct": 1,
            "answered": 2,
            "answered_accuracy": 0.5,
            "no_answer": 0,
            "failed": 1,
            "not_answered": 1,
        },
        {
            "type": "yes-or-no",
            "accuracy": 1.0,
            "n": 1,
            "correct": 1,
            "answered": 1,
            "answered_accuracy": 1.0,
            "no_answer": 0,
            "failed": 0,
            "not_answered": 0,
        },
    ]
    assert build_report(rows[3:4])["mcq"] is None


def test_rows_read_back_from_a_csv_export_give_the_same_report(tmp_path: Path) -> None:
    rows = job_rows()
    path = tmp_path / "rows.csv"
    write_rows(rows, path, "csv", export_columns(["BRISQUE", "NIQE"]))
    with path.open(newline="", encoding="utf-8") as handle:
        again = build_report(csv.DictReader(handle), bootstrap=100)
    assert again == build_report(rows, bootstrap=100)


def test_text_rendering_lists_the_essentials() -> None:
    text = render_text(build_report(job_rows(), bootstrap=100))
    assert "Items: 62 (done 54, failed 7, queued 1)" in text
    assert "SRCC" in text and "95% CI" in text and "PLCC logistic" in text
    assert re.search(r"BRISQUE\s+\[1,5\]\s+60\s+60\s+0\.\d{3}", text) and "NIQE" in text
    assert "Tools used: BRISQUE 62, NIQE 30" in text
    assert "6  tool '…' timed out after N s" in text


def test_html_report_is_self_contained_with_plot_and_tables(tmp_path: Path) -> None:
    rows = job_rows()
    report = build_report(rows, bootstrap=100)
    path = render_html(report, rows, tmp_path / "report.html", title="LIVE-C <dev>")
    page = path.read_text(encoding="utf-8")
    assert "<title>LIVE-C &lt;dev&gt;</title>" in page
    plot = re.search(
        r'<figure class="plot" id="figure-scatter-agent"><svg .*?</svg>', page, re.DOTALL
    )
    assert plot and '<g id="scatter-agent-points">' in plot.group(0)
    assert page.count('<tr class="tool">') == 2
    assert '<td class="text">BRISQUE</td>' in page and '<td class="text">NIQE</td>' in page
    assert 'id="failures"' in page and "timed out after N s" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page


def test_html_report_without_scores_has_no_plot(tmp_path: Path) -> None:
    rows = [{"item_id": "a", "status": "failed", "error": "boom"}]
    page = render_html(build_report(rows), rows, tmp_path / "r.html").read_text()
    assert "data:image/png" not in page and "No done item" in page
    assert "no item has a MOS" in page


def test_failure_reason_blanks_item_specific_parts() -> None:
    assert (
        failure_reason("image '/a/b.jpg' on line 7 not found\ntraceback")
        == "image '…' on line N not found"
    )
    assert failure_reason(None) == failure_reason("  ") == "(no error message)"


def test_credentials_in_stored_errors_never_reach_the_report() -> None:
    rows = [
        {
            "item_id": "a",
            "status": "failed",
            "mos": None,
            "quality_score": None,
            "error": "plan failed: APIConnectionError at http://bob:hunter2-key@vlm:8000/v1",
        }
    ]
    document = build_report(rows, bootstrap=0)
    text = json.dumps(document) + render_text(document)
    assert "hunter2-key" not in text
    assert "http://***@vlm:8000/v1" in text


# -- the job in the title, and which fit is behind PLCC logistic ----------------------------------

JOB = {
    "id": "1a2b3c4d-0000-4000-8000-000000000000",
    "name": "LIVE-C <dev> & co",
    "status": "done",
    "created_at": "2026-11-26T05:34:44.123456+00:00",
    "finished_at": "2026-11-26T05:40:02+00:00",
    "query": "Is <b>this</b> sharp?",
    "items_with_own_query": 2,
    "backend": "openai",
    "model": "http://bob:hunter2-key@vlm:8000 qwen<2.5>",
    "tools": None,
}


def weak_rows(n: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    """Done items whose score follows MOS linearly under heavy noise: a free 5PL bends here."""
    rng = np.random.default_rng(seed)
    pred = rng.uniform(1.0, 5.0, n)
    mos = 20.0 * pred + rng.normal(0.0, 35.0, n)
    return [
        {"item_id": f"i{i}", "status": "done", "quality_score": float(p), "mos": float(m)}
        for i, (p, m) in enumerate(zip(pred, mos, strict=True))
    ]


def test_html_title_and_header_name_the_job_escaped(tmp_path: Path) -> None:
    rows = job_rows()
    report = {"job": JOB, **build_report(rows, bootstrap=0)}
    page = render_html(report, rows, tmp_path / "r.html").read_text(encoding="utf-8")
    title = "Evaluation job report: LIVE-C &lt;dev&gt; &amp; co (1a2b3c4d)"
    assert f"<title>{title}</title>" in page and f"<h1>{title}</h1>" in page
    header = re.search(r'<table id="job">(.*?)</table>', page).group(1)
    # A token too long to be a word (the job's id) may break anywhere; words never do.
    assert '<span class="long">1a2b3c4d-0000-4000-8000-000000000000</span>' in header
    assert header.count('<span class="long">') == 1
    header = re.sub(r"</?span[^>]*>", "", header)
    cells = dict(re.findall(r'<th class="text">([^<]*)</th><td class="text">([^<]*)</td>', header))
    assert cells == {
        "job": "1a2b3c4d-0000-4000-8000-000000000000",
        "name": "LIVE-C &lt;dev&gt; &amp; co",
        "submitted": "2026-11-26 05:34:44 UTC",
        "finished": "2026-11-26 05:40:02 UTC",
        "status": "done",
        "query": "Is &lt;b&gt;this&lt;/b&gt; sharp? (2 item(s) have their own query)",
        "backend": "openai",
        "model": "http://***@vlm:8000 qwen&lt;2.5&gt;",
    }
    assert "<b>this</b>" not in page and "hunter2" not in page
    text = render_text(report)
    assert text.startswith(
        "Job:        1a2b3c4d-0000-4000-8000-000000000000\nName:       LIVE-C <dev> & co\n"
    )
    assert "Backend:    openai\n" in text and "hunter2" not in text
    # Without a job (a report built from a CSV someone sent), the generic title.
    assert (
        "<title>Evaluation job report</title>"
        in render_html(build_report(rows, bootstrap=0), rows, tmp_path / "plain.html").read_text()
    )


def test_the_report_says_which_monotone_fit_gave_plcc_logistic(tmp_path: Path) -> None:
    rows = weak_rows()
    report = build_report(rows, bootstrap=0)
    agent = report["agent"]
    assert agent["logistic_fit"] == "logistic5" and agent["logistic_note"] is None
    assert agent["plcc"] == pytest.approx(0.632, abs=0.001)
    # Monotone: well below the 0.832 a free 5PL reaches on these 20 items.
    assert agent["plcc"] < agent["plcc_logistic"] < 0.75
    assert json.loads(json.dumps(report))["agent"]["logistic_fit"] == "logistic5"
    text = render_text(report)
    assert re.search(r"PLCC logistic\s+0\.\d{3}  \(monotone 5-parameter logistic\)\n", text)
    page = render_html(report, rows, tmp_path / "r.html").read_text(encoding="utf-8")
    assert '<td class="text">5-parameter logistic</td>' in page
    assert "a monotone fit of scores to MOS" in page
    few = build_report(rows[:7], bootstrap=0)["agent"]
    assert few["logistic_fit"] == "logistic3" and "7 points are too few" in few["logistic_note"]
    assert "(monotone 3-parameter logistic; 7 points are too few" in render_text(
        build_report(rows[:7], bootstrap=0)
    )
