"""Cache raw tool scores: an in-process LRU in front of a store shared by processes and runs.

The key is ``tool | numerics | sha256(image bytes) | sha256(reference bytes)``, where
``numerics`` is the tool's precision (``float32`` or ``float64``, see ``ToolSpec.precision``):
everything that determines the raw score.  Keys written before precision was part of them had
three fields, so they can never be read back as a float64 score.  Only *raw* scores are stored;
normalization is applied on read, so recalibrating a tool never serves stale values.  Non-finite
scores and failures are never cached.

The device is not in the key on purpose: a score must not depend on which worker computed it,
and the tolerance is what makes that true.  float64 tools agree between CPU and CUDA to 1e-6
raw points for BRISQUE and 1e-13 for PIQE, and NIQE to 6e-4 (H200, 40 LIVE-C photos and 10
burnt-out copies, docs/measurements/device_consistency_h200.txt; in float32 BRISQUE differed by
up to 7.8 and PIQE by 2.4).  float32 tools differ by float32 rounding: on the CPU about 1e-5
for the weight-free full-reference metrics (|float32 - float64| on the TID2013 pairs); on CUDA
pyiqa allows TF32 convolutions (10 mantissa bits) inside every forward, so conv-based float32
tools, deep networks included, can differ by about 1e-3 relative there (not measured per tool).
``benchmarks/device_consistency.py`` measures the gaps.

Stores are chosen by URL:

* ``sqlite:///path/to/file.sqlite3``: the default, a file shared by every process on a machine
  (WAL mode, busy timeout, so concurrent workers do not trip over each other);
* ``redis://host:port/db``: shared by every machine of a cluster;
* ``memory``: this process only; ``none``: no persistence at all.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, Protocol, cast

from .errors import StoreUnavailable

CacheSource = Literal["memory", "store"]


def cache_key(
    tool: str, image_digest: str, reference_digest: str | None = None, *, numerics: str
) -> str:
    """The store key; ``numerics`` (required, so no caller forgets it) is the tool's precision."""
    if not numerics or "|" in numerics:
        raise ValueError(f"numerics must be a non-empty tag without '|', got {numerics!r}")
    return f"{tool}|{numerics}|{image_digest}|{reference_digest or '-'}"


class ScoreStore(Protocol):
    """Where raw scores persist.  Implementations must be safe to share between threads."""

    def get(self, key: str) -> float | None: ...

    def set(self, key: str, value: float) -> None: ...

    def close(self) -> None: ...


class NullStore:
    """Remembers nothing (``cache: none``)."""

    def get(self, key: str) -> float | None:
        return None

    def set(self, key: str, value: float) -> None:
        return None

    def close(self) -> None:
        return None


class MemoryStore:
    """A bounded LRU map, thread-safe."""

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._data: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> float | None:
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            return self._data[key]

    def set(self, key: str, value: float) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def close(self) -> None:
        return None


class SQLiteStore:
    """A SQLite file shared by processes; one connection per thread."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self._local = threading.local()
        with self._connection() as connection:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS tool_scores ("
                " key TEXT PRIMARY KEY, raw_score REAL NOT NULL, created_at REAL NOT NULL)"
            )

    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            # A cache: losing the last scores to a power cut costs a recomputation, while an
            # fsync per stored score costs more than a fast tool on a GPU.
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            self._local.connection = connection
        return connection

    def get(self, key: str) -> float | None:
        row = (
            self._connection()
            .execute("SELECT raw_score FROM tool_scores WHERE key = ?", (key,))
            .fetchone()
        )
        return None if row is None else float(row[0])

    def set(self, key: str, value: float) -> None:
        self._connection().execute(
            "INSERT OR REPLACE INTO tool_scores (key, raw_score, created_at) VALUES (?, ?, ?)",
            (key, value, time.time()),
        )

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


class RedisStore:
    """Raw scores as plain Redis strings under a key prefix."""

    def __init__(self, url: str, prefix: str = "agentic-iqa:tool-score:") -> None:
        import redis

        self.prefix = prefix
        self.where = url
        self._client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)

    def get(self, key: str) -> float | None:
        value = self._client.get(self.prefix + key)
        return None if value is None else float(value)

    def set(self, key: str, value: float) -> None:
        self._client.set(self.prefix + key, repr(value))

    def close(self) -> None:
        self._client.close()


def _unavailable(store: object, exc: Exception) -> str:
    import re

    where = getattr(store, "where", None) or str(getattr(store, "path", type(store).__name__))
    where = re.sub(r"://[^/@\s]*@", "://***@", where)
    return (
        f"the tool-score cache at {where} does not answer ({type(exc).__name__}: "
        f"{str(exc)[:160]}); start it, or point AGENTIC_IQA_TOOL_CACHE elsewhere "
        "(memory, none, sqlite:///PATH)"
    )


def open_store(url: str) -> ScoreStore:
    """Open the persistent store a cache URL names (see the module docstring)."""
    if url in {"", "none"}:
        return NullStore()
    if url == "memory":
        return MemoryStore()
    if url.startswith("sqlite:///"):
        return SQLiteStore(url.removeprefix("sqlite:///"))
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisStore(url)
    raise ValueError(
        f"unsupported tool cache URL {url!r}: use sqlite:///PATH, redis://HOST:PORT/DB, "
        "memory or none"
    )


class ScoreCache:
    """The in-process LRU in front of a persistent store.

    A store that does not answer (Redis down, a SQLite file on a full or read-only disk) is
    :class:`~.errors.StoreUnavailable`, one line naming it, never a driver's traceback."""

    def __init__(self, store: ScoreStore, memory_entries: int = 4096) -> None:
        self.store = store
        self.memory = MemoryStore(memory_entries)

    def get(self, key: str) -> tuple[float, CacheSource] | None:
        value = self.memory.get(key)
        if value is not None:
            return value, "memory"
        with self._store_errors():
            value = self.store.get(key)
        if value is None:
            return None
        self.memory.set(key, value)
        return value, "store"

    def set(self, key: str, value: float) -> None:
        if not math.isfinite(value):
            return
        self.memory.set(key, value)
        with self._store_errors():
            self.store.set(key, value)

    @contextmanager
    def _store_errors(self) -> Iterator[None]:
        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(_unavailable(self.store, exc)) from None
        except Exception as exc:
            if type(exc).__module__.split(".")[0] != "redis":
                raise
            raise StoreUnavailable(_unavailable(self.store, exc)) from None

    def close(self) -> None:
        self.store.close()


