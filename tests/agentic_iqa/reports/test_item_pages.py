"""The report's items one by one: a real traced job's report page holds each item's row, worst
disagreement first, and its trace (tool scores, reasoning, replan, failure), a hostile id
inert; a big job's page holds the worst, the best, failures and a seeded sample; thumbnails
are bounded and a missing image is a placeholder with its reason."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

from agentic_iqa.db import make_engine
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.item_outline import Outline, read_item_pages
from agentic_iqa.db.models import JobItem
from agentic_iqa.db.traces import job_traces
from agentic_iqa.reports.item_pages import (
    BEST,
    FAILED,
    LIST_LIMIT,
    SAMPLE,
    THUMBNAIL_PX,
    WORST,
    Choice,
    Thumbnails,
    choose_items,
    item_pages,
    thumbnail,
)
from agentic_iqa.reports.item_pages_html import script_json
from agentic_iqa.reports.trace import Ranking
from tests.agentic_iqa.reports.test_reports_read_columns import cli
from tests.agentic_iqa.reports.traced_job import HOSTILE, TracedJob, make_traced_job

#: An item id that would end the page's script, were it written as itself.
SCRIPT_ID = "</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, example_images: dict[str, Path]
) -> Iterator[TracedJob]:
    """The traced job (SQLite), its hostile item renamed to an id that would end a script."""
    folder = tmp_path_factory.mktemp("item-pages")
    for job in make_traced_job(folder, example_images):
        with session_scope(make_engine(job.url)) as session:
            session.execute(
                update(JobItem)
                .where(JobItem.job_id == job.job_id, JobItem.item_key == HOSTILE)
                .values(item_key=SCRIPT_ID)
            )
        yield job


def page_data(page: Path) -> dict[str, Any]:
    """The page's items document, read as its script reads it."""
    found = re.search(
        r'<script type="application/json" id="items-data">(.*?)</script>',
        page.read_text(encoding="utf-8"),
        re.DOTALL,
    )
    assert found, "no items document on the page"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


@pytest.fixture(scope="module")
def report_page(traced: TracedJob) -> Path:
    page = traced.folder / "report.html"
    cli("eval", "report", traced.job_id, "--html", str(page), "--bootstrap", "0")
    return page


def test_the_page_holds_every_item_worst_disagreement_first(traced, report_page):
    data = page_data(report_page)
    rows = data["rows"]
    with read_scope(make_engine(traced.url)) as session:
        traces = {trace["item"]["id"]: trace for _, trace in job_traces(session, traced.job_id)}
    assert sorted(row["id"] for row in rows) == sorted(traces)
    # Worst first: the largest |rank error| (a wrong answer counts 1), then no truth, by line.
    ranked = [row for row in rows if row["disagreement"] is not None]
    expected = sorted(ranked, key=lambda row: (-row["disagreement"], row["line"]))
    assert rows[: len(ranked)] == expected
    worst = max(
        (t for t in traces.values() if t["truth"]["kind"] == "mos" and t["truth"]["rank_error"]),
        key=lambda t: (abs(t["truth"]["rank_error"]), -t["item"]["line"]),
    )
    assert rows[0]["id"] == worst["item"]["id"]
    assert rows[0]["rank_error"] == worst["truth"]["rank_error"] != 0
    assert [row["why"] for row in rows] == ["all"] * len(rows)
    note = report_page.read_text(encoding="utf-8")
    assert f"All {len(traces)} items, worst disagreement" in note


def test_each_rows_trace_is_the_items_trace_values_included(traced, report_page):
    rows = {row["id"]: row for row in page_data(report_page)["rows"]}
    with read_scope(make_engine(traced.url)) as session:
        traces = {trace["item"]["id"]: trace for _, trace in job_traces(session, traced.job_id)}
    for key, trace in traces.items():
        shown = rows[key]["trace"]
        assert shown["tools"] == trace["tools"] and shown["replans"] == trace["replans"]
        assert shown["answer"] == trace["answer"] and shown["item"] == trace["item"]
        assert shown["model_calls"] == trace["model_calls"] and shown["cut"] == {}
    rated = rows["rate-a"]
    assert rated["tools"] == ", ".join(dict.fromkeys(t["tool"] for t in traces["rate-a"]["tools"]))
    assert rated["trace"]["tools"][0]["raw_score"] == traces["rate-a"]["tools"][0]["raw_score"]
    assert isinstance(rated["trace"]["tools"][0]["raw_score"], float)
    assert rated["cost_usd"] == traces["rate-a"]["usage"]["cost_usd"] > 0
    assert rows["blurry"]["trace"]["answer"]["reasoning"] == "the edges are soft"
    assert rows["blurry"]["trace"]["replans"][0]["reason"] == "look closer at the [red]edges[/red]"
    assert rows["mcq"]["verdict"] == "right" and rows["mcq"]["disagreement"] == 0.0
    broken = rows["broken"]
    assert broken["status"] == "failed" and broken["trace"]["item"]["error"]
    assert broken["trace"]["item"]["error"] == traces["broken"]["item"]["error"]


