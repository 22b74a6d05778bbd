"""Leases of the steps running in this process, renewed by one thread for all of them.

A step running on a worker holds a lease; while it runs, its lease (and its run's) is pushed a
full lease ahead every quarter lease, so the supervisor never mistakes a long step for a dead
one.  One daemon thread per process serves every step of that process (a thread pool runs
many): holding a lease costs a dictionary entry, not a thread started and joined per step,
which under load costs milliseconds of scheduling.

A beat that fails (database briefly away) is logged and tried at the next beat: a missed beat
costs at worst a duplicate delivery, which waits or takes over, never double work.

A local job also records which process holds its leases (:class:`Holder`: host, boot id, pid
and the pid's start time), so that ``eval resume`` on the same host can tell a holder that died
(SIGKILL, a closed laptop lid's OOM) from one that is still working, and take over at once
instead of waiting out a lease nobody renews.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import Engine

from ..db.engine import session_scope
from ..db.runs import extend_lease

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
    def hold(
        self,
        engine: Engine,
        run_id: str,
        step: str,
        iteration: int,
        lease_seconds: float | None,
        attempt: int | None = None,
    ) -> Iterator[None]:
        """Renew the step's lease every quarter lease while the block runs (None: no lease);
        for ``attempt`` only while it owns the step."""
        if lease_seconds is None:
            yield
            return
        with self._changed:
            key = next(self._ids)
            self._held[key] = _Held(
                engine,
                run_id,
                step,
                iteration,
                lease_seconds,
                time.monotonic() + lease_seconds / 4,
                attempt,
            )
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
            step = (
                (held.step, held.iteration)
                if held.attempt is None
                else (held.step, held.iteration, held.attempt)
            )
            extend_lease(session, held.run_id, held.lease_seconds, step=step)
    except Exception as exc:  # keep beating; the next one may get through
        log.warning(
            "run %s: heartbeat of %s#%d failed: %s", held.run_id, held.step, held.iteration, exc
        )


#: This process's heartbeats.
HEARTBEATS = Heartbeats()


#: Where Linux says which boot this is: a new random id at every boot, so a pid recorded under
#: another boot id names no process of this one.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

#: What a recorded holder is, seen from here: running, gone (it died), or not ours to tell.
HolderState = Literal["alive", "gone", "unknown"]


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:  # not Linux: a holder can then never be told dead, only waited out
        return None


def _started(pid: int) -> int | None:
    """Return when ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat), so that
    a pid reused by a later process is not mistaken for the holder; None when there is none,
    or only its zombie (killed, not yet reaped by its parent: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclass(frozen=True)
class Holder:
    """A process holding a local job's leases, recorded so another process can check it."""

    host: str
    boot: str | None
    pid: int
    started: int | None

    @classmethod
    def here(cls) -> Holder:
        """Return this process."""
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, _started(pid))

    def to_json(self) -> str:
        return json.dumps(
            {"host": self.host, "boot": self.boot, "pid": self.pid, "started": self.started}
        )

    @classmethod
    def from_json(cls, text: str | None) -> Holder | None:
        """Return the holder recorded as ``text``; None for none (or a record this cannot read)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(str(data["host"]), data.get("boot"), int(data["pid"]), data.get("started"))
        except (ValueError, KeyError, TypeError):
            return None

    def state(self) -> HolderState:
        """Return ``gone`` only when it is certain: the same boot of this host (boot id) and no
        process with that pid, or one that started at another time (the pid was reused);
        ``alive`` when that very process runs; ``unknown`` for another host or boot, or where
        there is no boot id to compare."""
        here = _boot_id()
        if here is None or self.boot is None or self.boot != here:
            return "unknown"
        started = _started(self.pid)
        if started is None or (self.started is not None and started != self.started):
            return "gone"
        return "alive"

    def describe(self) -> str:
        """Return "process 4242 on host gpu-07", for messages."""
        return f"process {self.pid} on host {self.host}"
