"""Leases of the steps running in this process, renewed by one thread for all of them.

A step running on a worker holds a lease; while it runs, its lease (and its run's) is pushed a
full lease ahead every quarter lease, so the supervisor never mistakes a long step for a dead
one.  One daemon thread per process serves every step of that process (a thread pool runs
many): holding a lease costs a dictionary entry, not a thread started and joined per step,
which under load costs milliseconds of scheduling.

A beat that fails (database briefly away) is logged and tried at the next beat: a missed beat
costs at worst a duplicate delivery, which waits or takes over, never double work.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from ..db import steps
from ..db.engine import session_scope

log = logging.getLogger(__name__)


@dataclass
class _Held:
    engine: Engine
    run_id: str
    step: str
    iteration: int
    lease_seconds: float
    due: float
    attempt: int | None = None


class Heartbeats:
    """The steps holding a lease in this process, and the thread that renews them."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._reset()
        # Prefork pool children: the parent's thread is not copied, and its lock may have
        # been held by it at the fork; the child starts afresh.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._held: dict[int, _Held] = {}
        self._changed = threading.Condition()
        self._started = False

    @contextmanager
    def hold(self, engine: Engine, run_id: str, step: str, iteration: int,
             lease_seconds: float | None, attempt: int | None = None) -> Iterator[None]:
        """Renew the step's lease every quarter lease while the block runs (None: no lease);
        for ``attempt`` only while it owns the step."""
        if lease_seconds is None:
            yield
            return
        with self._changed:
            key = next(self._ids)
            self._held[key] = _Held(engine, run_id, step, iteration, lease_seconds,
                                    time.monotonic() + lease_seconds / 4, attempt)
            self._ensure_thread()
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._held.pop(key, None)

    def _ensure_thread(self) -> None:
        if not self._started:
            self._started = True
            threading.Thread(target=self._run, name="lease-heartbeat", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = [held for held in self._held.values() if held.due <= now]
                if not due:
                    soonest = min((held.due for held in self._held.values()), default=None)
                    self._changed.wait(None if soonest is None else soonest - now)
                    continue
                for held in due:
                    held.due = time.monotonic() + held.lease_seconds / 4
            for held in due:
                _beat(held)


def _beat(held: _Held) -> None:
    try:
        with session_scope(held.engine) as session:
            step = ((held.step, held.iteration) if held.attempt is None
                    else (held.step, held.iteration, held.attempt))
            steps.extend_lease(session, held.run_id, held.lease_seconds, step=step)
    except Exception as exc:  # keep beating; the next one may get through
        log.warning("run %s: heartbeat of %s#%d failed: %s", held.run_id, held.step,
                    held.iteration, exc)


#: This process's heartbeats.
HEARTBEATS = Heartbeats()
