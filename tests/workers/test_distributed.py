"""The agent on real Celery workers and real Redis, results in SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time

import pytest

from agentic_iqa.db.engine import make_engine, session_scope, upgrade
from agentic_iqa.db.runs import get_run, load_state
from agentic_iqa.runtime import service
from tests.agentic_iqa.conftest import EXAMPLE
from tests.agentic_iqa.db import replans_for, step_status, steps_for, tool_logs_for
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply, openai_completion
from tests.workers.cluster import Cluster

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def submit(cluster: Cluster, query: str, image=EXAMPLE, max_replans: int = 2) -> str:
    upgrade(cluster.database_url)
    engine = make_engine(cluster.database_url)
    run_id = service.create_run(engine, query, str(image), max_replan_iterations=max_replans)
    cluster.client.send_task("agentic_iqa.coordinate", args=(run_id,), queue="default")
    return run_id


def wait_for(cluster: Cluster, run_id: str, timeout: float = 120.0) -> str:
    """The run's final status ("succeeded" or "failed") once it has one."""
    engine = make_engine(cluster.database_url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with session_scope(engine) as session:
            run = get_run(session, run_id)
            if run.status in {"succeeded", "failed"}:
                return run.status
        time.sleep(0.25)
    raise TimeoutError(f"run {run_id} not finished after {timeout} s")


def step_rows(cluster: Cluster, run_id: str) -> list:
    engine = make_engine(cluster.database_url)
    with session_scope(engine) as session:
        rows = steps_for(session, run_id)
        return [(r.step, r.iteration, r.status, r.worker, r.queue, r.attempts) for r in rows]


def test_each_step_is_its_own_task_and_tools_run_on_the_gpu_queue(make_cluster, sqlite_url):
    cluster = make_cluster(sqlite_url)
    default = cluster.start("default", "default")
    gpu = cluster.start("gpu", "gpu")
    run_id = submit(cluster, "Rate the quality of this image.")
    assert wait_for(cluster, run_id) == "succeeded"
    rows = step_rows(cluster, run_id)
    steps = [row[0] for row in rows]
    assert steps == [
        "plan",
        "distortion_detection",
        "distortion_analysis",
        "tool_selection",
        "tool_execution",
        "summarize",
    ]
    for step, _iteration, status, worker, queue, attempts in rows:
        assert status == "succeeded" and attempts == 1
        if step == "tool_execution":
            assert (worker, queue) == (gpu, "gpu")
        else:
            assert (worker, queue) == (default, "default")
    state = service.load(make_engine(sqlite_url), run_id)
    assert 1.0 <= state["summarizer_result"].quality_score <= 5.0


def test_a_worker_of_both_queues_runs_a_whole_run_from_one_message(make_cluster, sqlite_url):
    """Its steps for the tool queue run on in it too: an idle tool-only worker gets nothing."""
    cluster = make_cluster(sqlite_url)
    both = cluster.start("both", "default,gpu")
    idle = cluster.start("gpu", "gpu")
    runs = [submit(cluster, "Rate the quality of this image.") for _ in range(3)]
    for run_id in runs:
        assert wait_for(cluster, run_id) == "succeeded"
        rows = step_rows(cluster, run_id)
        assert [row[0] for row in rows][-2:] == ["tool_execution", "summarize"]
        for step, _iteration, status, worker, queue, attempts in rows:
            assert (status, worker, attempts) == ("succeeded", both, 1), idle
            assert queue == ("gpu" if step == "tool_execution" else "default")


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "sent"])
def test_a_tool_step_whose_scores_are_all_cached_runs_on_the_worker_that_decided_it(
    make_cluster, sqlite_url, tmp_path, inline
):
    """A second run of the same image: its tool step is a cache read, run on the default
    worker (two broker hops saved), with the same scores; with the setting off it is sent."""
    cluster = make_cluster(
        sqlite_url,
        AGENTIC_IQA_TOOL_CACHE=f"sqlite:///{tmp_path / 'scores.sqlite3'}",
        AGENTIC_IQA_CACHED_TOOLS_INLINE=str(inline).lower(),
    )
    default = cluster.start("default", "default")
    gpu = cluster.start("gpu", "gpu")
    first = submit(cluster, "Rate the quality of this image.")
    assert wait_for(cluster, first) == "succeeded"
    second = submit(cluster, "Rate the quality of this image.")
    assert wait_for(cluster, second) == "succeeded"
    tool_step = {
        run_id: next(row for row in step_rows(cluster, run_id) if row[0] == "tool_execution")
        for run_id in (first, second)
    }
    assert tool_step[first][3:] == (gpu, "gpu", 1)
    assert tool_step[second][3:] == ((default, "gpu (cached)", 1) if inline else (gpu, "gpu", 1))
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        logs = {
            run_id: [
                (log.tool_name, log.raw_score, log.cached) for log in tool_logs_for(session, run_id)
            ]
            for run_id in (first, second)
        }
    assert logs[first] and all(not cached for *_, cached in logs[first])
    assert [(tool, raw, True) for tool, raw, _ in logs[first]] == logs[second]
    scores = [
        service.load(engine, run_id)["summarizer_result"].quality_score
        for run_id in (first, second)
    ]
    assert scores[0] == scores[1]


