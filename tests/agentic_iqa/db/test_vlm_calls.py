"""Stored VLM calls: idempotent under redelivery, summed per run and job by SQL."""

from __future__ import annotations

from sqlalchemy import Engine

from agentic_iqa.db import jobs
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.runs import create_run
from agentic_iqa.db.vlm_calls import store_vlm_calls, vlm_keys_asked, vlm_steps, vlm_usage
from agentic_iqa.vlm.usage import CallRecord, ModelUsage


def record(
    model: str, *, hit: bool = False, tokens: tuple[int, int, int] | None = (100, 20, 30)
) -> CallRecord:
    input_tokens, output_tokens, cached = tokens or (None, None, None)
    return CallRecord(
        role="planner",
        task="plan",
        backend="openai",
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached,
        latency_s=0.5,
        cache_hit=hit,
        request_key="k" * 64,
    )


def test_calls_are_stored_once_and_summed_per_run_and_job(engine: Engine) -> None:
    with session_scope(engine) as session:
        job_id = jobs.create_job(session, name="j", manifest="m.csv", default_query="q")
        run_a = create_run(session, query="q", image_path="a.png", job_id=job_id)
        run_b = create_run(session, query="q", image_path="b.png", job_id=job_id)
        calls = [record("gpt-4o"), record("gpt-4o", hit=True), record("x", tokens=None)]
        for _delivery in range(2):  # a redelivered step stores the same calls again
            store_vlm_calls(session, run_a, "plan", 0, 1, calls)
        store_vlm_calls(session, run_a, "plan", 0, 2, [record("gpt-4o")])
        store_vlm_calls(session, run_b, "summarize", 0, 1, [record("gpt-4o")])
    with session_scope(engine) as session:
        run_usage = vlm_usage(session, run_id=run_a)
        job_usage = vlm_usage(session, job_id=job_id)
        by_step = vlm_steps(session, run_a)
        asked = vlm_keys_asked(session, run_b)
    assert run_usage == [
        ModelUsage("openai", "gpt-4o", 2, 1, 200, 40, 60, 0),
        ModelUsage("openai", "x", 1, 0, 0, 0, 0, 1),
    ]
    assert job_usage[0] == ModelUsage("openai", "gpt-4o", 3, 1, 300, 60, 90, 0)
    assert by_step == {("plan", 0): (3, 1)}
    assert asked == {"k" * 64}
