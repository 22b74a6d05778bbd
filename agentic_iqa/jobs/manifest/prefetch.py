"""Check a manifest's rows as a pipeline: a reader thread, a lookahead, pools of image checks.

Rows are read by a thread of their own and checked a chunk of what is ready at a time (their
images decoded by a pool of threads, then of processes), so the database's work and the checks
overlap, and a source that pauses (a pipe, a slow store) hands over the rows it gave without
waiting.  A bad row that gave an id of its own (an ``id`` cell) keeps it, so the user finds the
failure under the id they wrote, when no other row has that id: such rows are held back (up to
:data:`MAX_HELD_IDS`) and come out keyed by their id at the end, or keyed by their line as soon
as a good row claims the id.

Every location a row names is read under one :class:`iqa_tools.storage.access.Reading` (the job's
policy: ``--root``, ``--image-dir``, ``--allow-urls``, ``AGENTIC_IQA_ALLOWED_LOCATIONS``): the
lookahead that downloads a chunk's objects ahead, and each row's own check, pass the same gate
before any request, and what the lookahead found broken is not asked again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from iqa_tools.storage import is_url
from iqa_tools.storage.access import AccessPolicy, Reading, reading

from ..paths import Root
from ..subset import RawRow
from .rows import (
    BadRow,
    ManifestEntry,
    ManifestError,
    ManifestItem,
    PreparedRow,
    SeenIds,
    check_image,
    check_reference,
    prepare_row,
    to_entry,
)


def check_rows(
    rows: Iterator[RawRow],
    *,
    base: Path | str,
    paths: Root,
    check_images: bool,
    mos_range: tuple[float, float] | None,
    access: AccessPolicy,
    range_source: str = "--mos-range",
) -> Iterator[ManifestEntry]:
    """Check ``rows`` as a pipeline and yield their entries in file order: items, and bad rows
    keyed by their own id where it stays free, else by their line."""
    seen = SeenIds()
    held: dict[str, ManifestError] = {}  # bad rows that may keep their own id, by that id
    scope = Reading(access)
    # Rows are read by a thread of their own and taken a chunk of what is ready at a time, so
    # a slow source is never waited for to fill one; a chunk's images are decoded by a pool
    # of threads (decoding releases the GIL).
    with _Ahead(rows, PREFETCH_ROWS) as ahead, _ImageChecks(scope, enabled=check_images) as checks:
        for chunk in _prefetched(ahead, base, check_images, scope):
            with reading(scope):
                prepared = [
                    prepare_row(
                        line,
                        row,
                        base=base,
                        paths=paths,
                        mos_range=mos_range,
                        range_source=range_source,
                    )
                    for line, row in chunk
                ]
            for entry in map(to_entry, prepared, checks.verdicts(prepared), [seen] * len(prepared)):
                if isinstance(entry, ManifestError):
                    if (
                        entry.given is not None
                        and entry.given not in held
                        and len(held) < MAX_HELD_IDS
                    ):
                        held[entry.given] = entry
                        continue
                    yield replace(entry, given=None)
                    continue
                if entry.item_id in held:  # a good row takes the id: the bad row keeps its line
                    yield replace(held.pop(entry.item_id), given=None)
                yield entry
    for entry in held.values():
        yield replace(entry, key=entry.given or entry.key, given=None)


#: Bad rows held back at most, waiting to learn whether their own id is free (a few hundred
#: bytes each); past it, a bad row is keyed by its line at once.
MAX_HELD_IDS = 10_000


def check_threads() -> int:
    """Threads decoding images at submit: one per core, at most 8 (the rest of a row's check
    is this thread's; more would only queue for the GIL)."""
    return max(1, min(8, os.cpu_count() or 1))


#: Images checked in threads before the next ones go to a pool of processes (starting it
#: costs about a second, so a small manifest never does); a local file's check is then
#: decoded in parallel whole, not only where the decoder lets go of the GIL.
PROCESS_CHECKS_AFTER = 256


class _ImageChecks:
    """The image checks of a manifest's rows under the reading ``scope`` (the job's gate):
    local files in :func:`check_threads` processes once :data:`PROCESS_CHECKS_AFTER` rows
    were checked, objects in a store (and everything before) in as many threads."""

    def __init__(self, scope: Reading, *, enabled: bool) -> None:
        self._scope = scope
        self._enabled = enabled
        self._threads: Any = None
        self._processes: Any = None
        self._checked = 0

    def __enter__(self) -> _ImageChecks:
        return self

    def __exit__(self, *_exc: object) -> None:
        for pool in (self._threads, self._processes):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def verdicts(self, chunk: list[PreparedRow]) -> list[ManifestItem | str | None]:
        """Per row: None (not checked: checks off, or already bad), the item with its
        digests, or why its image (or reference) cannot be read."""
        if not self._enabled:
            return [None] * len(chunk)
        wanted = [prepared for prepared in chunk if prepared.item is not None]
        found: dict[int, ManifestItem | str] = {}
        pending = self._in_processes(wanted) if self._checked >= PROCESS_CHECKS_AFTER else []
        sent = {id(prepared) for share, _future in pending for prepared in share}
        here = [prepared for prepared in wanted if id(prepared) not in sent]
        for prepared, verdict in zip(here, self._in_threads(here), strict=True):
            found[id(prepared)] = verdict
        for share, future in pending:
            try:
                results = future.result()
            except Exception:  # the pool broke (a process killed): check them here instead
                self._processes, results = None, None
            if results is None:
                for prepared in share:
                    found[id(prepared)] = self._verdict(prepared)
                continue
            for prepared, (why, image_digest, reference_digest) in zip(share, results, strict=True):
                item = prepared.item
                assert item is not None
                found[id(prepared)] = (
                    why
                    if why is not None
                    else replace(
                        item,
                        image_digest=image_digest or item.image_digest,
                        reference_digest=reference_digest or item.reference_digest,
                    )
                )
        self._checked += len(wanted)
        return [found.get(id(prepared)) for prepared in chunk]

    def _in_threads(self, wanted: list[PreparedRow]) -> list[ManifestItem | str]:
        if len(wanted) <= 1:
            return [self._verdict(prepared) for prepared in wanted]
        if self._threads is None:
            from concurrent.futures import ThreadPoolExecutor

            self._threads = ThreadPoolExecutor(
                max_workers=check_threads(), thread_name_prefix="iqa-image-check"
            )
        return list(self._threads.map(self._verdict, wanted))

    def _in_processes(self, wanted: list[PreparedRow]) -> list[tuple[list[PreparedRow], Any]]:
        """The local files among ``wanted`` sent to the processes, a share each: (share,
        future of its results); none where processes cannot be forked (they are then
        checked in threads)."""
        import multiprocessing

        local = [prepared for prepared in wanted if _on_disk(prepared)]
        if not local or "fork" not in multiprocessing.get_all_start_methods():
            return []
        if self._processes is None:
            from concurrent.futures import ProcessPoolExecutor

            # fork, not spawn: spawn imports the caller's __main__ again in every process
            # (a script that submits at its top level would submit in each).  The children
            # only read files and decode them, so the threads of this process do not matter.
            self._processes = ProcessPoolExecutor(
                max_workers=check_threads(),
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_checks,
                initargs=(self._scope.policy,),
            )
        workers = check_threads()
        shares = [local[index::workers] for index in range(workers) if local[index::workers]]
        return [
            (
                share,
                self._processes.submit(
                    _checked_files,
                    [  # each with an item: _on_disk chose them
                        (
                            str(cast(ManifestItem, prepared.item).image),
                            prepared.image_text,
                            _text_of(cast(ManifestItem, prepared.item).reference),
                            prepared.reference_text,
                            prepared.line,
                        )
                        for prepared in share
                    ],
                ),
            )
            for share in shares
        ]

    def _verdict(self, prepared: PreparedRow) -> ManifestItem | str:
        item = prepared.item
        assert item is not None
        with reading(self._scope):
            try:
                size, checksum = check_image(
                    item.image, prepared.image_text, "image", prepared.line
                )
                reference_checksum = None
                if item.reference is not None:
                    reference_checksum = check_reference(
                        item.reference, prepared.reference_text, size, prepared.line
                    )
            except BadRow as bad:
                return str(bad)
        return replace(
            item,
            image_digest=checksum or item.image_digest,
            reference_digest=reference_checksum or item.reference_digest,
        )


def _on_disk(prepared: PreparedRow) -> bool:
    """Whether a row's image and reference are local files (an object is checked here, where
    the lookahead's downloads and failures are)."""
    item = prepared.item
    return (
        item is not None
        and isinstance(item.image, Path)
        and (item.reference is None or isinstance(item.reference, Path))
    )


def _text_of(location: Path | str | None) -> str | None:
    return None if location is None else str(location)


#: The job's policy in a checking process (:func:`_start_checks`).
_CHECKS_POLICY: AccessPolicy | None = None


def _start_checks(policy: AccessPolicy) -> None:
    """A checking process starts: every file it opens passes the job's gate."""
    global _CHECKS_POLICY
    _CHECKS_POLICY = policy


def _checked_files(
    rows: list[tuple[str, str, str | None, str, int]],
) -> list[tuple[str | None, str | None, str | None]]:
    """In a checking process: each local (image, its cell, reference, its cell, line) decoded
    and measured as :func:`check_image` does; (why it is bad, or None, and the digests)."""
    results: list[tuple[str | None, str | None, str | None]] = []
    with reading(Reading(_CHECKS_POLICY or AccessPolicy.ambient())):
        for image, image_text, reference, reference_text, line in rows:
            try:
                size, checksum = check_image(Path(image), image_text, "image", line)
                reference_checksum = None
                if reference is not None:
                    reference_checksum = check_reference(
                        Path(reference), reference_text, size, line
                    )
            except BadRow as bad:
                results.append((str(bad), None, None))
                continue
            results.append((None, checksum, reference_checksum))
    return results


class _Ahead:
    """``rows`` read by a thread of their own, taken a list of what is ready at a time: a
    source that pauses (a pipe, a generator over a slow store) is never waited for to fill a
    list, and a fast one gives full lists.  An error of the source is raised after the rows
    before it were taken."""

    #: How long a blocking take waits for more rows after its first, to fill its list.
    LINGER_SECONDS = 0.05

    def __init__(self, rows: Iterator[RawRow], size: int) -> None:
        import queue
        import threading

        self._size = size
        # A SimpleQueue (C, a fraction of a Queue's cost per row) held to 4 lists' worth.
        self._ready: queue.SimpleQueue[tuple[Any, BaseException | None, bool]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self.ended = False
        self._thread = threading.Thread(
            target=self._read, args=(rows,), name="iqa-manifest-reader", daemon=True
        )
        self._thread.start()

    def __enter__(self) -> _Ahead:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()

    def _put(self, entry: tuple[Any, BaseException | None, bool]) -> bool:
        while self._ready.qsize() >= 4 * self._size:
            if self._stop.wait(0.001):
                return False
        if self._stop.is_set():
            return False
        self._ready.put(entry)
        return True

    def _read(self, rows: Iterator[RawRow]) -> None:
        try:
            for row in rows:
                if not self._put((row, None, False)):
                    return
        except BaseException as exc:  # handed to the taker, raised after the rows before it
            self._put((None, exc, True))
            return
        finally:
            close = getattr(rows, "close", None)
            if self._stop.is_set() and close is not None:
                close()
        self._put((None, None, True))

    def take(self, *, block: bool) -> list[RawRow]:
        """Up to ``size`` rows: with ``block``, at least one (none once the rows ended), and
        those that follow within :data:`LINGER_SECONDS`; else only those ready now."""
        import queue
        import time

        if self._failure is not None:
            raised, self._failure = self._failure, None
            raise raised
        taken: list[RawRow] = []
        deadline = 0.0
        while not self.ended and len(taken) < self._size:
            try:
                if block and not taken:
                    row, failure, ended = self._ready.get()
                    deadline = time.monotonic() + self.LINGER_SECONDS
                elif block:
                    row, failure, ended = self._ready.get(
                        timeout=max(0.0, deadline - time.monotonic())
                    )
                else:
                    row, failure, ended = self._ready.get_nowait()
            except queue.Empty:
                break
            if ended:
                self.ended = True
                if failure is not None and not taken:
                    raise failure
                self._failure = failure
                break
            taken.append(row)
        return taken


#: Rows taken, checked and asked about (their objects in a store) together, at most.
PREFETCH_ROWS = 64


def _prefetched(
    ahead: _Ahead, base: Path | str, check_images: bool, scope: Reading
) -> Iterator[list[RawRow]]:
    """The rows ``ahead`` gives, a chunk at a time; the objects their cells name in a store
    (URLs, or names under a base URL) are asked about a chunk at a time in parallel first
    (downloaded when the images are checked), so each row's own check costs no round trip.
    The next chunk, when its rows are ready, is fetched while this one's rows are checked and
    stored: the store's latency and the client's own work per request overlap with ours
    instead of adding to it.  Only what ``scope``'s gate admits is asked for, in ``scope``
    (its failures kept there for the rows' own checks)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from iqa_tools.images import prefetch

    remote_base = is_url(os.fspath(base))

    def fetch(chunk: list[RawRow]) -> None:
        with reading(scope):
            wanted = [
                location
                for location in _objects_named(chunk, base, remote_base)
                if _admitted(scope, location)
            ]
            if len(wanted) > 1:
                prefetch(wanted, read=check_images)

    current = ahead.take(block=True)
    if not current:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="iqa-lookahead") as pool:
        pending: Future[None] | None = pool.submit(fetch, current)
        while current:
            failure: BaseException | None = None
            try:
                following = ahead.take(block=False)
            except Exception as exc:  # raised where it was met: after this chunk's rows
                following, failure = [], exc
            if pending is not None:
                pending.result()
            pending = pool.submit(fetch, following) if following else None
            yield current
            if failure is not None:
                raise failure
            if not following:
                following = ahead.take(block=True)
                pending = pool.submit(fetch, following) if following else None
            current = following


def _admitted(scope: Reading, location: str) -> bool:
    """Whether the gate lets ``location`` be asked for (the row's own check says why not)."""
    try:
        scope.admit(location)
    except Exception:
        return False
    return True


def _objects_named(chunk: list[RawRow], base: Path | str, remote_base: bool) -> list[str]:
    """The object URLs a chunk of rows names (URL cells, or names under a base URL)."""
    from iqa_tools.storage import join_under

    wanted: list[str] = []
    for _, row in chunk:
        if isinstance(row, str):
            continue
        for column in ("image", "reference"):
            text = row.get(column)
            if not isinstance(text, str) or not text:
                continue
            if "://" in text and is_url(text):  # a URL has one: most paths are over at once
                wanted.append(text)
            elif remote_base:
                try:
                    wanted.append(join_under(os.fspath(base), text))
                except Exception:  # the row's own check says why
                    continue
    return wanted
