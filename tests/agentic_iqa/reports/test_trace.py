"""An item's trace, read back from a finished job's database: every value the trace holds is
the stored one (tool scores, tokens, costs, replans, the answer), it is found by id or line,
an unknown id names near ones, and a stream of traces costs a constant number of statements a
page, whatever the number of items."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from scipy.stats import rankdata
from sqlalchemy import event, select, update

from agentic_iqa.db import make_engine
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.models import JobItem, ReplanRow, Run, ToolLog, VlmCall
from agentic_iqa.db.traces import ItemNotFound, item_trace, job_traces
from agentic_iqa.reports.trace import TRACE_KEYS, TRACE_VERSION
from tests.agentic_iqa.reports.conftest import scratch_database
from tests.agentic_iqa.reports.traced_job import (
    CALL_COST,
    EXPLAIN,
    HOSTILE,
    MCQ,
    TracedJob,
    make_traced_job,
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def traced(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    example_images: dict[str, Path],
) -> Iterator[TracedJob]:
    folder = tmp_path_factory.mktemp(f"traced-{request.param}")
    url = scratch_database(request.param, folder, request)
    yield from make_traced_job(folder, example_images, url)


def traces_of(job: TracedJob, **options: object) -> dict[str, dict]:
    with read_scope(make_engine(job.url)) as session:
        return {
            trace["item"]["id"]: trace
            for _, trace in job_traces(session, job.job_id, **options)  # type: ignore[arg-type]
        }


def stored_rows(job: TracedJob, model: type, run_id: str) -> list:
    with read_scope(make_engine(job.url)) as session:
        table = model.__table__
        return list(
            session.execute(
                select(table)
                .where(table.c.run_id == run_id)
                .order_by(table.c.iteration, table.c.id)
            )
        )


def test_every_item_has_a_trace_of_the_documented_keys(traced):
    traces = traces_of(traced)
    assert list(traces) == ["rate-a", "rate-b", HOSTILE, "blurry", "mcq", "broken"]
    for trace in traces.values():
        assert tuple(trace) == TRACE_KEYS
        assert trace["trace_version"] == TRACE_VERSION and trace["job_id"] == traced.job_id
    assert [trace["item"]["line"] for trace in traces.values()] == [1, 2, 3, 4, 5, 6]
    assert traces["mcq"]["item"]["query"] == MCQ and traces["blurry"]["item"]["query"] == EXPLAIN


def test_tool_calls_are_the_stored_rows_whole_image_named_so(traced):
    for trace in traces_of(traced).values():
        if trace["run"] is None:
            continue
        rows = stored_rows(traced, ToolLog, trace["run"]["id"])
        assert rows, trace["item"]["id"]
        assert [
            (t["iteration"], t["tool"], t["requested_tool"], t["raw_score"], t["score"])
            for t in trace["tools"]
        ] == [
            (r.iteration, r.tool_name, r.requested_tool, r.raw_score, r.normalized_score)
            for r in rows
        ]
        assert [t["time_s"] for t in trace["tools"]] == [r.execution_time for r in rows]
        assert [t["cached"] for t in trace["tools"]] == [r.cached for r in rows]
        assert [t["fallback"] for t in trace["tools"]] == [r.fallback for r in rows]
        assert {r.object_name for r in rows} == {"Global"}
        assert {t["object"] for t in trace["tools"]} == {"whole image"}
        assert all(1 <= t["score"] <= 5 for t in trace["tools"] if t["score"] is not None)
    # The builtin's BRISQUE has no weights here: PIQE stood in, and the trace says for what.
    stood_in = [t for t in traces_of(traced)["mcq"]["tools"] if t["fallback"]]
    assert stood_in and {t["requested_tool"] for t in stood_in} == {"BRISQUE"}
    assert all("brisque_svm_weights.pth" in t["error"] for t in stood_in)


def test_model_calls_are_the_stored_rows_priced_per_call(traced):
    traces = traces_of(traced)
    for trace in traces.values():
        if trace["run"] is None:
            assert trace["model_calls"] == [] and trace["usage"]["calls"] == 0
            continue
        rows = stored_rows(traced, VlmCall, trace["run"]["id"])
        assert [
            (c["role"], c["task"], c["backend"], c["model"], c["input_tokens"], c["latency_s"])
            for c in trace["model_calls"]
        ] == [(r.role, r.task, r.backend, r.model, r.input_tokens, r.latency_s) for r in rows]
        assert all(c["cost_usd"] == pytest.approx(CALL_COST) for c in trace["model_calls"])
        assert all(
            (c["output_tokens"], c["cached_tokens"], c["cached"]) == (50, 400, False)
            for c in trace["model_calls"]
        )
        usage = trace["usage"]
        assert usage["calls"] == len(rows) and usage["input_tokens"] == 1000 * len(rows)
        assert usage["cost_usd"] == pytest.approx(CALL_COST * len(rows))
        assert usage["models"] == ["builtin/builtin-v1", "openai/gpt-4o"]
    # The rated item: a plan and the five-level question; the replanned one: two rounds.
    assert [(c["role"], c["task"]) for c in traces["rate-a"]["model_calls"]] == [
        ("planner", "plan"),
        ("summarizer", "quality_levels"),
    ]
    assert [(c["step"], c["iteration"]) for c in traces["blurry"]["model_calls"]] == [
        ("plan", 0),
        ("summarize", 0),
        ("plan", 1),
        ("summarize", 1),
    ]


def test_the_replan_its_reason_and_the_answer_after_it(traced):
    trace = traces_of(traced)["blurry"]
    (row,) = stored_rows(traced, ReplanRow, trace["run"]["id"])
    assert trace["replans"] == [
        {
            "iteration": row.iteration,
            "reason": "look closer at the [red]edges[/red]",
            "failure": None,
            "created_at": trace["replans"][0]["created_at"],
        }
    ]
    assert row.reason == "look closer at the [red]edges[/red]" and row.iteration == 1
    assert trace["run"]["iterations"] == 1
    answer = trace["answer"]
    assert answer["final_answer"] == "Yes" and answer["quality_score"] is None
    assert answer["reasoning"].startswith("the edges are soft")
    assert answer["answered_in_follow_up"] is False and answer["answer_unparseable"] is False
    assert {t["iteration"] for t in trace["tools"]} == {0, 1}  # both rounds measured
    assert trace["truth"] == {"kind": None, "truth": None}


def test_plan_distortions_and_answer_are_the_runs(traced):
    trace = traces_of(traced)["rate-a"]
    with read_scope(make_engine(traced.url)) as session:
        run = session.get(Run, trace["run"]["id"])
        state = json.loads(run.state_json)
        assert (trace["answer"]["final_answer"], trace["answer"]["quality_score"]) == (
            run.final_answer,
            run.quality_score,
        )
    assert run.quality_score is not None and 1 <= run.quality_score <= 5
    plan = trace["plan"]
    assert (plan["query_type"], plan["query_scope"], plan["reference_mode"]) == (
        "IQA",
        "Global",
        "No-Reference",
    )
    assert plan["required_tool"] == "PIQE" and plan["answer_mode"] == "scoring"
    assert plan["uncatalogued_tools"] == [] and plan["flags"]["tool_execution"] is True
    stored = state["executor_evidence"]["distortion_analysis"]
    assert trace["distortions"] == [
        {
            "object": "whole image",
            "type": entry["type"],
            "severity": entry["severity"],
            "explanation": entry["explanation"],
        }
        for entry in stored["Global"]
    ]
    assert (
        trace["distortions"]
        and trace["answer"]["level_distribution"]
        == (state["summarizer_result"]["level_distribution"])
    )
    assert trace["answer"]["probability_source"] == "logprobs"


def test_rank_errors_against_mos_and_right_or_wrong_against_the_answer(traced):
    traces = traces_of(traced)
    rated = ["rate-a", "rate-b", HOSTILE]
    scores = [traces[key]["answer"]["quality_score"] for key in rated]
    mos = [traces[key]["item"]["mos"] for key in rated]
    assert mos == [3.0, 4.5, 2.0]
    by_score, by_mos = rankdata(scores), rankdata(mos)
    for key, score_rank, mos_rank in zip(rated, by_score, by_mos, strict=True):
        truth = traces[key]["truth"]
        assert truth["kind"] == "mos" and truth["ranked_items"] == 3
        assert (truth["score_rank"], truth["mos_rank"]) == (score_rank, mos_rank)
        assert truth["rank_error"] == pytest.approx((score_rank - mos_rank) / 2)
    assert any(traces[key]["truth"]["rank_error"] != 0 for key in rated)
    assert traces["mcq"]["truth"] == {
        "kind": "mcq",
        "truth": "B",
        "answer_letter": "B",
        "correct": True,
    }
    broken = traces["broken"]["truth"]
    assert broken["kind"] == "mos" and broken["rank_error"] is None


def test_a_failed_item_says_why_and_has_no_run(traced):
    trace = traces_of(traced)["broken"]
    item = trace["item"]
    assert item["status"] == "failed" and item["mos"] == 1.0
    assert "is not a readable image" in item["error"] and "corrupt.png" in item["error"]
    assert trace["run"] is None and trace["answer"] is None and trace["tools"] == []


def test_one_item_by_id_or_line_is_the_streamed_trace(traced):
    traces = traces_of(traced)
    with read_scope(make_engine(traced.url)) as session:
        for line, (key, trace) in enumerate(traces.items(), start=1):
            assert item_trace(session, traced.job_id, item=key) == trace
            assert item_trace(session, traced.job_id, line=line) == trace
        with pytest.raises(ItemNotFound) as unknown:
            item_trace(session, traced.job_id, item="rate-c")
        with pytest.raises(ItemNotFound) as no_line:
            item_trace(session, traced.job_id, line=99)
        with pytest.raises(ValueError, match="by its id or by its line"):
            item_trace(session, traced.job_id, item="rate-a", line=1)
    assert unknown.value.close[:2] == ["rate-a", "rate-b"] or set(unknown.value.close[:2]) == {
        "rate-a",
        "rate-b",
    }
    assert str(unknown.value).startswith(f"job {traced.job_id[:8]} has no item 'rate-c'; close ids")
    assert str(no_line.value) == f"job {traced.job_id[:8]} has no item on line 99"


def test_a_stream_of_traces_reads_four_statements_a_page_whatever_the_items(traced):
    """Statements counted on the engine: a constant to begin (the job, its ranking), then at
    most four a page (items with runs, tool calls, replans, model calls) and the empty page
    that ends it: never one per item."""
    engine = make_engine(traced.url)
    counted: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:  # noqa: ANN001
        counted.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        totals = {}
        for page in (1, 2, 3, 6, 100):
            counted.clear()
            with read_scope(engine) as session:
                assert len(list(job_traces(session, traced.job_id, page=page))) == 6
            totals[page] = len(counted)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # A page's items with runs, then (when one of them ran) its tool calls, replans and model
    # calls; the last item (broken) never ran.
    expected = {page: math.ceil(6 / page) + 3 * math.ceil(5 / page) + 1 for page in totals}
    base = totals[100] - expected[100]
    assert 0 < base <= 8  # the job, its configuration, its ranking
    assert {page: total - base for page, total in totals.items()} == expected


def test_every_text_is_redacted(traced):
    def set_error(error: str | None) -> None:
        with session_scope(make_engine(traced.url)) as session:
            session.execute(
                update(JobItem)
                .where(JobItem.job_id == traced.job_id, JobItem.item_key == "rate-a")
                .values(error=error)
            )

    set_error("fetch https://user:hunter2@example.com/x.png?X-Amz-Signature=abc failed")
    try:
        with read_scope(make_engine(traced.url)) as session:
            trace = item_trace(session, traced.job_id, item="rate-a")
    finally:
        set_error(None)
    assert "hunter2" not in json.dumps(trace) and "abc" not in trace["item"]["error"]
    assert "example.com" in trace["item"]["error"]


def test_ranks_average_ties_and_agree_with_counts():
    """A stream's ranking (ranked once) and one item's (counted by SQL) give the same rank, ties
    sharing their mean rank; the rank error is the percentile difference."""
    from agentic_iqa.reports.trace import Ranking, rank_from_counts

    triples = [(10, 2.0, 1.0), (11, 3.0, 5.0), (12, 2.0, 3.0), (13, 4.0, 3.0)]
    ranking = Ranking(iter(triples))
    assert len(ranking) == 4 and ranking.rank(99) is None
    scores, moses = [s for _, s, _ in triples], [m for _, _, m in triples]
    for row_id, score, mos in triples:
        rank = ranking.rank(row_id)
        counted = rank_from_counts(
            4,
            sum(s < score for s in scores),
            sum(s == score for s in scores),
            sum(m < mos for m in moses),
            sum(m == mos for m in moses),
        )
        assert rank == counted
    twelve = ranking.rank(12)
    assert (twelve.score_rank, twelve.mos_rank) == (1.5, 2.5)
    assert twelve.rank_error == pytest.approx(-1 / 3)
    assert ranking.rank(11).rank_error == pytest.approx((3 - 4) / 3)
    assert rank_from_counts(0, 0, 0, 0, 0) is None
    assert Ranking(iter([])).rank(1) is None


def test_the_worst_and_best_items_by_rank_error_and_their_traces(traced):
    from agentic_iqa.db.traces import job_ranking, traces_of_items

    traces = traces_of(traced)
    with read_scope(make_engine(traced.url)) as session:
        ranking = job_ranking(session, traced.job_id)
        worst = ranking.by_disagreement(3)
        best = ranking.by_disagreement(1, worst=False)
        chosen = traces_of_items(session, traced.job_id, worst, ranking=ranking)
        keys = {
            row.id: row.item_key
            for row in session.execute(
                select(JobItem.id, JobItem.item_key).where(JobItem.job_id == traced.job_id)
            )
        }
    errors = [abs(traces[keys[row_id]]["truth"]["rank_error"]) for row_id in worst]
    assert len(worst) == 3 and errors == sorted(errors, reverse=True) and errors[0] > 0
    assert [trace["item"]["id"] for trace in chosen] == [keys[row_id] for row_id in worst]
    assert chosen == [traces[keys[row_id]] for row_id in worst]
    assert abs(traces[keys[best[0]]]["truth"]["rank_error"]) == min(errors)
