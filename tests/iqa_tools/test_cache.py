import math
import subprocess
import sys
import uuid

import pytest

from iqa_tools.cache import (
    MemoryStore,
    NullStore,
    RedisStore,
    ScoreCache,
    SQLiteStore,
    cache_key,
    open_store,
)


def test_key_has_tool_numerics_image_and_reference_digests():
    assert cache_key("SSIM", "aa", "bb", numerics="float32") == "SSIM|float32|aa|bb"
    assert cache_key("NIQE", "aa", numerics="float64") == "NIQE|float64|aa|-"
    assert cache_key("SSIM", "aa", "bb", numerics="float32") != cache_key(
        "SSIM", "aa", "cc", numerics="float32"
    )
    assert cache_key("NIQE", "aa", numerics="float64") != cache_key(
        "NIQE", "aa", numerics="float32"
    )
    with pytest.raises(ValueError, match="numerics"):
        cache_key("NIQE", "aa", numerics="")
    with pytest.raises(TypeError):
        cache_key("NIQE", "aa")  # type: ignore[call-arg]


def test_memory_store_evicts_least_recently_used():
    store = MemoryStore(max_entries=2)
    store.set("a", 1.0)
    store.set("b", 2.0)
    assert store.get("a") == 1.0  # "a" is now the most recent
    store.set("c", 3.0)
    assert store.get("b") is None
    assert store.get("a") == 1.0 and store.get("c") == 3.0
    assert len(store) == 2


def test_sqlite_store_is_shared_with_another_process(tmp_path):
    path = tmp_path / "scores.sqlite3"
    SQLiteStore(path).set("SSIM|x|y", 0.25)
    code = (
        "from iqa_tools.cache import SQLiteStore; import sys; "
        f"s = SQLiteStore({str(path)!r}); print(s.get('SSIM|x|y')); s.set('NIQE|x|-', 4.5)"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "0.25"
    assert SQLiteStore(path).get("NIQE|x|-") == 4.5


def test_score_cache_promotes_store_hits_to_memory(tmp_path):
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.set("k", 3.0)
    cache = ScoreCache(store)
    assert cache.get("k") == (3.0, "store")
    assert cache.get("k") == (3.0, "memory")
    assert cache.get("missing") is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_are_never_cached(tmp_path, value):
    cache = ScoreCache(SQLiteStore(tmp_path / "s.sqlite3"))
    cache.set("k", value)
    assert cache.get("k") is None


def test_open_store_by_url(tmp_path):
    assert isinstance(open_store("none"), NullStore)
    assert isinstance(open_store("memory"), MemoryStore)
    assert isinstance(open_store(f"sqlite:///{tmp_path}/c.sqlite3"), SQLiteStore)
    with pytest.raises(ValueError, match="unsupported tool cache URL"):
        open_store("ftp://example")


@pytest.mark.redis
def test_redis_store_round_trip_across_clients(redis_url):
    prefix = f"test-{uuid.uuid4().hex}:"
    writer = RedisStore(redis_url, prefix=prefix)
    reader = RedisStore(redis_url, prefix=prefix)
    try:
        assert reader.get("SSIM|a|b") is None
        writer.set("SSIM|a|b", 0.123456789012345)
        assert reader.get("SSIM|a|b") == 0.123456789012345
        assert isinstance(open_store(redis_url), RedisStore)
    finally:
        writer._client.delete(prefix + "SSIM|a|b")
        writer.close()
        reader.close()
