"""A replan whose plan cannot be made, on real Celery workers: the run still ends with the
summarizer's answer from the first round's evidence, stored step by step."""

from __future__ import annotations

import pytest

from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.runs import get_run, load_state, run_details
from tests.agentic_iqa.agents.test_summarizer_reply import (
    ANSWER,
    EXPLAIN,
    WANTS_MORE,
    Remote,
    completion,
    not_json,
    plan,
)
from tests.agentic_iqa.conftest import EXAMPLE
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer
from tests.workers.test_distributed import step_rows, submit, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_a_failed_replan_on_workers_answers_with_the_first_rounds_evidence(
    make_cluster, sqlite_url
):
    first_plan = completion(plan(scoring=False))
    remote = Remote([WANTS_MORE, ANSWER], planner=[lambda _r: first_plan, not_json])
    with FakeAPIServer(remote) as server:
        roles = {
            f"AGENTIC_IQA_{role}_{field}": value
            for role in ("PLANNER", "SUMMARIZER")
            for field, value in (
                ("BACKEND", "openai"),
                ("MODEL", "qwen2.5-vl"),
                ("BASE_URL", f"{server.url}/v1"),
                ("MAX_RETRIES", "0"),
            )
        }
        cluster = make_cluster(
            sqlite_url,
            AGENTIC_IQA_VLM_CACHE="false",
            OPENAI_API_KEY="sk-test-failed-replan",
            **roles,
        )
        cluster.start("both", "default,gpu")
        run_id = submit(cluster, EXPLAIN, image=EXAMPLE, max_replans=2)
        assert wait_for(cluster, run_id, timeout=90) == "succeeded"
        plans = [
            r
            for r in server.requests
            if r.body["messages"][0]["content"].startswith("You are the planner")
        ]
    assert len(plans) == 4  # the first plan, then three attempts at the new one
    steps = step_rows(cluster, run_id)
    assert [(step, iteration, status) for step, iteration, status, *_ in steps] == [
        ("plan", 0, "succeeded"),
        ("distortion_analysis", 0, "succeeded"),
        ("tool_execution", 0, "succeeded"),
        ("summarize", 0, "succeeded"),
        ("replan", 0, "succeeded"),
        ("plan", 1, "succeeded"),
        ("summarize", 1, "succeeded"),
    ]
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        state = load_state(session, run_id)
        run = get_run(session, run_id)
        details = run_details(session, run_id)
    assert (run.final_answer, run.quality_score, run.error) == ("Yes", None, None)
    (entry,) = state["replan_history"]
    assert entry.reason == "look closer at the edges" and "no valid plan" in entry.failure
    assert state["plan"].required_tool == "PIQE"
    # the first round's tool call, stored once: restoring its evidence wrote no second row
    assert [(log["iteration"], log["tool"]) for log in details["tool_logs"]] == [(0, "PIQE")]
    assert details["replans"][0]["failure"] == entry.failure
    assert any("failed" in note for note in details["answer_notes"])
