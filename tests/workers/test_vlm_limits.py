"""The VLM queue: routing of the VLM steps, and a thread-pool worker holding 64 calls in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery

from agentic_iqa.config import PipelineSettings
from agentic_iqa.pipeline import STEPS, TOOL_STEPS
from tests.conftest import REPO
from workers.celery_app import STEP_TASK_PREFIX, make_app

VLM_STEPS = (
    "plan",
    "distortion_detection",
    "distortion_analysis",
    "tool_selection",
    "summarize",
    "replan",
)


def test_vlm_steps_go_to_the_vlm_queue_when_one_is_configured() -> None:
    app = make_app(PipelineSettings(vlm_queue="vlm", tool_queue="gpu"))
    routes = app.conf.task_routes
    assert {step for step in STEPS if step not in TOOL_STEPS} == set(VLM_STEPS)
    for step in VLM_STEPS:
        assert routes[STEP_TASK_PREFIX + step] == {"queue": "vlm"}, step
    assert routes[STEP_TASK_PREFIX + "tool_execution"] == {"queue": "gpu"}
    assert [queue.name for queue in app.conf.task_queues] == ["default", "vlm", "gpu"]


def test_without_a_vlm_queue_nothing_changes() -> None:
    app = make_app(PipelineSettings())
    for step in VLM_STEPS:
        assert app.conf.task_routes[STEP_TASK_PREFIX + step] == {"queue": "default"}
    assert [queue.name for queue in app.conf.task_queues] == ["default", "gpu"]


def test_queue_for_sends_vlm_steps_to_the_vlm_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers import tasks

    configured = PipelineSettings(vlm_queue="vlm")
    monkeypatch.setattr(tasks, "settings", lambda: configured)
    assert {step: tasks.queue_for(step) for step in STEPS} == {
        **dict.fromkeys(VLM_STEPS, "vlm"),
        "tool_execution": "gpu",
    }


@pytest.mark.slow
@pytest.mark.redis
def test_a_vlm_worker_runs_64_threads_on_the_vlm_queue(broker_url: str, tmp_path: Path) -> None:
    broker = broker_url
    hostname = f"vlm-{os.getpid()}@localhost"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTIC_IQA_BROKER_URL": broker,
        "AGENTIC_IQA_VLM_QUEUE": "vlm",
        "AGENTIC_IQA_SUPERVISOR": "false",
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.sqlite3'}",
    }
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentic_iqa",
            "worker",
            "--queues",
            "vlm",
            "--pool",
            "threads",
            "--concurrency",
            "64",
            "--hostname",
            hostname,
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    client = Celery(broker=broker)
    try:
        deadline = time.monotonic() + 60
        stats = None
        while stats is None and time.monotonic() < deadline:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            stats = (client.control.inspect([hostname], timeout=0.5).stats() or {}).get(hostname)
        assert stats is not None, "the worker did not answer"
        assert stats["pool"]["max-concurrency"] == 64
        assert stats["pool"]["implementation"] == "celery.concurrency.thread:TaskPool"
        queues = client.control.inspect([hostname], timeout=2).active_queues()[hostname]
        assert [queue["name"] for queue in queues] == ["vlm"]
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        client.close()