def test_a_hostile_id_stays_text(report_page):
    text = report_page.read_text(encoding="utf-8")
    assert SCRIPT_ID not in text and "<img src=x" not in text
    # Two scripts of the section, each closed once: nothing in the data ended one early.
    section = text[text.index('<section id="items-section">') :]
    assert section.count("</script>") == 2
    assert any(row["id"] == SCRIPT_ID for row in page_data(report_page)["rows"])
    assert script_json({"id": "a</script>&\u2028"}) == (
        '{"id":"a\\u003c/script\\u003e\\u0026\\u2028"}'
    )


def test_thumbnails_are_bounded_and_a_missing_image_says_why(traced, report_page, tmp_path):
    data = page_data(report_page)
    from base64 import b64decode
    from io import BytesIO

    from PIL import Image

    assert data["images"]
    for uri in data["images"].values():
        assert uri.startswith("data:image/jpeg;base64,")
        with Image.open(BytesIO(b64decode(uri.split(",", 1)[1]))) as picture:
            assert max(picture.size) <= THUMBNAIL_PX
    assert data["missing"] == {}  # the corrupt file's item failed before its image was kept
    assert [row["image"] for row in data["rows"] if row["id"] == "broken"] == [None]
    corrupt = str(traced.folder / "corrupt.png")
    assert thumbnail(corrupt, 160, 70) == (None, "not a readable image: UnidentifiedImageError")
    assert thumbnail(str(tmp_path / "gone.png"), 160, 70) == (None, "file not found")
    assert thumbnail("s3://bucket/a.png", 160, 70)[0] is None
    thumbs = Thumbnails()
    thumbs.add(str(tmp_path / "gone.png"))
    thumbs.add(None)
    assert thumbs.missing == {str(tmp_path / "gone.png"): "file not found"}


def outline(count: int, *, failed_every: int = 0, mcq: int = 0) -> Outline:
    ids = np.arange(1, count + 1, dtype=np.int64) * 3  # ids need not be consecutive
    failed = np.zeros(count, dtype=bool)
    if failed_every:
        failed[::failed_every] = True
    wrong = np.full(count, np.nan)
    wrong[:mcq] = np.arange(mcq) % 2
    return Outline(ids, failed, wrong)


def test_a_big_jobs_page_holds_the_worst_the_best_failures_and_a_sample():
    items = outline(10_000, failed_every=40)
    scored = [i for i in range(10_000) if not items.failed[i]]
    rng = np.random.default_rng(5)
    mos = rng.normal(size=len(scored))
    score = mos + rng.normal(size=len(scored))
    ranking = Ranking(
        (int(items.row_id[i]), float(s), float(m))
        for i, s, m in zip(scored, score, mos, strict=True)
    )
    choice = choose_items(items, ranking, 500, seed=1)
    assert choice.shown == 500 and choice.total == 10_000
    kinds = {
        kind: [row for row, why in choice.why.items() if why == kind]
        for kind in (WORST, BEST, FAILED, SAMPLE)
    }
    assert [len(kinds[kind]) for kind in (WORST, BEST, FAILED, SAMPLE)] == [200, 100, 50, 150]
    ids, errors = ranking.rank_errors()
    error = dict(zip(ids.tolist(), np.abs(errors).tolist(), strict=True))
    cut = sorted(error.values(), reverse=True)
    assert min(error[row] for row in kinds[WORST]) >= cut[199]
    assert max(error[row] for row in kinds[BEST]) <= cut[-100]
    assert all(items.failed[np.searchsorted(items.row_id, row)] for row in kinds[FAILED])
    assert choose_items(items, ranking, 500, seed=1) == choice  # seeded
    other = choose_items(items, ranking, 500, seed=2)
    assert {r for r, w in other.why.items() if w == SAMPLE} != set(kinds[SAMPLE])
    small = choose_items(outline(30), Ranking([]), 500)
    assert small.shown == 30 and set(small.why.values()) == {"all"}
    assert choose_items(items, ranking, 0).shown == 0
    with pytest.raises(ValueError, match="0 or more"):
        choose_items(items, ranking, -1)


