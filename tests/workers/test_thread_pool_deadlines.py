"""A model step on a Celery thread pool (compose's vlm-worker) ends within its deadline against
a server that sends one byte every 2 s: the call's own (``timeout``), and the step's limit,
which Celery does not enforce on ``--pool threads``.  Before, such a step ran until the server
was killed, its lease renewed and the run "running"."""

from __future__ import annotations

import time

import pytest

from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.runs import get_run
from tests.agentic_iqa.vlm.hostile_servers import HostileServer
from tests.workers.test_distributed import step_rows, submit, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _summarizer_on(server: HostileServer, **fields: str) -> dict[str, str]:
    return {
        f"AGENTIC_IQA_SUMMARIZER_{name}": value
        for name, value in {
            "BACKEND": "openai",
            "MODEL": "drip-vl",
            "BASE_URL": server.url,
            **fields,
        }.items()
    }


def _run_error(database_url: str, run_id: str) -> str:
    with session_scope(make_engine(database_url)) as session:
        return get_run(session, run_id).error or ""


def test_a_dripping_answer_fails_the_step_after_its_retries_within_the_deadline(
    make_cluster, sqlite_url
):
    with HostileServer("openai", "drip", interval=2.0) as server:
        cluster = make_cluster(
            sqlite_url,
            AGENTIC_IQA_VLM_CACHE="false",
            AGENTIC_IQA_VLM_QUEUE="vlm",
            # Above the step's few seconds (the cluster's are 3 s and 6 s): no re-send by the
            # supervisor, no redelivery by Redis adds an attempt of its own.
            AGENTIC_IQA_LEASE_SECONDS="30",
            AGENTIC_IQA_VISIBILITY_TIMEOUT="120",
            AGENTIC_IQA_VLM_MAX_RETRIES="1",
            OPENAI_API_KEY="sk-test-dripping-server",
            **_summarizer_on(server, TIMEOUT="5", MAX_RETRIES="0"),
        )
        cluster.start("default", "default,gpu")
        cluster.start("vlm", "vlm", concurrency=4, pool="threads")
        run_id = submit(cluster, "Rate the quality of this image.", max_replans=0)
        status = wait_for(cluster, run_id, timeout=60)
        # From the summarize step's first request to the run's end (the steps before it are
        # the builtin's, slow or quick with the machine's load).
        elapsed = time.monotonic() - server.arrivals[0]
        requests = server.requests
    assert status == "failed"
    error = _run_error(sqlite_url, run_id)
    assert "summarize failed after 1 retries" in error, error
    assert "model call exceeded its 5 s deadline" in error, error
    assert requests == 2  # the first attempt and the one retry, each cut at 5 s
    # Two 5-second attempts and a 1-second backoff between them, and the writes.
    assert 11 <= elapsed < 20, elapsed
    summarize = [row for row in step_rows(cluster, run_id) if row[0] == "summarize"]
    assert [row[2] for row in summarize] == ["failed"]


def test_a_step_past_its_limit_on_a_thread_pool_fails_with_the_limits_sentence(
    make_cluster, sqlite_url
):
    """The call's own timeout (60 s) is far away; the step's limit (4 s) ends it."""
    with HostileServer("openai", "drip", interval=2.0) as server:
        cluster = make_cluster(
            sqlite_url,
            AGENTIC_IQA_VLM_CACHE="false",
            AGENTIC_IQA_VLM_QUEUE="vlm",
            # Above the step's few seconds (the cluster's are 3 s and 6 s): no re-send by the
            # supervisor, no redelivery by Redis adds an attempt of its own.
            AGENTIC_IQA_LEASE_SECONDS="30",
            AGENTIC_IQA_VISIBILITY_TIMEOUT="120",
            AGENTIC_IQA_VLM_SOFT_TIME_LIMIT="4",
            OPENAI_API_KEY="sk-test-dripping-server",
            **_summarizer_on(server, TIMEOUT="60", MAX_RETRIES="2"),
        )
        cluster.start("default", "default,gpu")
        cluster.start("vlm", "vlm", concurrency=4, pool="threads")
        run_id = submit(cluster, "Rate the quality of this image.", max_replans=0)
        status = wait_for(cluster, run_id, timeout=60)
        # From the summarize step's first request to the run's end (the steps before it are
        # the builtin's, slow or quick with the machine's load).
        elapsed = time.monotonic() - server.arrivals[0]
        requests = server.requests
    assert status == "failed"
    error = _run_error(sqlite_url, run_id)
    assert "the summarize step ran past its time limit of 4 s for a model step" in error, error
    assert requests == 1  # the SDK's retries never ran: the step's limit is not a timeout
    assert elapsed < 9, elapsed  # the 4 s limit, from the step's start
