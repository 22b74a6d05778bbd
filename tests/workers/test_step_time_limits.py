"""Every step runs under its own time limit, whichever Celery task runs it, and says
which limit ran out and what to raise.  (The same with real workers: test_cli_distributed.py's
time-limit tests, marked faults.)"""

from __future__ import annotations

import threading
import time

import pytest
from billiard.exceptions import SoftTimeLimitExceeded

from agentic_iqa.config import PipelineSettings
from agentic_iqa.runtime.service import NextStep, failure_reason
from workers import tasks
from workers.celery_app import COORDINATE, TOOL_BATCH_TASK, make_app, task_limits


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> PipelineSettings:
    """The app's settings with a 1-second tool limit and a 2-second model limit."""
    settings = PipelineSettings.load(
        tool_soft_time_limit=1, vlm_soft_time_limit=2, inline_seconds=60, hard_time_limit_margin=1
    )
    monkeypatch.setattr(tasks.app, "settings", settings)
    return settings


def test_a_step_past_its_own_limit_raises_its_sentence(limits: PipelineSettings) -> None:
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded) as caught, tasks.step_time_limit("tool_execution"):
        time.sleep(10)
    assert 0.9 <= time.monotonic() - started < 8  # the limit, not the 10 s sleep
    assert (
        str(caught.value)
        == failure_reason("tool_execution", caught.value)
        == (
            "the tool step ran past its time limit of 1 s (AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT, or "
            "`agentic-iqa worker --tool-time-limit`): raise it for photos this large"
        )
    )
    model_step = "the plan step ran past its time limit of 2 s for a model step"
    with pytest.raises(SoftTimeLimitExceeded, match=model_step), tasks.step_time_limit("plan"):
        time.sleep(10)
    time.sleep(1.5)  # disarmed once the step ended: nothing fires after it


def test_a_limit_swallowed_once_fires_again(limits: PipelineSettings) -> None:
    """Code that logs an exception and goes on (an executor subtask) does not outlast it."""
    swallowed = 0
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded), tasks.step_time_limit("tool_execution"):
        try:
            time.sleep(10)
        except SoftTimeLimitExceeded:
            swallowed += 1
        time.sleep(10)  # goes on past its limit
    assert swallowed == 1 and time.monotonic() - started < 8  # not the second 10 s sleep


def test_no_timer_outside_the_main_thread(limits: PipelineSettings) -> None:
    ended: list[bool] = []

    def step() -> None:
        with tasks.step_time_limit("tool_execution"):
            time.sleep(1.3)
        ended.append(True)

    worker = threading.Thread(target=step)
    worker.start()
    worker.join()
    assert ended == [True]


def test_a_task_that_may_chain_a_tool_step_has_room_for_its_whole_limit() -> None:
    settings = PipelineSettings.load(
        tool_soft_time_limit=900,
        vlm_soft_time_limit=300,
        inline_seconds=60,
        hard_time_limit_margin=60,
    )
    app = make_app(settings)
    assert (app.conf.task_soft_time_limit, app.conf.task_time_limit) == (965, 1020)
    tool = app.conf.task_annotations[TOOL_BATCH_TASK]
    assert (tool["soft_time_limit"], tool["time_limit"]) == (905, 960)
    assert task_limits(settings, tool_task=False)[0] >= 60 + 900  # coordinate: inline + tool
    assert COORDINATE not in app.conf.task_annotations  # it takes the longer default
    assert settings.visibility_timeout > app.conf.task_time_limit


def test_a_step_is_chained_only_where_its_whole_limit_fits(
    limits: PipelineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool task (limit 1 s + 0.5 s) never runs a model step (2 s) after its tool step;
    the coordinating task runs a tool step inline."""
    monkeypatch.setattr(tasks, "_consumed_queues", lambda: frozenset({"default", "gpu"}))
    now = time.monotonic()
    summarize, tool = NextStep("summarize", 0), NextStep("tool_execution", 0)
    assert tasks._stays_here(now, tool_task=True)(summarize, {}) is None
    assert tasks._stays_here(now, tool_task=False)(tool, {}) == "gpu"
    assert tasks._stays_here(now, tool_task=False)(summarize, {}) == "default"
    assert tasks._stays_here(now - 61, tool_task=False)(tool, {}) is None  # inline time is up