def test_wrong_answers_are_the_worst(traced):
    items = outline(1000, mcq=400)  # 200 wrong answers, 200 right, no MOS
    choice = choose_items(items, Ranking([]), 100)
    worst = [row for row, why in choice.why.items() if why == WORST]
    assert len(worst) == 40
    assert all(items.wrong[np.searchsorted(items.row_id, row)] == 1.0 for row in worst)
    best = [row for row, why in choice.why.items() if why == BEST]
    assert all(items.wrong[np.searchsorted(items.row_id, row)] == 0.0 for row in best)


def test_read_item_pages_reads_only_the_chosen_traces(traced):
    with read_scope(make_engine(traced.url)) as session:
        pages = read_item_pages(session, traced.job_id, limit=3, seed=0)
    assert pages.choice.total == 6 and len(pages.rows) == pages.choice.shown == 3
    assert {row["why"] for row in pages.rows} <= {WORST, BEST, FAILED, SAMPLE}
    assert pages.rows[0]["why"] == WORST


def test_a_reference_shared_by_items_is_one_thumbnail(traced, example_images):
    """Full-reference items show their reference beside the image, a reference shared by
    several items embedded once; a long text and a long list are cut, and say so."""
    with read_scope(make_engine(traced.url)) as session:
        traces = [trace for _, trace in job_traces(session, traced.job_id)][:3]
    reference = str(example_images["original"])
    for index, trace in enumerate(traces):
        trace["item"]["reference"] = reference
        trace["item"]["image"] = str(example_images[("blur3", "noise3", "jpeg4")[index]])
    traces[0]["answer"]["reasoning"] = "why " * 1000
    calls = len(traces[0]["tools"])
    traces[0]["tools"] = traces[0]["tools"] * 50
    choice = Choice({row: "all" for row in range(3)}, 3, 500)
    pages = item_pages(list(enumerate(traces)), choice, traced.job_id)
    assert set(pages.thumbnails.images) == {reference, *(t["item"]["image"] for t in traces)}
    assert len(pages.thumbnails.images) == 4 and pages.thumbnails.missing == {}
    shown = next(row for row in pages.rows if row["id"] == traces[0]["item"]["id"])
    assert shown["reference"] == reference
    assert len(shown["trace"]["answer"]["reasoning"]) < 2100
    assert shown["trace"]["answer"]["reasoning"].endswith("… (cut)")
    assert len(shown["trace"]["tools"]) == LIST_LIMIT
    assert shown["trace"]["cut"] == {"tools": 50 * calls}


def test_sqlite_finds_each_run_by_its_id(traced):
    """The statements the page reads name SQLite's indexes, and SQLite gets them: statistics
    taken while the tables were small once made it scan ``runs`` for every item."""
    from agentic_iqa.db import item_outline, traces

    engine = make_engine(traced.url)
    with engine.connect() as connection:
        for statement in (traces._RANKED_PAGE, traces._PAGE, item_outline._OUTLINE):
            sql = str(statement.compile(engine))
            assert f"runs INDEXED BY {traces.RUNS_BY_ID}" in sql
            plan = connection.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql}", ("job", "done", 0, 10, 0)[: sql.count("?")]
            ).all()
            steps = " | ".join(str(row[-1]) for row in plan)
            assert "SCAN runs" not in steps and "runs USING INDEX" in steps, steps


def test_items_on_page_bounds_the_section_or_leaves_it_out(traced, report_page):
    few = traced.folder / "few.html"
    cli("eval", "report", traced.job_id, "--html", str(few), "--items-on-page", "2")
    shown = page_data(few)["rows"]
    assert [row["why"] for row in shown] == ["worst", "sample"]
    assert shown[0]["disagreement"] == max(
        row["disagreement"] or 0 for row in page_data(report_page)["rows"]
    )
    text = few.read_text(encoding="utf-8")
    assert "2 of 6 items (at most 2, --items-on-page)" in text
    assert f"eval show {traced.job_id[:8]} ITEM" in text
    none = traced.folder / "none.html"
    cli("eval", "report", traced.job_id, "--html", str(none), "--items-on-page", "0")
    assert 'id="items-section"' not in none.read_text(encoding="utf-8")
    from agentic_iqa.cli import app
    from tests.agentic_iqa.reports.test_reports_read_columns import runner

    refused = runner.invoke(app, ["eval", "report", traced.job_id, "--items-on-page", "-1"])
    assert refused.exit_code == 2 and "--items-on-page" in refused.output
