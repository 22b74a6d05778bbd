"""The response cache never fills a store without eviction: entries expire (real Redis's TTL,
the SQLite row's age), an oversize answer is not stored, and the cache may live elsewhere than
the tool scores (the broker's Redis in the stack)."""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agentic_iqa.vlm import create_client
from agentic_iqa.vlm.base import VLMResponse
from agentic_iqa.vlm.cache import NAMESPACE, ResponseCache
from iqa_tools.cache import MemoryTextStore
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply, openai_completion
from tests.agentic_iqa.vlm.test_cache import KEY_ENV, config, image, plan_request  # noqa: F401

THIRTY_DAYS = 30 * 24 * 3600
PREFIX = f"agentic-iqa:{NAMESPACE}:"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-cache-bounds-secret")


@pytest.fixture
def store(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys(f"{PREFIX}*") or ["none"])
    yield client
    client.delete(*client.keys(f"{PREFIX}*") or ["none"])
    client.close()


def answering(text: str) -> FakeAPIServer:
    return FakeAPIServer(lambda _r: Reply(200, openai_completion(text)))


def ask_configured(server: FakeAPIServer, image_path: Path, user: str = "Is it blurry?") -> bool:
    """Ask through the configured cache (the environment's settings); True on a cache hit."""
    client = create_client("planner", {"planner": config(server)})
    return client.complete(plan_request(image_path, user)).cached


def cached_keys(store: redis.Redis) -> list[bytes]:
    return list(store.keys(f"{PREFIX}*"))


@pytest.mark.redis
def test_a_cached_answer_in_redis_expires_after_30_days_by_default(
    store: redis.Redis,
    redis_url: str,
    image: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", redis_url)
    with answering('{"ok": true}') as server:
        assert ask_configured(server, image) is False
        assert ask_configured(server, image) is True  # cached all the same
    [entry] = cached_keys(store)
    assert THIRTY_DAYS - 60 < store.ttl(entry) <= THIRTY_DAYS  # not -1: it expires
    assert store.strlen(entry) < 1024


@pytest.mark.redis
def test_the_expiry_is_a_setting(
    store: redis.Redis,
    redis_url: str,
    image: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", redis_url)
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE_TTL", "2")
    with answering('{"ok": true}') as server:
        ask_configured(server, image)
        [entry] = cached_keys(store)
        assert 0 < store.ttl(entry) <= 2
        time.sleep(2.2)
        assert cached_keys(store) == []
        assert ask_configured(server, image) is False  # expired: asked again
    assert len(server.requests) == 2


@pytest.mark.redis
def test_an_answer_above_the_entry_cap_is_not_cached_and_said_once(
    store: redis.Redis,
    redis_url: str,
    image: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two 2 MB answers (cap 1 MiB by default): neither stored, one warning; a small one is."""
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", redis_url)
    caplog.set_level(logging.WARNING, logger="agentic_iqa.vlm.cache")
    big = '{"ok": "' + "x" * (2 * 1024 * 1024) + '"}'
    with answering(big) as server:
        for user in ("first?", "second?"):
            assert ask_configured(server, image, user) is False
            assert ask_configured(server, image, user) is False  # never stored: asked again
    assert len(server.requests) == 4 and cached_keys(store) == []
    warnings = [r.getMessage() for r in caplog.records if "not cached" in r.getMessage()]
    assert len(warnings) == 1 and "AGENTIC_IQA_VLM_CACHE_MAX_ENTRY_BYTES" in warnings[0]
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE_MAX_ENTRY_BYTES", str(4 * 1024 * 1024))
    with answering(big) as server:
        ask_configured(server, image, "third?")
    [entry] = cached_keys(store)
    assert store.strlen(entry) > 2 * 1024 * 1024 and store.ttl(entry) > 0


@pytest.mark.redis
def test_the_cache_may_live_apart_from_the_tool_scores(
    store: redis.Redis,
    redis_url: str,
    image: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tool scores in (the broker's) Redis, the answers in a SQLite file of their own."""
    answers = tmp_path / f"answers-{uuid.uuid4().hex[:6]}.sqlite3"
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", redis_url)
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE_URL", f"sqlite:///{answers}")
    with answering('{"ok": true}') as server:
        ask_configured(server, image)
        assert ask_configured(server, image) is True
    assert cached_keys(store) == []
    with sqlite3.connect(answers) as connection:
        assert connection.execute(f"SELECT count(*) FROM {NAMESPACE}").fetchone() == (1,)


def test_a_sqlite_entry_older_than_the_ttl_is_not_served_and_is_purged(tmp_path: Path) -> None:
    """The table keeps its schema (key, value, created_at): its age decides."""
    path = tmp_path / "scores.sqlite3"
    with sqlite3.connect(path) as connection:  # a cache file written before expiry existed
        connection.execute(
            f"CREATE TABLE {NAMESPACE} (key TEXT PRIMARY KEY, value TEXT NOT NULL,"
            " created_at REAL NOT NULL)"
        )
    response = VLMResponse(text='{"ok": true}', model="gpt-4o")
    cache = ResponseCache.open(f"sqlite:///{path}", ttl=3600)
    cache.put("fresh", response)
    cache.put("stale", response)
    with sqlite3.connect(path) as connection:
        connection.execute(
            f"UPDATE {NAMESPACE} SET created_at = ? WHERE key = 'stale'", (time.time() - 3601,)
        )
    assert cache.get("fresh") is not None and cache.get("fresh").text == '{"ok": true}'  # type: ignore[union-attr]
    assert cache.get("stale") is None
    ResponseCache.open(f"sqlite:///{path}", ttl=3600)  # another process opens it
    with sqlite3.connect(path) as connection:
        rows = connection.execute(f"SELECT key FROM {NAMESPACE}").fetchall()
    assert rows == [("fresh",)]
    forever = ResponseCache.open(f"sqlite:///{path}")  # ttl None: nothing expires
    assert forever.get("fresh") is not None


def test_the_memory_store_forgets_after_its_ttl() -> None:
    store = MemoryTextStore(ttl=0.2)
    store.set("key", "value")
    assert store.get("key") == "value"
    time.sleep(0.3)
    assert store.get("key") is None