def test_steps_the_plan_turns_off_are_never_enqueued(make_cluster, sqlite_url):
    cluster = make_cluster(sqlite_url)
    cluster.start("default", "default")
    # No worker on the gpu queue: if a tool step were enqueued, the run would never finish.
    run_id = submit(cluster, "Is the car in this photo blurry?")
    assert wait_for(cluster, run_id, timeout=60) == "succeeded"
    assert [row[0] for row in step_rows(cluster, run_id)] == [
        "plan",
        "distortion_analysis",
        "summarize",
    ]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_failed_tools_are_not_replanned_the_run_answers_and_persists_its_tool_logs(
    database, make_cluster, sqlite_url, no_piqe_fallback, request
):
    """The only tool fails and nothing replaces it: a new plan would fail the same way, so the
    summarizer answers at once from what there is (no replan to the bound, no "Unable to
    determine"); the failed calls are stored."""
    url = sqlite_url if database == "sqlite" else request.getfixturevalue("postgres_url")
    cluster = make_cluster(url, extra_overrides=(no_piqe_fallback,))
    cluster.start("default", "default")
    cluster.start("gpu", "gpu")
    run_id = submit(cluster, "Rate this image using Broken.", max_replans=2)
    assert wait_for(cluster, run_id) == "succeeded"
    engine = make_engine(url)
    with session_scope(engine) as session:
        replans = replans_for(session, run_id)
        logs = tool_logs_for(session, run_id)
        run = get_run(session, run_id)
        assert replans == [] and run.iteration_count == 0
        assert run.final_answer in {"Bad", "Poor", "Fair", "Good", "Excellent"}
        assert logs and {log.iteration for log in logs} == {0}
        assert all(
            log.tool_name == "Broken" and log.normalized_score is None and log.error for log in logs
        )
    assert (
        "Missing tool scores for Global"
        in service.load(engine, run_id)["summarizer_result"].quality_reasoning
    )
    plans = [row for row in step_rows(cluster, run_id) if row[0] == "plan"]
    assert [row[1] for row in plans] == [0]


