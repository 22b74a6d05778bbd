"""Which queues have a live consumer, and which hold work that no worker takes.

Redis, as Celery's broker, keeps no list of consumers: a worker's ``BRPOP`` leaves no trace,
and the ``_kombu.binding.*`` sets stay after a worker is gone.  So every worker announces
itself here: a field of the hash :data:`REGISTRY` per worker (its node name), holding its
queues and the time until which the announcement holds, renewed every few seconds by the
worker's event loop (:mod:`workers.health`).  A worker stopped cleanly withdraws its field; one
SIGKILLed stops renewing it, and its queues count as unconsumed once ``until`` passes.  Times
are the Redis server's (``TIME``), so clocks of other hosts never matter.

Reading it costs one round trip (``TIME``, ``HGETALL``, an ``LLEN`` per queue), cheap enough for
``eval list`` and every supervisor tick, unlike a broadcast ``inspect active_queues`` that waits
for replies.  The first time a reader sees a queue with messages waiting and no consumer, it
records that moment in :data:`UNCONSUMED` (``HSETNX``); it is cleared as soon as the queue has
a consumer again or is empty, so "since" is when it was first seen so, by whoever looked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

#: Hash: worker node name -> ``{"queues": [...], "until": epoch seconds}``.
REGISTRY = "agentic_iqa:consumers"
#: Hash: queue -> epoch seconds it was first seen holding work with no consumer.
UNCONSUMED = "agentic_iqa:unconsumed"
#: kombu's Redis transport keeps a queue's messages of priority p > 0 under NAME + SEP + p.
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
#: An announcement this long expired is removed by the next reader (replicas come and go).
PRUNE_AFTER = 3600.0


def is_redis(url: str | None) -> bool:
    """Return whether ``url`` names a Redis broker (the only kind this registry serves)."""
    return bool(url) and str(url).split("://", 1)[0] in ("redis", "rediss", "redis+socket")


def connect(url: str, timeout: float = 2.0) -> Any:
    """Return a Redis client for the broker ``url`` that gives up after ``timeout`` seconds."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def _now(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1e6


def announce(client: Any, hostname: str, queues: Iterable[str], ttl: float) -> None:
    """Record that worker ``hostname`` consumes ``queues`` for the next ``ttl`` seconds."""
    until = _now(client) + ttl
    client.hset(REGISTRY, hostname, json.dumps({"queues": sorted(queues), "until": until}))


def withdraw(client: Any, hostname: str) -> None:
    """Remove worker ``hostname``'s announcement (a clean shutdown)."""
    client.hdel(REGISTRY, hostname)


@dataclass(frozen=True)
class Unconsumed:
    """A queue holding messages that no live worker consumes."""

    queue: str
    waiting: int
    since: datetime

    def describe(self) -> str:
        """Return one line: the queue, how many wait, since when, and what to start."""
        when = self.since.strftime("%Y-%m-%d %H:%M:%S UTC")
        return (
            f"queue {self.queue!r}: {self.waiting} message(s) waiting and no worker consuming "
            f"it since {when}; start one: agentic-iqa worker --queues {self.queue}"
        )

    def to_json(self) -> dict[str, object]:
        return {"queue": self.queue, "waiting": self.waiting, "since": self.since.isoformat()}


def consumed_queues(client: Any, now: float) -> set[str]:
    """Return the queues some worker announced until after ``now``; prune long-dead ones."""
    consumed: set[str] = set()
    dead: list[str] = []
    for name, value in client.hgetall(REGISTRY).items():
        try:
            record = json.loads(value)
            until = float(record["until"])
            queues = [str(queue) for queue in record["queues"]]
        except (ValueError, KeyError, TypeError):
            dead.append(name)
            continue
        if until > now:
            consumed.update(queues)
        elif until < now - PRUNE_AFTER:
            dead.append(name)
    if dead:
        client.hdel(REGISTRY, *dead)
    return consumed


def waiting(client: Any, queues: list[str]) -> dict[str, int]:
    """Return the messages waiting in each queue (every priority of kombu's Redis transport)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.llen(queue)
        for step in PRIORITY_STEPS:
            pipe.llen(f"{queue}{PRIORITY_SEP}{step}")
    counts = pipe.execute()
    per = 1 + len(PRIORITY_STEPS)
    return {queue: sum(counts[i * per : (i + 1) * per]) for i, queue in enumerate(queues)}


def unconsumed(client: Any, queues: Iterable[str]) -> list[Unconsumed]:
    """Return each of ``queues`` that holds messages and has no live consumer, with since when;
    record a newly seen one and clear the record of every other."""
    names = list(dict.fromkeys(queues))
    now = _now(client)
    consumed = consumed_queues(client, now)
    counts = waiting(client, names)
    found: list[Unconsumed] = []
    for queue in names:
        if queue in consumed or counts[queue] == 0:
            client.hdel(UNCONSUMED, queue)
            continue
        client.hsetnx(UNCONSUMED, queue, repr(now))
        recorded = client.hget(UNCONSUMED, queue)
        try:
            first = float(recorded) if recorded is not None else now
        except ValueError:
            first = now
        found.append(Unconsumed(queue, counts[queue], datetime.fromtimestamp(first, UTC)))
    return found


def check_queues(broker_url: str | None, queues: Iterable[str]) -> list[Unconsumed]:
    """Return the unconsumed ones among ``queues`` of the broker at ``broker_url``; nothing for
    no broker (embedded mode), a broker other than Redis, or one that does not answer."""
    if not is_redis(broker_url):
        return []
    assert broker_url is not None
    client = connect(broker_url)
    try:
        return unconsumed(client, queues)
    except Exception as exc:  # the broker away: that is said elsewhere, not here
        log.debug("queue consumers not read: %s", type(exc).__name__)
        return []
    finally:
        client.close()


class QueueWatch:
    """:func:`unconsumed` of ``queues`` on one broker, its connection kept between calls (the
    supervisor asks every tick).  Returns nothing when the broker is not Redis or is away."""

    def __init__(self, broker_url: str | None, queues: Iterable[str]) -> None:
        self._url = broker_url if is_redis(broker_url) else None
        self._queues = list(queues)
        self._client: Any = None

    def __call__(self) -> list[Unconsumed]:
        if self._url is None:
            return []
        if self._client is None:
            self._client = connect(self._url)
        try:
            return unconsumed(self._client, self._queues)
        except Exception as exc:  # the broker away: the next tick tries again
            log.debug("queue consumers not read: %s", type(exc).__name__)
            return []
