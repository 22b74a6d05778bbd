"""Which queues hold work no live worker consumes, told from workers' announcements in Redis."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from agentic_iqa.runtime import consumers
from agentic_iqa.runtime.consumers import (
    PRIORITY_SEP,
    REGISTRY,
    UNCONSUMED,
    QueueWatch,
    announce,
    check_queues,
    unconsumed,
    withdraw,
)
from agentic_iqa.runtime.supervisor import UnconsumedLog

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    connection = redis.Redis.from_url(redis_url)
    connection.flushdb()
    yield connection
    connection.flushdb()
    connection.close()


def names(found: list[consumers.Unconsumed]) -> dict[str, int]:
    return {queue.queue: queue.waiting for queue in found}


def test_a_queue_with_messages_and_no_announced_worker_is_named_with_its_count(client) -> None:
    client.rpush("gpu", "m1", "m2")
    client.rpush("default", "m3")
    announce(client, "default@h", ["default"], ttl=30)
    assert names(unconsumed(client, ["default", "gpu", "vlm"])) == {"gpu": 2}


def test_an_empty_queue_without_a_worker_is_not_named(client) -> None:
    assert unconsumed(client, ["gpu"]) == []


def test_every_priority_of_a_queue_is_counted(client) -> None:
    client.rpush("gpu", "a")
    client.rpush(f"gpu{PRIORITY_SEP}3", "b", "c")
    client.rpush(f"gpu{PRIORITY_SEP}9", "d")
    assert names(unconsumed(client, ["gpu"])) == {"gpu": 4}


def test_a_worker_of_several_queues_serves_each(client) -> None:
    client.rpush("gpu", "m")
    client.rpush("vlm", "m")
    announce(client, "all@h", ["default", "gpu"], ttl=30)
    assert names(unconsumed(client, ["default", "gpu", "vlm"])) == {"vlm": 1}


def test_a_worker_whose_announcement_lapsed_serves_nothing(client) -> None:
    """A SIGKILLed worker stops renewing: its queue counts as unconsumed once ``until`` passed."""
    client.rpush("gpu", "m")
    announce(client, "gpu@h", ["gpu"], ttl=0.3)
    assert unconsumed(client, ["gpu"]) == []
    time.sleep(0.5)
    assert names(unconsumed(client, ["gpu"])) == {"gpu": 1}


def test_a_withdrawn_worker_serves_nothing_at_once(client) -> None:
    client.rpush("gpu", "m")
    announce(client, "gpu@h", ["gpu"], ttl=30)
    withdraw(client, "gpu@h")
    assert names(unconsumed(client, ["gpu"])) == {"gpu": 1}


def test_since_is_when_first_seen_and_is_cleared_when_a_worker_comes(client) -> None:
    client.rpush("gpu", "m")
    before = datetime.now(UTC) - timedelta(seconds=1)
    (first,) = unconsumed(client, ["gpu"])
    time.sleep(0.3)
    (again,) = unconsumed(client, ["gpu"])
    assert before <= first.since <= datetime.now(UTC) and again.since == first.since
    announce(client, "gpu@h", ["gpu"], ttl=30)
    assert unconsumed(client, ["gpu"]) == [] and client.hget(UNCONSUMED, "gpu") is None
    withdraw(client, "gpu@h")
    (later,) = unconsumed(client, ["gpu"])  # gone again: a new "since", not the old one
    assert later.since > first.since


def test_since_is_cleared_when_the_queue_empties(client) -> None:
    client.rpush("gpu", "m")
    unconsumed(client, ["gpu"])
    client.delete("gpu")
    assert unconsumed(client, ["gpu"]) == [] and client.hget(UNCONSUMED, "gpu") is None


def test_long_dead_and_unreadable_announcements_are_pruned(client) -> None:
    now = float(client.time()[0])
    client.hset(REGISTRY, "old@h", json.dumps({"queues": ["gpu"], "until": now - 7200}))
    client.hset(REGISTRY, "recent@h", json.dumps({"queues": ["gpu"], "until": now - 5}))
    client.hset(REGISTRY, "junk@h", "not json")
    unconsumed(client, ["gpu"])
    assert set(client.hkeys(REGISTRY)) == {b"recent@h"}


def test_the_line_names_queue_count_since_and_the_command(client) -> None:
    client.rpush("gpu", "a", "b")
    (queue,) = unconsumed(client, ["gpu"])
    line = queue.describe()
    assert "queue 'gpu'" in line and "2 message(s) waiting" in line
    assert queue.since.strftime("%Y-%m-%d %H:%M:%S UTC") in line
    assert line.endswith("agentic-iqa worker --queues gpu")
    assert queue.to_json() == {"queue": "gpu", "waiting": 2, "since": queue.since.isoformat()}


@pytest.mark.parametrize("url", [None, "", "amqp://guest@localhost//", "memory://"])
def test_nothing_is_asked_without_a_redis_broker(url: str | None) -> None:
    assert check_queues(url, ["gpu"]) == [] and QueueWatch(url, ["gpu"])() == []


def test_a_broker_that_does_not_answer_names_nothing() -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = f"redis://127.0.0.1:{port}/0"
    assert check_queues(dead, ["gpu"]) == [] and QueueWatch(dead, ["gpu"])() == []


def test_the_watch_reads_the_broker_it_was_given(client, redis_url: str) -> None:
    client.rpush("gpu", "m")
    watch = QueueWatch(redis_url, ["default", "gpu"])
    assert names(watch()) == {"gpu": 1}
    announce(client, "gpu@h", ["gpu"], ttl=30)
    assert watch() == []


def test_the_supervisor_names_a_queue_once_then_every_repeat_and_when_it_is_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpu = consumers.Unconsumed("gpu", 2, datetime(2026, 12, 2, 3, 12, 5, tzinfo=UTC))
    reporter = UnconsumedLog(repeat=0.3)
    caplog.set_level(logging.INFO, logger="agentic_iqa.runtime.supervisor")
    reporter.report([gpu])
    reporter.report([gpu])
    assert [r.getMessage() for r in caplog.records] == [f"supervisor: {gpu.describe()}"]
    time.sleep(0.35)
    reporter.report([gpu])
    reporter.report([])
    reporter.report([])
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"supervisor: {gpu.describe()}",
        f"supervisor: {gpu.describe()}",
        "supervisor: queue 'gpu' has a consumer again, or nothing waits in it",
    ]
    assert caplog.records[0].levelno == logging.WARNING
