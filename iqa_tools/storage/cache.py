"""Keep remote objects on local disk so each worker downloads each one once.

The cache is a folder (``AGENTIC_IQA_OBJECT_CACHE``, bounded by
``AGENTIC_IQA_OBJECT_CACHE_BYTES``) that several processes share; :func:`.fetch.fetch` asks it
for the version of an object the store names, and only a miss reads the object.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path

from ..errors import StorageMisconfigured
from ..memory import parse_bytes

DEFAULT_CACHE_BYTES = 2_000_000_000


def default_cache_dir() -> Path:
    """Return the cache folder: ``AGENTIC_IQA_OBJECT_CACHE``, else ``$XDG_CACHE_HOME`` or
    ``~/.cache`` (this process's own ``HOME``), then ``agentic-iqa/objects``."""
    configured = os.environ.get("AGENTIC_IQA_OBJECT_CACHE", "").strip()
    if configured:
        return Path(configured).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentic-iqa" / "objects"


def default_cache_bytes() -> int:
    """Return the cache's bound in bytes: ``AGENTIC_IQA_OBJECT_CACHE_BYTES`` (2GB), read now."""
    raw = os.environ.get("AGENTIC_IQA_OBJECT_CACHE_BYTES", "").strip()
    try:
        return parse_bytes(raw) if raw else DEFAULT_CACHE_BYTES
    except ValueError as exc:
        raise StorageMisconfigured(f"AGENTIC_IQA_OBJECT_CACHE_BYTES: {exc}") from None


class ObjectCache:
    """Keep remote objects on local disk so each worker downloads each one once.

    An entry's name is a hash of (location, store digest): an ETag identifies an object's
    bytes only together with where it lives (two HTTP servers may both say ``"5f3c-1a"``), and
    a changed object gets a new ETag, so a stale entry is never served, only evicted.  Several
    processes share the folder safely: an entry is written to a temporary file and renamed
    into place, a read bumps its time, and eviction (least recently used first, once the total
    passes ``max_bytes``) tolerates files another process removed.  ``hits`` and ``misses``
    count this object's look-ups.
    """

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_bytes = max_bytes if max_bytes is not None else default_cache_bytes()
        self.hits = 0
        self.misses = 0
        self._total: int | None = None
        self._lock = threading.Lock()

    @staticmethod
    def key(location: str, digest: str) -> str:
        """Return the entry name of one version (``digest``) of the object at ``location``."""
        return hashlib.sha256(f"{location}\n{digest}".encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def get(self, location: str, digest: str, *, count: bool = True) -> bytes | None:
        """Return the cached bytes of this version of the object, or None (counted, unless ``count``
        is False: the caller counts once it knows whether the copy was used)."""
        path = self._path(self.key(location, digest))
        try:
            data = path.read_bytes()
            os.utime(path)
        except OSError:
            data = None
        if count:
            self.count_lookup(hit=data is not None)
        return data

    def count_lookup(self, *, hit: bool) -> None:
        """Count one look-up, a hit or a miss."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def _latest_path(self, location: str) -> Path:
        key = hashlib.sha256(f"{location}\nlatest".encode()).hexdigest()
        return self._path(key).with_suffix(".latest")

    def latest(self, location: str) -> str | None:
        """Return the store digest of the version of ``location`` cached last (any process), so a
        worker can ask the store "has it changed?" and download only if it has."""
        try:
            return self._latest_path(location).read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def put(self, location: str, digest: str, data: bytes) -> None:
        """Keep ``data``; an object larger than the whole bound is not kept.  A full disk or a
        read-only folder costs only the cache, never the read."""
        if len(data) > self.max_bytes:
            return
        path = self._path(self.key(location, digest))
        try:
            self._write(path, data)
            self._write(self._latest_path(location), digest.encode())
        except OSError:
            return
        with self._lock:
            if self._total is not None:
                self._total += len(data)
        if self._total is None or self._total > self.max_bytes:
            self.evict()

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        """Write ``data`` at ``path`` whole or not at all, whatever another process reads
        meanwhile."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def evict(self) -> None:
        """Remove least recently used entries until the folder is within ``max_bytes``, and
        temporary files a killed process left behind (older than an hour)."""
        entries: list[tuple[float, int, Path]] = []
        now = time.time()
        for path in self.directory.glob("*/*"):
            try:
                info = path.stat()
            except OSError:
                continue
            if path.name.startswith(".tmp-"):
                if now - info.st_mtime > 3600:
                    path.unlink(missing_ok=True)
                continue
            entries.append((info.st_mtime, info.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries, key=lambda entry: entry[0]):
            if total <= self.max_bytes:
                break
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                continue
            total -= size
        with self._lock:
            self._total = total
