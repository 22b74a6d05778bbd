"""The Celery app, configured from :class:`agentic_iqa.config.PipelineSettings`.

Reliability choices, deliberately:

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a task is acknowledged only after it
  finished, so a worker killed mid-task (OOM, SIGKILL, a lost GPU node) gives the message back;
* ``worker_prefetch_multiplier = 1``: a worker holds one message per process, so a long tool run
  does not sit on messages other workers could take;
* every step is idempotent by (run, step, iteration) in the database, which makes redelivery
  safe: a finished step is skipped, tool-log rows are unique;
* the broker's ``visibility_timeout`` is above the longest task's hard time limit, so Redis never
  hands a task that is still running to a second worker;
* time limits per step, whichever task runs it (:func:`workers.tasks.step_time_limit`): VLM
  steps short, tool steps long, a tool step run inside the coordinating task or after a VLM
  step on a worker of every queue included.  Celery's own limits per task are the backstop:
  a tool task's are a tool step's; any other task may run a tool step (a cached one, or any on
  a worker of the tool queue) after up to ``inline_seconds`` of other steps, so its limits
  cover that (:func:`task_limits`);
* VLM steps may have a queue of their own (``vlm_queue``) for workers with a thread pool
  (``--pool threads --concurrency 64``): they wait on the network, not the CPU, and their
  fleet-wide rate limits live in Redis (:mod:`agentic_iqa.vlm.ratelimit`).  A thread pool has
  no Celery time limits: there the step's own limit is a deadline on its model calls
  (:mod:`agentic_iqa.vlm.deadline`), and each call has a total deadline of ``timeout`` s;
* each worker's consumer announces its queues in the broker and touches a liveness file while
  it is connected (:mod:`workers.health`), for healthchecks and for naming a queue nobody reads;
* a queue entry that is not a message (not JSON, ``[]``, a dict without headers ...) is logged
  and kept on ``<queue>.dead`` instead of stopping the worker (:mod:`workers.broker`);
* task events on (``worker_send_task_events``, ``task_send_sent_event``), so Flower shows every
  step with its queue and state;
* nothing secret in Celery's configuration: the settings (whose database URL holds a password)
  live on the app object (:attr:`PipelineApp.settings`), not in ``app.conf``, which ``celery
  inspect conf`` and Flower show to anyone who reaches the broker; the broker and result backend
  URLs are there, and Celery masks their passwords (``tests/workers/test_secrets.py``).
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from agentic_iqa.config import PipelineSettings
from agentic_iqa.pipeline import STEPS, TOOL_STEPS
from iqa_tools.secret_env import with_redis_password
from workers.broker import transport_for
from workers.health import Liveness

#: The broker a worker with no ``broker_url`` setting reads (a Redis on this host).
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
COORDINATE = "agentic_iqa.coordinate"
FEED_JOB = "agentic_iqa.feed_job"
STEP_TASK_PREFIX = "agentic_iqa.step."
#: The tool step's batched form (``tool_batch_size`` > 1): same arguments, grouped by the worker.
TOOL_BATCH_TASK = STEP_TASK_PREFIX + "tool_execution.batch"
#: A chunk of a metric job's runs in one message, walked on a tool worker (``metric_chunk``).
METRIC_CHUNK_TASK = "agentic_iqa.metric_chunk"


def task_limits(settings: PipelineSettings, *, tool_task: bool) -> tuple[float, float]:
    """Celery's (soft, hard) time limit of a task: a tool step's for a tool task, else the
    longest step that may run last in a chain of ``inline_seconds``.  The soft one lies a
    little past the step's own (which says which limit ran out, and what to raise), the hard
    one ``hard_time_limit_margin`` past it: a step deaf to its soft limit is killed there."""
    longest = (
        settings.tool_soft_time_limit
        if tool_task
        else (
            settings.inline_seconds
            + max(settings.vlm_soft_time_limit, settings.tool_soft_time_limit)
        )
    )
    margin = settings.hard_time_limit_margin
    return longest + min(5.0, margin / 2), longest + margin


class PipelineApp(Celery):
    """The Celery app with the pipeline's settings beside (never inside) its configuration."""

    #: Set by :func:`make_app`; Celery's own constructor is left as it is (it rebuilds apps).
    settings: PipelineSettings


def make_app(settings: PipelineSettings | None = None) -> PipelineApp:
    """Build the Celery app from ``settings`` (default: :meth:`PipelineSettings.load`)."""
    settings = settings or PipelineSettings.load()
    app = PipelineApp("agentic_iqa")
    app.settings = settings
    tool_task = STEP_TASK_PREFIX + "tool_execution"
    vlm_queue = settings.vlm_steps_queue
    routes = {
        STEP_TASK_PREFIX + step: {"queue": vlm_queue} for step in STEPS if step not in TOOL_STEPS
    }
    routes[tool_task] = {"queue": settings.tool_queue}
    routes[TOOL_BATCH_TASK] = {"queue": settings.tool_queue}
    routes[METRIC_CHUNK_TASK] = {"queue": settings.tool_queue}
    tool_soft, tool_hard = task_limits(settings, tool_task=True)
    soft, hard = task_limits(settings, tool_task=False)
    tool_limits = {"soft_time_limit": tool_soft, "time_limit": tool_hard}
    queues = list(dict.fromkeys([settings.default_queue, vlm_queue, settings.tool_queue]))
    broker_url = settings.broker_url or with_redis_password(DEFAULT_BROKER) or DEFAULT_BROKER
    app.conf.update(
        broker_url=broker_url,
        # A queue entry that is not a message is dead-lettered, not fatal (workers/broker.py).
        broker_transport=transport_for(broker_url),
        result_backend=settings.result_backend,
        task_ignore_result=settings.result_backend is None,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=settings.default_queue,
        task_queues=[Queue(name) for name in queues],
        task_routes=routes,
        task_soft_time_limit=soft,
        task_time_limit=hard,
        # A batch's limit is one tool step's: size batches so that a batch fits in it.
        # A chunk's limits are a tool step's for each of its runs (each step keeps its own).
        task_annotations={
            tool_task: tool_limits,
            TOOL_BATCH_TASK: tool_limits,
            METRIC_CHUNK_TASK: {
                "soft_time_limit": tool_soft * settings.metric_chunk_size,
                "time_limit": tool_hard * settings.metric_chunk_size,
            },
        },
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            "unacked_restore_interval": settings.unacked_restore_interval,
            "unacked_restore_throttle": 1,
        },
        broker_connection_retry_on_startup=True,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        task_track_started=True,
        worker_hijack_root_logger=False,
        # The task module is imported by workers at start, not here (it imports this module).
        imports=["workers.tasks"],
    )
    app.steps["consumer"].add(Liveness)
    return app


app = make_app()
