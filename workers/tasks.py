"""One Celery task per step, and the coordinator that chains them by the plan's flags.

Tasks carry ids (run id, iteration), never images or state: each loads what it needs from the
database, calls :mod:`agentic_iqa.service`, and hands control back to the coordinator, which asks
the pure ``next_step`` what runs next and sends it to its queue.  Steps the plan turns off are
never enqueued.  Heavy objects (VLM clients, the tool registry and its pyiqa models) are created
lazily, once per worker process, after the fork.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from celery import Task
from sqlalchemy.engine import Engine

from agentic_iqa import service
from agentic_iqa.config import PipelineSettings
from agentic_iqa.db.engine import make_engine
from agentic_iqa.jobs import lifecycle
from agentic_iqa.pipeline import STEPS, TOOL_STEPS, Agents, default_agents
from agentic_iqa.vlm.base import TransientVLMError

from .celery_app import COORDINATE, FEED_JOB, STEP_TASK_PREFIX, app

log = logging.getLogger(__name__)


def settings() -> PipelineSettings:
    return app.conf.agentic_iqa


@lru_cache(maxsize=1)
def _agents(pid: int) -> Agents:
    return default_agents()


def agents() -> Agents:
    """Clients and registry of this worker process (built on first use, after the fork)."""
    return _agents(os.getpid())


def engine() -> Engine:
    return make_engine(settings().database_url)


def queue_for(step: str) -> str:
    return settings().tool_queue if step in TOOL_STEPS else settings().default_queue


@app.task(name=COORDINATE, acks_late=True)
def coordinate(run_id: str) -> str | None:
    """Send the run's next step to its queue, or close the run when nothing is left."""
    upcoming = service.advance(engine(), run_id)
    if upcoming is None:
        return None
    STEP_TASKS[upcoming.step].apply_async(
        (run_id, upcoming.iteration), queue=queue_for(upcoming.step))
    return upcoming.step


def _run_step(task: Task, step: str, run_id: str, iteration: int) -> None:
    delivery = task.request.delivery_info or {}
    queue = delivery.get("routing_key") or queue_for(step)
    try:
        service.execute_step(engine(), agents(), run_id, step, iteration,
                             worker=task.request.hostname or socket.gethostname(), queue=queue)
    except TransientVLMError as exc:
        retries = task.request.retries
        if retries < settings().vlm_max_retries:
            # Exponential backoff: 1, 2, 4 ... seconds, capped.
            countdown = min(settings().retry_backoff_max, 2 ** retries)
            raise task.retry(exc=exc, countdown=countdown,
                             max_retries=settings().vlm_max_retries) from exc
        service.fail(engine(), run_id, step, iteration,
                     f"{step} failed after {retries} retries: {exc}")
    coordinate.apply_async((run_id,), queue=settings().default_queue)


def _make_step_task(step: str) -> Any:
    def run(self: Task, run_id: str, iteration: int) -> None:
        _run_step(self, step, run_id, iteration)

    run.__name__ = run.__qualname__ = f"step_{step}"
    run.__doc__ = f"Run the {step!r} step of one run."
    return app.task(name=STEP_TASK_PREFIX + step, bind=True, acks_late=True)(run)


STEP_TASKS: dict[str, Any] = {step: _make_step_task(step) for step in STEPS}


def submit(run_id: str) -> None:
    """Start a stored run on the workers."""
    coordinate.apply_async((run_id,), queue=settings().default_queue)


@app.task(name=FEED_JOB, acks_late=True)
def feed_job(job_id: str) -> int:
    """Keep a dataset job's window of items in flight; re-schedules itself while items wait.

    Bounded batches instead of one chord over the dataset: the broker never holds more than
    ``job_window`` of a job's runs, and a resumed job just starts feeding again.
    """
    sent = lifecycle.feed(engine(), job_id, settings().job_window, submit)
    current = lifecycle.progress(engine(), job_id)
    if current.status == "running" and current.counts.get("pending", 0):
        feed_job.apply_async((job_id,), countdown=settings().feed_interval,
                             queue=settings().default_queue)
    return sent


def start_job(job_id: str, restart_runs: Sequence[str] = ()) -> None:
    """Hand a submitted (or resumed) job to the workers."""
    for run_id in restart_runs:
        submit(run_id)
    feed_job.apply_async((job_id,), queue=settings().default_queue)