@pytest.mark.faults
def test_worker_killed_mid_tool_execution_the_run_still_completes_once(make_cluster, sqlite_url):
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="5")
    cluster.start("default", "default")
    doomed = cluster.start("gpu", "gpu")
    run_id = submit(cluster, "Rate this image using Slow.")
    engine = make_engine(sqlite_url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with session_scope(engine) as session:
            if step_status(session, run_id, "tool_execution", 0) == "running":
                break
        time.sleep(0.1)
    else:
        pytest.fail("tool_execution never started")
    time.sleep(1.0)  # inside the slow tool now
    cluster.kill(doomed)
    survivor = cluster.start("gpu2", "gpu")
    assert wait_for(cluster, run_id, timeout=120) == "succeeded"
    with session_scope(engine) as session:
        logs = tool_logs_for(session, run_id)
        state = load_state(session, run_id)
    expected_calls = {
        (key, distortion)
        for key, names in (state["executor_evidence"].distortion_set or {}).items()
        for distortion in names
    }
    keys = [(log.object_name, log.distortion) for log in logs]
    assert keys and len(keys) == len(set(keys))  # exactly one row per tool call
    assert set(keys) == expected_calls
    assert all(log.tool_name == "Slow" and log.normalized_score is not None for log in logs)
    tool_rows = [row for row in step_rows(cluster, run_id) if row[0] == "tool_execution"]
    assert len(tool_rows) == 1
    _step, _iteration, status, worker, _queue, attempts = tool_rows[0]
    assert status == "succeeded" and worker == survivor and attempts == 2


def test_transient_vlm_failure_is_retried_and_permanent_failure_fails_the_run(
    make_cluster, sqlite_url
):
    plan = {
        "query_type": "IQA",
        "query_scope": ["car"],
        "distortion_source": "Explicit",
        "distortions": {"car": ["Blurs"]},
        "reference_mode": "No-Reference",
        "required_tool": None,
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": False,
        },
    }
    with FakeAPIServer(lambda _r: Reply(200, openai_completion(json.dumps(plan)))) as server:
        server.enqueue(Reply(503, {"error": {"message": "overloaded", "type": "server_error"}}))
        cluster = make_cluster(
            sqlite_url,
            AGENTIC_IQA_PLANNER_BACKEND="openai",
            AGENTIC_IQA_PLANNER_BASE_URL=f"{server.url}/v1",
            AGENTIC_IQA_PLANNER_MODEL="m",
            AGENTIC_IQA_PLANNER_MAX_RETRIES="0",
            AGENTIC_IQA_VLM_MAX_RETRIES="2",
            OPENAI_API_KEY="sk-test-transient",
        )
        cluster.start("default", "default")
        run_id = submit(cluster, "Is the car blurry?")
        assert wait_for(cluster, run_id, timeout=90) == "succeeded"
        plan_row = next(row for row in step_rows(cluster, run_id) if row[0] == "plan")
        assert plan_row[2] == "succeeded" and plan_row[5] == 2  # one retry
        assert len(server.requests) >= 2

        server.enqueue(
            *[Reply(503, {"error": {"message": "still down", "type": "server_error"}})] * 5
        )
        failing = submit(cluster, "Is the sky blurry?")
        assert wait_for(cluster, failing, timeout=90) == "failed"
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        run = get_run(session, failing)
        assert "plan failed after 2 retries" in run.error
        assert "503" in run.error
        assert "sk-test-transient" not in run.error


def test_an_executor_subtask_whose_503s_outlast_the_retries_is_given_up_on_workers(
    make_cluster, sqlite_url
):
    """The spec's rule on the workers too: the subtask's evidence is null and the run answers."""
    with FakeAPIServer(
        lambda _r: Reply(503, {"error": {"message": "down", "type": "server_error"}})
    ) as server:
        cluster = make_cluster(
            sqlite_url,
            AGENTIC_IQA_EXECUTOR_BACKEND="openai",
            AGENTIC_IQA_EXECUTOR_BASE_URL=f"{server.url}/v1",
            AGENTIC_IQA_EXECUTOR_MODEL="m",
            AGENTIC_IQA_EXECUTOR_MAX_RETRIES="0",
            AGENTIC_IQA_VLM_MAX_RETRIES="1",
            OPENAI_API_KEY="sk-test-give-up",
        )
        cluster.start("default", "default")
        run_id = submit(cluster, "Is the car blurry?", max_replans=0)
        assert wait_for(cluster, run_id, timeout=90) == "succeeded"
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        state = load_state(session, run_id)
    assert state["executor_evidence"].distortion_analysis is None
    (reason,) = state["step_errors"].values()
    assert "distortion_analysis failed after 1 retries" in reason and "503" in reason
    assert state["summarizer_result"].final_answer