class TextStore(Protocol):
    """Where text values (JSON documents) persist; safe to share between threads.

    A store opened with a ``ttl`` (seconds) forgets each value that long after it was set:
    Redis expires the key (``SET ... EX``), the SQLite table serves no row older than that
    (its ``created_at``) and deletes them when opened, the memory store drops them when read.
    """

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str) -> None: ...

    def close(self) -> None: ...


class NullTextStore:
    """Remembers nothing (``none``)."""

    def get(self, key: str) -> str | None:
        return None

    def set(self, key: str, value: str) -> None:
        return None

    def close(self) -> None:
        return None


class MemoryTextStore:
    """A bounded, thread-safe LRU map of text values (``memory``: this process only)."""

    def __init__(self, max_entries: int = 4096, ttl: float | None = None) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        self._data: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            if key not in self._data:
                return None
            value, created = self._data[key]
            if self.ttl is not None and time.time() - created >= self.ttl:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._data[key] = (value, time.time())
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def close(self) -> None:
        return None


class SQLiteTextStore(SQLiteStore):
    """Text values in their own table of the same SQLite file as the tool scores."""

    def __init__(
        self, path: str | Path, table: str, timeout_s: float = 30.0, ttl: float | None = None
    ) -> None:
        if not table.isidentifier():
            raise ValueError(f"table must be a plain identifier, got {table!r}")
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.table = table
        self.ttl = ttl
        self._local = threading.local()
        # The table as it always was: its created_at says how old a value is.
        connection = self._connection()
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {table} ("
            " key TEXT PRIMARY KEY, value TEXT NOT NULL, created_at REAL NOT NULL)"
        )
        if ttl is not None:
            connection.execute(f"DELETE FROM {table} WHERE created_at < ?", (self._oldest(),))

    def _oldest(self) -> float:
        """The oldest ``created_at`` still served: -inf without a ``ttl``."""
        return float("-inf") if self.ttl is None else time.time() - self.ttl

    def get(self, key: str) -> str | None:  # type: ignore[override]
        row = (
            self._connection()
            .execute(
                f"SELECT value FROM {self.table} WHERE key = ? AND created_at >= ?",
                (key, self._oldest()),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    def set(self, key: str, value: str) -> None:  # type: ignore[override]
        self._connection().execute(
            f"INSERT OR REPLACE INTO {self.table} (key, value, created_at) VALUES (?, ?, ?)",
            (key, value, time.time()),
        )


class RedisTextStore:
    """Text values as Redis strings under their own key prefix."""

    def __init__(self, url: str, prefix: str, ttl: float | None = None) -> None:
        import redis

        self.prefix = prefix
        self.ttl = ttl
        self._client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)

    def get(self, key: str) -> str | None:
        value = cast(bytes | None, self._client.get(self.prefix + key))  # no decode_responses
        return None if value is None else value.decode("utf-8")

    def set(self, key: str, value: str) -> None:
        expiry = None if self.ttl is None else max(1, math.ceil(self.ttl))
        self._client.set(self.prefix + key, value.encode("utf-8"), ex=expiry)

    def close(self) -> None:
        self._client.close()


def open_text_store(url: str, namespace: str, ttl: float | None = None) -> TextStore:
    """A text store at the same place a tool cache URL names, kept apart by ``namespace``
    (a table in the SQLite file, a key prefix in Redis), e.g. ``vlm_responses``; its values
    expire ``ttl`` seconds after they were set (None: never)."""
    if url in {"", "none"}:
        return NullTextStore()
    if url == "memory":
        return MemoryTextStore(ttl=ttl)
    if url.startswith("sqlite:///"):
        return SQLiteTextStore(url.removeprefix("sqlite:///"), table=namespace, ttl=ttl)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisTextStore(url, prefix=f"agentic-iqa:{namespace}:", ttl=ttl)
    raise ValueError(
        f"unsupported cache URL {url!r}: use sqlite:///PATH, redis://HOST:PORT/DB, memory or none"
    )
