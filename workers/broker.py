"""Read the broker's queues so that an entry which is not a message never stops a worker.

kombu's Redis transport decodes each entry it pops (``json.loads``, then its ``Message``) inside
the worker's event loop: an entry that is not JSON, or JSON that is not a message (``[]``,
``{}``, ``"x"``, a dict without headers, a body that is not base64), raises there, Celery calls
it an "Unrecoverable error" and the worker stops.  :class:`GuardedTransport` is kombu's Redis
transport with a channel that checks each entry before kombu builds its ``Message``: one that
does not decode or has not a message's shape is logged in one line, pushed whole (up to
:data:`DEAD_ENTRY_BYTES`) onto ``<queue>.dead`` (the newest :data:`DEAD_KEEP` are kept), and the
worker goes on to the next entry.  What Celery itself can judge (an unknown task, arguments
that do not fit, a body that is not JSON) is left to Celery, which logs and drops it.

It is a subclass, not a patch: :func:`transport_for` names it as Celery's ``broker_transport``
for ``redis://`` brokers.  Any other keeps kombu's own transport: ``rediss://`` among them,
since kombu chooses its TLS defaults by that scheme name, which a transport given by name hides.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from queue import Empty
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.utils.json import dumps
from kombu.utils.scheduling import round_robin_cycle

from agentic_iqa.redact import redact

log = logging.getLogger(__name__)

#: The dead-letter list of a queue: ``<queue>.dead``.
DEAD_SUFFIX = ".dead"
#: The newest entries a dead-letter list keeps.
DEAD_KEEP = 100
#: The bytes of an entry a dead-letter list keeps (a longer one is cut there).
DEAD_ENTRY_BYTES = 1 << 20
#: The characters of an entry its log line shows.
PREVIEW_CHARS = 60

GUARDED = "workers.broker:GuardedTransport"


def transport_for(broker_url: str) -> str | None:
    """Return the transport Celery should use for ``broker_url``: ours for ``redis://``, else
    None (the URL's own)."""
    scheme = broker_url.split("://", 1)[0].lower() if "://" in broker_url else ""
    return GUARDED if scheme == "redis" else None


def dead_letters(queue: str) -> str:
    """Return the name of the list where ``queue``'s malformed entries are kept."""
    return queue + DEAD_SUFFIX


def message_problem(payload: object) -> str | None:
    """Return why a decoded queue entry is not a message kombu and Celery can read, or None."""
    if not isinstance(payload, dict):
        return f"JSON {type(payload).__name__}, not a message object"
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        return "no 'properties' object"
    tag = properties.get("delivery_tag")
    if not isinstance(tag, str | int) or isinstance(tag, bool):
        return "no 'properties.delivery_tag' string"
    delivery = properties.get("delivery_info")
    if not isinstance(delivery, dict) or not {"exchange", "routing_key"} <= delivery.keys():
        return "no 'properties.delivery_info' with exchange and routing_key"
    headers = payload.get("headers")
    if not isinstance(headers, dict):
        return "no 'headers' object"
    if not isinstance(headers.get("task", ""), str):
        return "'headers.task' is not a string"
    body = payload.get("body")
    if not isinstance(body, str):
        return "no 'body' string"
    for field in ("content-type", "content-encoding"):
        if not isinstance(payload.get(field, ""), str):
            return f"'{field}' is not a string"
    encoding = properties.get("body_encoding")
    if encoding == "base64":
        try:
            base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return "'body' is not base64"
    elif encoding not in (None, "utf-8"):
        return f"unknown body_encoding {str(encoding)[:20]!r}"
    return None


def _preview(text: str) -> str:
    return redact(text[:PREVIEW_CHARS]) + ("..." if len(text) > PREVIEW_CHARS else "")


class GuardedChannel(kombu_redis.Channel):
    """A Redis channel that drops (and dead-letters) entries that are not messages."""

    _reached_delivery = False

    def dead_letter(self, queue: str | None, raw: str | None, reason: str) -> None:
        """Log a malformed entry in one line and keep it on ``<queue>.dead``."""
        size = len(raw.encode("utf-8", "replace")) if raw is not None else 0
        where = dead_letters(queue) if queue and raw is not None else None
        log.error(
            "dropped a malformed entry on queue %r: %s (%d bytes%s)%s",
            queue or "?",
            reason,
            size,
            f", starts {_preview(raw)!r}" if raw else "",
            f"; kept in Redis list {where!r}" if where else "",
        )
        if where is None or raw is None:
            return
        data = raw.encode("utf-8", "replace")[:DEAD_ENTRY_BYTES]
        try:
            with self.conn_or_acquire() as client, client.pipeline() as pipe:
                pipe.lpush(where, data)
                pipe.ltrim(where, 0, DEAD_KEEP - 1)
                pipe.execute()
        except self.connection_errors:
            log.warning("could not keep the malformed entry in %r: the broker is away", where)

    def _last_popped_queue(self) -> str | None:
        """Return the queue BRPOP just answered from: the one kombu rotated to the end."""
        items = getattr(self._queue_cycle, "items", None)
        if isinstance(self._queue_cycle, round_robin_cycle) and items:
            return str(items[-1])
        queues = list(self.active_queues)
        return queues[0] if len(queues) == 1 else None

    def _brpop_read(self, **options: Any) -> Any:
        self._reached_delivery = False
        try:
            return super()._brpop_read(**options)
        except self.connection_errors:
            raise
        except (ValueError, TypeError) as exc:  # kombu's loads: not JSON, or its object hook
            if self._reached_delivery:
                raise
            self.dead_letter(self._last_popped_queue(), getattr(exc, "doc", None), _why(exc))
            raise Empty() from None

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        try:
            return super()._get(queue)
        except self.connection_errors:
            raise
        except (ValueError, TypeError) as exc:
            self.dead_letter(queue, getattr(exc, "doc", None), _why(exc))
            raise Empty() from None

    def basic_consume(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        tag = super().basic_consume(queue, *args, **kwargs)
        callback = self.connection._callbacks.get(queue)
        if callback is not None:
            self.connection._callbacks[queue] = self._guard(queue, callback)
        return tag

    def _guard(self, queue: str, callback: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def deliver(raw_message: Any) -> Any:
            self._reached_delivery = True
            problem = message_problem(raw_message)
            if problem is not None:
                self.dead_letter(queue, dumps(raw_message), problem)
                return None
            return callback(raw_message)

        return deliver


def _why(exc: Exception) -> str:
    msg = getattr(exc, "msg", None)
    if msg is not None and hasattr(exc, "pos"):
        return f"not JSON ({msg} at character {exc.pos})"
    return f"not a message ({type(exc).__name__}: {str(exc)[:80]})"


class GuardedTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`GuardedChannel`."""

    Channel = GuardedChannel
