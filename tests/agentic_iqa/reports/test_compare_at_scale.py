"""``eval compare`` of two big jobs reads each job's columns once, a page at a time
(the ranks of its ids too), the second job's without the ranks and image digests only the
baseline's are used, and says exactly what the comparison of the jobs' exported rows says.

The jobs are clones of a real one-item PIQE job (``clone``: the tables a worker writes) of
20,000 items, most of them done so that the shared items are resampled m out of n, the
baseline's items on three images (resampled by image), the other's scores moved and some of
its ids not the baseline's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select, update

from agentic_iqa.db import dispose_engines, make_engine
from agentic_iqa.db.about import job_summary
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.exports import PAGE, report_columns
from agentic_iqa.db.models import JobItem, ToolLog
from agentic_iqa.reports.compare import build_comparison
from agentic_iqa.reports.names import line_names
from agentic_iqa.reports.pairing import _metric_draws, _paired_ci
from tests.agentic_iqa.reports.conftest import scratch_database
from tests.agentic_iqa.reports.test_reports_read_columns import cli, clone, one_item_job, statements

# Left out of the README's test command (CI runs it): jobs of 20,000 items on both
# databases.
pytestmark = pytest.mark.slow

ITEMS = 20_000


@pytest.fixture(scope="module")
def big_jobs(
    request: pytest.FixtureRequest, cli_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Two clones of a one-item PIQE job, on SQLite or PostgreSQL: ``base`` (80 % done, its
    items on three images) and ``other`` (60 % done, its raw scores moved, one id in nine
    its own)."""
    kind = request.param
    folder = tmp_path_factory.mktemp(f"compare-{kind}")
    url = scratch_database(kind, folder, request)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        template = one_item_job(folder, 2)
        base = clone(url, template, ITEMS, done=0.8, name="base")
        other = clone(url, template, ITEMS, done=0.6, name="other")
        with session_scope(make_engine(url)) as session:
            for shown in range(3):
                session.execute(
                    update(JobItem)
                    .where(JobItem.job_id == base, JobItem.line % 3 == shown)
                    .values(image=f"/nowhere/shown{shown}.png")
                )
            session.execute(
                update(ToolLog)
                .where(ToolLog.run_id.in_(select(JobItem.run_id).where(JobItem.job_id == other)))
                .values(raw_score=ToolLog.raw_score * 1.5 + ToolLog.id % 17)
            )
            session.execute(
                update(JobItem)
                .where(JobItem.job_id == other, JobItem.line % 9 == 0)
                .values(item_key=JobItem.item_key + "-other")
            )
        yield {"url": url, "base": base, "other": other}
    dispose_engines(url)


def _described(url: str, jobs: list[str], *, from_rows: bool) -> list[tuple[dict[str, Any], Any]]:
    """The jobs as ``eval compare`` describes them, with their columns read from the database
    (the baseline's with ranks and image digests) or their exported rows."""
    from agentic_iqa.cli.results import export_rows, read_vlm_summary

    engine = make_engine(url)
    described = []
    for index, job_id in enumerate(jobs):
        with read_scope(engine) as session:
            about = {**job_summary(session, job_id), "vlm": read_vlm_summary(engine, job_id)}
            data = (
                list(export_rows(engine, job_id)[1])
                if from_rows
                else report_columns(session, job_id, identities=True, baseline=index == 0)
            )
        described.append((about, data))
    return described


@pytest.mark.parametrize("big_jobs", ["sqlite", "postgres"], indirect=True)
def test_a_comparison_of_big_jobs_is_the_comparison_of_their_exported_rows(big_jobs, monkeypatch):
    """``eval compare`` says, number for number, what the comparison of the jobs' exported
    rows says: the shared items, their MOS, the paired intervals (by image for the baseline,
    m out of n) and each line's own correlations."""
    url, base, other = big_jobs["url"], big_jobs["base"], big_jobs["other"]
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
    for jobs in ([base, other], [other, base]):
        expected = build_comparison(_described(url, jobs, from_rows=True), bootstrap=60, seed=3)
        shown = json.loads(
            cli("eval", "compare", *jobs, "--json", "--bootstrap", "60", "--seed", "3")
        )
        assert shown == json.loads(json.dumps(line_names(expected), default=str))
        first, second = expected["jobs"]
        assert first["items"] == second["items"] == ITEMS
        assert 0 < second["shared_with_baseline"] < ITEMS
        difference = expected["lines"][1]["difference"]
        assert difference["n"] > 10_000 and difference["srcc"] != 0.0
        assert difference["srcc_ci"][0] < difference["srcc"] < difference["srcc_ci"][1]


@pytest.mark.parametrize("big_jobs", ["sqlite"], indirect=True)
def test_a_comparisons_columns_are_read_a_page_at_a_time(big_jobs, monkeypatch):
    """Each job's items in pages, by id, and its ids' ranks a page at a time too (not one
    numpy call per item, as a million items once took); the job compared with the baseline
    is read with neither ranks nor image digests, nor any column a comparison does not use."""
    engine = make_engine(big_jobs["url"])
    calls = []
    searchsorted = np.searchsorted

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return searchsorted(*args, **kwargs)

    monkeypatch.setattr(np, "searchsorted", counted)
    pages = ITEMS // PAGE + 1
    with statements() as sent, read_scope(engine) as session:
        base = report_columns(session, big_jobs["base"], identities=True)
        other = report_columns(session, big_jobs["other"], identities=True, baseline=False)
    assert len(calls) <= 3 * pages, len(calls)  # a page's tool calls, its ids' ranks
    assert len([statement for statement in sent if "job_items" in statement]) <= 6 * pages
    assert base.size == other.size == ITEMS
    assert base.key_rank is not None and base.image is not None
    assert np.array_equal(np.sort(base.key_rank), np.arange(ITEMS))
    assert other.key_rank is None and other.image is None and other.key is not None
    for columns in (base, other):
        assert columns.distortion.size == columns.level.size == columns.score.size == 0
        assert columns.raw["PIQE"].size == ITEMS


def test_paired_draws_by_image_compute_a_repeated_draw_once():
    """Resampled by image, a row of the bootstrap that draws the images an earlier row drew,
    in the same order, takes its value: with one image every row is the same draw, and the
    metric is computed once for each job (a million items' KRCC a thousand times took
    minutes); the interval is what every row computed afresh gives."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=600)
    a, b = y + rng.normal(size=600), y + 0.5 * rng.normal(size=600)
    sizes: list[int] = []

    def metric(x: np.ndarray, truth: np.ndarray) -> float:
        sizes.append(x.size)
        return float(np.corrcoef(x, truth)[0, 1])

    one = [np.arange(600)]
    estimate = metric(b, y) - metric(a, y)
    sizes.clear()
    interval = _paired_ci(_metric_draws(metric, a, b, y, one), 1, 1000, 0, estimate)
    assert sizes == [600, 600]
    assert interval == [estimate, estimate]
    three = np.array_split(np.arange(600), 3)
    interval = _paired_ci(_metric_draws(metric, a, b, y, three), 3, 1000, 0, estimate)
    assert len(sizes) <= 2 + 2 * 3**3  # each ordered draw of three images once

    def afresh(index: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metric(b[at], y[at]) - metric(a[at], y[at])
                for at in (np.concatenate([three[group] for group in drawn]) for drawn in index)
            ]
        )

    assert interval == _paired_ci(afresh, 3, 1000, 0, estimate)
