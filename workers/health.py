"""A worker's sign of life: its queues announced in the broker, and a liveness file touched.

:class:`Liveness` is a bootstep of the worker's consumer.  While the consumer is connected to
the broker, a timer of its event loop, every ``worker_health_interval`` seconds,

1. announces this worker's node name and queues in the broker's Redis for three intervals
   (:mod:`agentic_iqa.runtime.consumers`), so ``eval status``, ``eval list`` and the
   supervisor can name a queue with work and no consumer, and
2. when ``worker_health_file`` is set (``AGENTIC_IQA_WORKER_HEALTH_FILE``, ``agentic-iqa worker
   --health-file``), touches that file, only after the announcement reached the broker.

When the broker goes away the consumer stops its steps (this one's timer with them) and
reconnects; the file then ages, which a container healthcheck reads without starting Python::

    test $(( $(date +%s) - $(stat -c %Y "$AGENTIC_IQA_WORKER_HEALTH_FILE") )) -lt 30

A frozen event loop, a hung broker connection (the announcement times out) and a stopped worker
all leave the file stale the same way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery import bootsteps

from agentic_iqa.config import PipelineSettings
from agentic_iqa.runtime import consumers

log = logging.getLogger(__name__)

#: An announcement holds this many intervals: one missed beat does not unlist a worker.
ANNOUNCE_INTERVALS = 3


def touch(path: Path) -> None:
    """Set ``path``'s modification time to now, creating it (and its folder) if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path)


class Liveness(bootsteps.StartStopStep):
    """Announce the consumer's queues and touch the liveness file on the event loop's timer."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        settings: PipelineSettings = c.app.settings
        self.interval = settings.worker_health_interval
        self.path = settings.worker_health_file
        self.broker_url = (
            c.app.conf.broker_url if consumers.is_redis(c.app.conf.broker_url) else None
        )
        self.tref: Any = None
        self.client: Any = None
        super().__init__(c, **kwargs)

    def include_if(self, c: Any) -> bool:
        return self.path is not None or self.broker_url is not None

    def start(self, c: Any) -> None:
        if self.broker_url is not None and self.client is None:
            self.client = consumers.connect(self.broker_url, timeout=min(2.0, self.interval))
        self.beat(c)
        self.tref = c.timer.call_repeatedly(self.interval, self.beat, (c,), priority=10)

    def beat(self, c: Any) -> None:
        """Announce, then touch: a failed announcement (broker away) leaves the file as it is."""
        try:
            if self.client is not None:
                queues = [queue.name for queue in getattr(c.task_consumer, "queues", None) or ()]
                consumers.announce(
                    self.client, c.hostname, queues, self.interval * ANNOUNCE_INTERVALS
                )
            if self.path is not None:
                touch(self.path)
        except Exception as exc:  # the next beat tries again; the file ages meanwhile
            log.warning("worker liveness: %s: %s", type(exc).__name__, exc)

    def stop(self, c: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    def shutdown(self, c: Any) -> None:
        """Stop beating and withdraw the announcement: a stopped worker consumes nothing."""
        self.stop(c)
        if self.client is not None:
            try:
                consumers.withdraw(self.client, c.hostname)
            except Exception as exc:  # its announcement expires by itself
                log.debug("worker liveness: withdraw: %s", type(exc).__name__)
            self.client.close()
            self.client = None
