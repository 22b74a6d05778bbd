"""Jobs that heal themselves: feed every worker-fed job and re-send runs that went quiet.

A message can be lost in many ways: Redis restarted without persistence, a worker SIGKILLed
holding an unacknowledged task (Redis gives it back only after the visibility timeout, an hour),
a submitter that died between storing a job and handing it over.  None of these needs a person
to run ``eval resume``: the database knows every run that should be moving, and each run carries
a lease that every sign of life pushes forward (dispatch, a step beginning, its heartbeat, its
end).  The supervisor, a loop in every worker of the default queue, periodically

1. closes items whose run ended but whose closing was lost, and jobs left with no open item,
2. tops up every running job that the workers feed (so a job needs no live submitter), and
3. re-sends each run whose lease has passed, exactly once per lease: the database decides which
   supervisor re-sends which run, so running several is safe;
4. names each queue that holds work and has no consumer (a SIGKILLed tool worker: its runs
   re-sent to a queue nobody reads), once when first seen and then every
   :data:`REPEAT_UNCONSUMED` seconds, and says when it has one again;
5. drives the batch jobs' rounds (:func:`.batches.tick`): polls their open batches, reads
   the answers, sends on the runs that have theirs, sends the next round's batch;
6. settles a job the workers ended: its counts checked, its headline for ``eval list`` stored.

Re-sending is idempotent by construction: a step already done is skipped, a step still running
under a live lease makes the duplicate wait, a step whose owner died is taken over.  This module
knows no Celery: it is handed a ``dispatch`` callable that sends a run on its way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.engine import Engine

from ..db import jobs as store
from ..db.engine import read_scope, session_scope
from ..db.items import close_orphaned_items
from ..db.jobs import jobs_to_feed, jobs_to_settle
from ..db.models import utc_now
from ..db.runs import claim_stalled
from ..redact import redact
from . import batches, lifecycle
from .consumers import Unconsumed

log = logging.getLogger(__name__)


@dataclass
class Tick:
    """What one round of supervision did, for logs and tests."""

    closed: int = 0
    finished: int = 0
    fed: dict[str, int] = field(default_factory=dict)
    resent: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: The batch jobs' rounds (``--batch``): batches sent, polled, read; runs sent on.
    batched: batches.RoundTick = field(default_factory=lambda: batches.RoundTick())
    #: The job the workers ended that this round settled (its headline stored), if any.
    settled: list[str] = field(default_factory=list)


def supervise_once(
    engine: Engine,
    *,
    window: int,
    lease_seconds: float,
    dispatch: Callable[[str], None],
    dispatch_chunk: Callable[[list[str]], None] | None = None,
    chunk_size: int = 1,
) -> Tick:
    """Run one round: close orphans, feed jobs, re-send stalled runs.  Never raises.
    ``dispatch_chunk``, ``chunk_size``: a metric job's runs are fed in chunks
    (:func:`.lifecycle.feed`); a stalled run is always re-sent alone.

    A failure of one part (the broker away while re-sending) is recorded and the rest goes on;
    whatever could not be sent keeps its fresh lease and is re-sent a lease later.
    """
    tick = Tick()
    try:
        with session_scope(engine) as session:
            tick.closed = close_orphaned_items(session)
            tick.finished = store.finish_complete_jobs(session)
            job_ids = jobs_to_feed(session)
    except Exception as exc:
        tick.errors.append(f"reading jobs: {redact(str(exc))}")
        return tick
    for job_id in job_ids:
        try:
            tick.fed[job_id] = lifecycle.feed(
                engine,
                job_id,
                window,
                dispatch,
                lease_seconds=lease_seconds,
                dispatch_chunk=dispatch_chunk,
                chunk_size=chunk_size,
            )
        except Exception as exc:
            tick.errors.append(f"feeding job {job_id}: {redact(str(exc))}")
    try:
        with session_scope(engine) as session:
            stalled = claim_stalled(session, lease_seconds)
    except Exception as exc:
        tick.errors.append(f"finding stalled runs: {redact(str(exc))}")
        return tick
    for run_id in stalled:
        try:
            dispatch(run_id)
            tick.resent.append(run_id)
        except Exception as exc:
            tick.errors.append(f"re-sending run {run_id}: {redact(str(exc))}")
    rounds = batches.tick(engine, dispatch=dispatch, lease_seconds=lease_seconds)
    tick.batched = rounds
    tick.errors.extend(rounds.errors)
    tick.settled = _settle_ended(engine)
    return tick


#: Jobs the workers ended within this long are settled by a supervisor (older ones, such as
#: jobs stored before headlines were kept, get theirs from the first ``eval list``).
SETTLE_WITHIN = timedelta(days=1)


def _settle_ended(engine: Engine) -> list[str]:
    """Settle one job the workers ended (:func:`.lifecycle.job_ended`: counts checked,
    statistics refreshed, headline stored): the job's report once, when it ends, so that
    ``eval list`` never computes it.  Returns the job settled, if any.  Two supervisors may
    settle the same job: both store the same headline."""
    try:
        with read_scope(engine) as session:
            ended = jobs_to_settle(session, since=utc_now() - SETTLE_WITHIN, limit=1)
        for job_id in ended:
            lifecycle.job_ended(engine, job_id)
        return ended
    except Exception as exc:  # a later tick tries again
        log.warning("supervisor: settling ended jobs: %s", redact(str(exc)))
        return []


#: Seconds between two log lines about the same queue with work and no consumer.
REPEAT_UNCONSUMED = 60.0


class UnconsumedLog:
    """Log each queue with work and no consumer when first seen and every ``repeat`` seconds;
    log once when it has a consumer again (or nothing waits)."""

    def __init__(self, repeat: float = REPEAT_UNCONSUMED) -> None:
        self._repeat = repeat
        self._named: dict[str, float] = {}

    def report(self, found: list[Unconsumed]) -> None:
        now = time.monotonic()
        seen = {queue.queue for queue in found}
        for queue in found:
            last = self._named.get(queue.queue)
            if last is None or now - last >= self._repeat:
                log.warning("supervisor: %s", queue.describe())
                self._named[queue.queue] = now
        for name in [name for name in self._named if name not in seen]:
            del self._named[name]
            log.info("supervisor: queue %r has a consumer again, or nothing waits in it", name)


class SupervisorThread(threading.Thread):
    """:func:`supervise_once` every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        *,
        window: int,
        lease_seconds: float,
        interval: float,
        dispatch: Callable[[str], None],
        dispatch_chunk: Callable[[list[str]], None] | None = None,
        chunk_size: int = 1,
        watch: Callable[[], list[Unconsumed]] | None = None,
    ) -> None:
        """``watch`` returns the queues holding work that no worker consumes (see
        :class:`.consumers.QueueWatch`); None: not watched."""
        super().__init__(name="agentic-iqa-supervisor", daemon=True)
        self._watch = watch
        self._unconsumed = UnconsumedLog()
        self._engine_factory = engine_factory
        self._window = window
        self._lease = lease_seconds
        self._interval = interval
        self._dispatch = dispatch
        self._dispatch_chunk = dispatch_chunk
        self._chunk_size = chunk_size
        self._stopped = threading.Event()

    def run(self) -> None:
        log.info("supervisor started: lease %.1fs, every %.1fs", self._lease, self._interval)
        while not self._stopped.wait(self._interval):
            try:
                tick = supervise_once(
                    self._engine_factory(),
                    window=self._window,
                    lease_seconds=self._lease,
                    dispatch=self._dispatch,
                    dispatch_chunk=self._dispatch_chunk,
                    chunk_size=self._chunk_size,
                )
            except Exception as exc:  # the engine itself could not be made; try next time
                log.warning("supervisor: %s", redact(str(exc)))
                continue
            if tick.resent:
                log.warning(
                    "supervisor: re-sent %d stalled run(s): %s",
                    len(tick.resent),
                    ", ".join(tick.resent[:10]),
                )
            for error in tick.errors:
                log.warning("supervisor: %s", error)
            if self._watch is not None:
                self._unconsumed.report(self._watch())

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout)