def test_cli_assess_distributed_prints_the_same_answer_as_in_process(make_cluster, sqlite_url):
    import os
    import subprocess
    import sys

    cluster = make_cluster(sqlite_url)
    cluster.start("both", "default,gpu", concurrency=2, cli=True)
    query = "Which distortion is most severe? A. Noise B. Blur C. JPEG compression"
    blurred = str(EXAMPLE.parent / "i03_blurred.png")
    command = [sys.executable, "-m", "agentic_iqa", "assess", blurred, "-q", query, "--json"]
    distributed = subprocess.run(
        [*command, "--distributed", "--timeout", "120"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert distributed.returncode == 0, distributed.stderr[-2000:]
    local_env = {k: v for k, v in cluster.env.items() if k != "AGENTIC_IQA_BROKER_URL"}
    local = subprocess.run(
        [*command, "--no-store"],
        env={**os.environ, **local_env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert local.returncode == 0, local.stderr[-2000:]
    remote_doc, local_doc = json.loads(distributed.stdout), json.loads(local.stdout)
    assert remote_doc["final_answer"] == local_doc["final_answer"] == "B"
    assert remote_doc["plan"] == local_doc["plan"]
    assert remote_doc["steps_done"] == local_doc["steps_done"]


@pytest.mark.parametrize(("flags", "asked"), [([], 1), (["--no-follow-up"], 0)])
def test_cli_assess_distributed_runs_with_its_own_flags_not_the_workers(
    make_cluster, sqlite_url, tmp_path, flags, asked
):
    """``assess --distributed --backend openai --model M --base-url U [--no-follow-up]`` on
    workers whose own configuration is the builtin: the run is stored with its flags, so every
    step asks that model (the workers hold only its key), and the follow-up is asked or not as
    the command said."""
    import os
    import subprocess
    import sys

    from sqlalchemy import select

    from agentic_iqa.db.models import Run, VlmCall
    from tests.conformance.harness import simulated
    from tests.conformance.items import images, multiple_choice
    from tests.conformance.simulated_model import Behaviour

    (item,) = multiple_choice(images(tmp_path / "images", 1), 1, seed=5)
    with simulated(Behaviour.VAGUE, [item]) as (server, model):
        cluster = make_cluster(sqlite_url, OPENAI_API_KEY="sk-sim-key")
        cluster.start("both", "default,gpu", cli=True)
        command = [
            sys.executable,
            "-m",
            "agentic_iqa",
            "assess",
            str(item.image),
            "-q",
            item.truth.query,
            "--json",
            "--distributed",
            "--timeout",
            "120",
            "--backend",
            "openai",
            "--model",
            "sim-vl",
            "--base-url",
            f"{server.url}/v1",
            *flags,
        ]
        assessed = subprocess.run(
            command,
            env={**os.environ, **cluster.env},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert assessed.returncode == 0, assessed.stderr[-2000:]
        follow_ups = model.calls.get("follow_up", 0)
    document = json.loads(assessed.stdout)
    assert follow_ups == asked
    assert document["answered_in_follow_up"] is bool(asked)
    assert document["final_answer"] == (item.truth.answer if asked else document["final_answer"])
    with session_scope(make_engine(sqlite_url)) as session:
        (run,) = session.scalars(select(Run))
        answered = set(session.execute(select(VlmCall.backend, VlmCall.model)).all())
        stored = json.loads(run.config_json)
    assert answered == {("openai", "sim-vl")}
    assert {config["follow_up"] for config in stored["roles"].values()} == (
        {None} if asked else {False}
    )
    assert "sk-sim-key" not in run.config_json
