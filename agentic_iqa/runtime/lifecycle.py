"""A dataset job from manifest to finished items: submit, feed, run locally, resume, cancel.

The same code path serves both transports: items are claimed a window at a time (each gets a
stored run), and each run is walked by :func:`.service.run_embedded` in a local
thread pool, or by the Celery coordinator on the workers.  Never one chord over the dataset:
at most ``window`` items are in flight, so a 10,000-item job keeps memory flat everywhere.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from ..config import PipelineSettings
from ..db import jobs as store
from ..db import reads
from ..db.engine import read_scope, session_scope
from ..db.items import finish_if_complete
from ..db.models import Job
from ..jobs.manifest import (
    ManifestEntry,
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    bad_row_key,
    read_manifest,
)
from ..jobs.sources import dataset_entries
from ..jobs.spec import JobSpec
from ..jobs.tools import (
    MetricToolsError,
    check_tools,
    full_reference,
    metric_query,
    not_only_questions,
)
from ..runconfig import RunConfig, capture
from .heartbeat import Holder

if TYPE_CHECKING:  # the agent (pipeline, service) loads only where items run: not for status
    from .service import AgentsSource

DEFAULT_QUERY = "Rate the quality of this image."


def _item_row(entry: ManifestEntry) -> dict[str, Any]:
    """The item's columns; a bad row is keyed by the id it gave when no other row has it, else
    by its line, in a form no manifest id can take (:attr:`ManifestError.key`): two items of a
    job cannot share a key. The id it gave stays in the error text.
    """
    if isinstance(entry, ManifestError):
        given = f" (id {entry.item_id!r})" if entry.item_id else ""
        return {
            "line": entry.line,
            "item_key": entry.key or bad_row_key(entry.line),
            "image": None,
            "reference": None,
            "query": entry.query,
            "mos": entry.mos,
            "answer_truth": entry.answer,
            "meta_json": None,
            "status": "failed",
            "error": f"line {entry.line}{given}: {entry.message}",
            "image_digest": None,
            "reference_digest": None,
            "finished_at": datetime.now(UTC),
        }
    return {
        "line": entry.line,
        "item_key": entry.item_id,
        "image": str(entry.image),
        "reference": str(entry.reference) if entry.reference else None,
        "query": entry.query,
        "mos": entry.mos,
        "answer_truth": entry.answer,
        "meta_json": json.dumps(entry.extra, default=str) if entry.extra else None,
        "status": "pending",
        "error": None,
        "image_digest": entry.image_digest,
        "reference_digest": entry.reference_digest,
        "finished_at": None,
    }


#: Items stored per transaction at most: one ``COPY`` (PostgreSQL) or one ``executemany``
#: (SQLite) each, so a million rows are a thousand statements, and a chunk of rows of 1 kB
#: (a question each) holds 2 MB.
SUBMIT_CHUNK = 1_000
#: Rows read and checked ahead of the database, at most.
SUBMIT_AHEAD = 256
#: A row read waits at most this long to be stored (and to be claimable), however slowly the
#: rows after it come: a slow source (a pipe, a store) still starts its items.
SUBMIT_WAIT_SECONDS = 1.0


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, ``docker stop``) to a process running a job here: a
    KeyboardInterrupt, so that it stops the job as Ctrl-C does, and can be told apart from one
    in what the job is marked with."""


def signal_name(interrupt: BaseException) -> str:
    """How an interrupt came, as a job's note and a message say it."""
    return "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"


class SubmitStopped(Exception):
    """The submit was asked to stop (:meth:`Submission.stop`, a Ctrl-C) before its last row."""


@dataclass
class Tally:
    """The rows a submit has handed to the database so far: items, bad rows among them."""

    items: int = 0
    bad: int = 0


def submit(engine: Engine, spec: JobSpec, *, stored: Callable[[str], None] | None = None) -> str:
    """Create the job ``spec`` describes and its items (bad rows as failed items); returns its
    id.  ``spec`` is stored as the job's record.

    The rows are read, checked and stored as a stream, :data:`SUBMIT_CHUNK` at a time.  Nothing
    is committed until the job is known to be one (a metric job's first row it can score: its
    tools refuse a manifest of questions, or a first row without the reference they need, with
    nothing stored); from then on each chunk is committed as it is read, ``stored`` is told the
    job's id at the first commit, and its items can run (here, or on the workers) while the
    rest are read.  The job is ``submitting`` until its last row is in, and is not finished
    before.  A failure after the first commit (the manifest unreadable halfway, a store that
    refuses the credential) cancels the job with the reason as its error, and is raised.
    """
    if not isinstance(spec, JobSpec):
        raise TypeError(
            f"submit() takes a JobSpec, not {type(spec).__name__}: "
            "JobSpec.build(manifest=..., ...) describes the job"
        )
    return _submit(engine, spec, stored, threading.Event(), Tally())


class Submission:
    """:func:`submit` in a thread of this process, so that the job's first items can run here,
    or be handed to the workers, while the rest of its rows are read and stored."""

    def __init__(self, engine: Engine, spec: JobSpec) -> None:
        self._engine, self._spec = engine, spec
        self._first = threading.Event()
        self._halt = threading.Event()
        self._job_id: str | None = None
        self._error: BaseException | None = None
        #: Its rows stored so far (every row, once :meth:`result` returned).
        self.tally = Tally()
        self._thread = threading.Thread(target=self._run, name="iqa-submit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._job_id = _submit(self._engine, self._spec, self._stored, self._halt, self.tally)
        except BaseException as exc:  # handed to whoever waits for it
            self._error = exc
        finally:
            self._first.set()

    def _stored(self, job_id: str) -> None:
        self._job_id = job_id
        self._first.set()

    def started(self) -> str:
        """The job's id once its first items are stored; the submit's error if it failed
        before (nothing stored then)."""
        self._first.wait()
        if self._job_id is None:
            assert self._error is not None
            raise self._error
        return self._job_id

    @property
    def reading(self) -> bool:
        """Whether rows are still being read and stored."""
        return self._thread.is_alive()

    def result(self) -> str:
        """The job's id once every row is stored; the submit's error if it failed."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._job_id is not None
        return self._job_id

    def stop(self) -> None:
        """Stop reading rows (a Ctrl-C): the job is cancelled, saying where its rows ended."""
        self._halt.set()


def _submit(
    engine: Engine,
    spec: JobSpec,
    stored: Callable[[str], None] | None,
    halt: threading.Event,
    tally: Tally,
) -> str:
    """The job ``spec`` describes, its items in, its record stored with it (:func:`submit`);
    ``halt``: set, the rows not read yet are given up; ``tally``: counts what was stored."""
    tool_settings = spec.tool_settings
    metric_tools = check_tools(list(spec.tools), tool_settings) if spec.tools else None
    mode, config, batch, vlm_cache = spec.mode, spec.config, spec.batch, spec.vlm_cache
    max_replan_iterations = spec.max_replan_iterations
    if max_replan_iterations is None:  # the configured bound, stored with the job
        max_replan_iterations = (
            config.max_replan_iterations
            if config is not None
            else PipelineSettings.load().max_replan_iterations
        )
    if config is None:  # what shapes every answer, stored with the job (runconfig)
        config = capture(
            max_replan_iterations=max_replan_iterations,
            vlm_cache=vlm_cache,
            metric_tools=metric_tools,
            tool_settings=tool_settings,
            batch=batch,
        )
    elif batch and not config.batch:
        config = config.model_copy(update={"batch": True})
    access = spec.access_policy()  # what its rows may name, and its workers read (runconfig)
    config = config.model_copy(update={"access": access})
    if config.batch:
        from .batches import check_supported

        check_supported(config)
    query = spec.query
    if query is None:
        query = metric_query(metric_tools) if metric_tools else DEFAULT_QUERY
    manifest, dataset, split, root = spec.manifest, spec.dataset, spec.split, spec.root
    check_images, mos_range, image_dir = spec.check_images, spec.mos_range, spec.image_dir
    described: dict[str, Any] | None = None
    confine: str | Path | None  # the folder the job's files must lie in
    if dataset is not None:
        if root is None:
            raise ManifestFormatError(
                f"--dataset {dataset} needs --root: the folder the dataset was unpacked into"
            )
        described, entries = dataset_entries(
            dataset, root, split, check_images=check_images, score=spec.score, subset=spec.subset
        )
        source, confine = f"dataset {described['name']} ({described['split']}) in {root}", root
    elif manifest is None:
        raise ManifestFormatError(
            "give a manifest (CSV, JSON, JSONL or a folder of images) or --dataset NAME --root DIR"
        )
    else:
        manifest = Path(manifest)
        entries = read_manifest(
            manifest,
            root=root,
            check_images=check_images,
            access=access,
            mos_range=mos_range,
            image_dir=image_dir,
            subset=spec.subset,
        )
        source, confine = str(manifest.resolve()), root
    fr_tools: list[str] = []
    if metric_tools:
        fr_tools = full_reference(metric_tools, tool_settings)
        entries = not_only_questions(_with_references(entries, fr_tools))
    stored_spec = spec.model_copy(
        update={
            "config": config,
            "max_replan_iterations": max_replan_iterations,
            "query": query,
            "tools": tuple(metric_tools) if metric_tools else None,
            "batch": config.batch,
            "allowed_locations": access.allowed,
            "root": _place(_stored_root(confine)),
            "manifest": manifest.resolve() if isinstance(manifest, Path) else manifest,
            "dataset": described["name"] if described else None,
            "split": described["split"] if described else spec.split,
            "mos_range": tuple(described["mos_range"])
            if described and described["mos_range"]
            else spec.mos_range,
        }
    )
    if described is not None and spec.score != "mos":
        described = {**described, "score": spec.score}
    name = spec.name or stored_spec.default_name()
    stored_spec = stored_spec.model_copy(update={"name": name})
    rows = _Rows(entries, halt, tally)
    try:
        chunk = rows.take(SUBMIT_CHUNK, SUBMIT_WAIT_SECONDS)  # read before any transaction
        with session_scope(engine) as session:
            job_id = store.create_job(
                session,
                name=name,
                manifest=source,
                default_query=query,
                root=_stored_root(confine),
                max_replan_iterations=max_replan_iterations,
                vlm_cache=vlm_cache,
                tools=metric_tools,
                config_json=config.to_json(),
                mode=mode,
                dataset_json=json.dumps(described) if described else None,
                spec_json=stored_spec.to_json(),
                group=spec.group,
            )
            job = reads.get_job(session, job_id)
            job.submitting = True
            # Nothing is committed before the job is known to be one (its first row a metric
            # job can score), so a refusal leaves nothing behind.
            known = not metric_tools
            while True:
                if chunk:
                    store.add_items(session, job_id, (_item_row(entry) for entry in chunk))
                known = known or any(_scorable(entry, fr_tools) for entry in chunk)
                if rows.ended or (known and chunk):
                    break
                chunk.clear()  # held no longer than its statement
                chunk = rows.take(SUBMIT_CHUNK, SUBMIT_WAIT_SECONDS)
            if rows.ended:
                job.submitting = False
                finish_if_complete(session, job)
    except BaseException:
        rows.close()
        raise
    if stored is not None:
        stored(job_id)
    if not rows.ended:
        _store_rest(engine, job_id, rows)
    return job_id


def _scorable(entry: ManifestEntry, fr_tools: list[str]) -> bool:
    """Whether a metric job's tools can score this entry: a good row that is no question, with
    a reference when a full-reference tool is among them."""
    return (
        isinstance(entry, ManifestItem)
        and not entry.options
        and (not fr_tools or entry.reference is not None)
    )


def _store_rest(engine: Engine, job_id: str, rows: _Rows) -> None:
    """The rows after the first commit, a chunk per transaction; at the last, the job is no
    longer submitting (and done, if every item already ended).  A failure on the way cancels
    the job with the reason (its rows after it were never stored) and is raised."""
    try:
        while not rows.ended:
            chunk = rows.take(SUBMIT_CHUNK, SUBMIT_WAIT_SECONDS)
            with session_scope(engine) as session:
                if chunk:
                    store.add_items(session, job_id, (_item_row(entry) for entry in chunk))
                    chunk.clear()  # held no longer than its statement
                if rows.ended:
                    job = reads.get_job(session, job_id, lock=True)
                    job.submitting = False
                    finish_if_complete(session, job)
    except BaseException as exc:
        rows.close()
        _give_up(engine, job_id, rows.last_line, exc)
        raise


def _give_up(engine: Engine, job_id: str, last_line: int, error: BaseException) -> None:
    """A submit that failed after its first commit: the job is cancelled (what runs ends as
    cancelled) with why, and where its rows stopped; best effort, the error is raised anyway."""
    from ..redact import redact

    reason = (
        "it was stopped"
        if isinstance(error, (SubmitStopped, KeyboardInterrupt))
        else str(error) or type(error).__name__
    )
    message = (
        redact(
            f"submit ended after line {last_line}: {reason}; the rows after it were "
            "not stored: submit the job again"
        )
        or ""
    )
    try:
        with session_scope(engine) as session:
            job = reads.get_job(session, job_id, lock=True)
            job.submitting = False
            store.cancel(session, job_id)
            job.error = message
    except Exception:  # the database itself may be what failed
        return


class _Rows:
    """A job's entries read and checked in a thread of their own, handed over in chunks, so
    the database's work overlaps theirs and a chunk is stored when its first row has waited
    long enough (:data:`SUBMIT_WAIT_SECONDS`), however slowly the next rows come."""

    def __init__(
        self, entries: Iterator[ManifestEntry], halt: threading.Event, tally: Tally
    ) -> None:
        import queue

        # A SimpleQueue (C, a fraction of a Queue's cost per row) held to SUBMIT_AHEAD rows.
        self._queue: queue.SimpleQueue[tuple[ManifestEntry | None, BaseException | None]] = (
            queue.SimpleQueue()
        )
        self._halt = halt
        self._tally = tally
        self._closed = threading.Event()
        self._failure: BaseException | None = None
        self.ended = False
        #: The line of the last row handed over (where a submit that failed stopped).
        self.last_line = 0
        self._thread = threading.Thread(
            target=self._read, args=(entries,), name="iqa-submit-rows", daemon=True
        )
        self._thread.start()

    def _read(self, entries: Iterator[ManifestEntry]) -> None:
        def put(entry: ManifestEntry | None, failure: BaseException | None) -> bool:
            while self._queue.qsize() >= SUBMIT_AHEAD:
                if self._closed.wait(0.001) or self._halt.is_set():
                    return False
            if self._closed.is_set() or self._halt.is_set():
                return False
            self._queue.put((entry, failure))
            return True

        try:
            for entry in entries:
                if not put(entry, None):
                    break
            else:
                put(None, None)
        except BaseException as exc:  # raised in the submit's thread, after the rows before it
            put(None, exc)
        finally:
            close = getattr(entries, "close", None)
            if close is not None:
                close()

    def take(self, limit: int, wait: float) -> list[ManifestEntry]:
        """Up to ``limit`` entries: those that come within ``wait`` seconds of the first.
        Raises what reading them raised once the rows before it were taken, and
        :class:`SubmitStopped` once the submit is halted."""
        import queue

        if self._failure is not None:
            raise self._failure
        chunk: list[ManifestEntry] = []
        deadline: float | None = None
        while len(chunk) < limit and not self.ended:
            if self._halt.is_set():
                raise SubmitStopped("the submit was stopped")
            timeout = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if timeout <= 0:
                break
            try:
                entry, failure = self._queue.get(timeout=timeout)
            except queue.Empty:
                continue
            if entry is None:
                if failure is None:
                    self.ended = True
                elif chunk:
                    self._failure = failure
                    break
                else:
                    raise failure
                continue
            chunk.append(entry)
            self.last_line = entry.line
            self._tally.items += 1
            self._tally.bad += isinstance(entry, ManifestError)
            if deadline is None:
                deadline = time.monotonic() + wait
        return chunk

    def close(self) -> None:
        """Stop reading (the submit failed): the reading thread ends at its next row."""
        self._closed.set()


def _with_references(
    entries: Iterator[ManifestEntry], fr_tools: list[str]
) -> Iterator[ManifestEntry]:
    """``entries``; when a tool needs a reference, a first good row without one stops the
    submit (the tools do not fit the manifest: nothing is stored yet), and a later one is a
    bad row that says so."""
    scored = False
    for entry in entries:
        if fr_tools and isinstance(entry, ManifestItem) and entry.reference is None:
            kind = "is a full-reference tool" if len(fr_tools) == 1 else "are full-reference tools"
            reason = (
                f"{', '.join(fr_tools)} {kind} and this row has no reference: give a "
                "`reference` for every row, or leave out the full-reference tools"
            )
            if not scored:
                raise MetricToolsError(f"line {entry.line} ({entry.item_id!r}): {reason}")
            entry = ManifestError(
                entry.line,
                entry.item_id,
                reason,
                key=entry.item_id,
                query=entry.query,
                answer=entry.answer,
                mos=entry.mos,
            )
        scored = scored or isinstance(entry, ManifestItem)
        yield entry


def _place(value: str | None) -> Path | str | None:
    """A stored root: a folder as a path, a URL as text."""
    from iqa_tools.storage import is_url

    return value if value is None or is_url(value) else Path(value)


def job_spec(engine: Engine, job_id: str) -> JobSpec:
    """The job's record (reconstructed from its columns for a job stored before specs)."""
    with read_scope(engine) as session:
        return reads.job_spec(session, job_id)


def _stored_root(confine: Path | str | None) -> str | None:
    """The confining root as stored: a folder resolved, a URL as given."""
    if confine is None or isinstance(confine, str):
        return confine
    return str(confine.resolve())


def feed(
    engine: Engine,
    job_id: str,
    window: int,
    dispatch: Callable[[str], None],
    *,
    lease_seconds: float | None = None,
) -> int:
    """Top the job up to ``window`` items in flight; returns how many runs were dispatched.

    The job's row is locked while counting and claiming, so two feeders (two supervisors) never
    both fill the same gap.  ``lease_seconds``: the runs are supervised (workers).
    """
    claimed = _claim(engine, job_id, window, lease_seconds).runs
    for run in claimed:  # after the commit, so a worker always finds its run
        dispatch(run.run_id)
    return len(claimed)


@dataclass(frozen=True)
class _Claim:
    """What :func:`_claim` took: the new runs, and what their first steps need of the job."""

    runs: list[store.Claimed]
    config_json: str | None
    vlm_cache: bool


def _claim(engine: Engine, job_id: str, window: int, lease_seconds: float | None) -> _Claim:
    """:func:`feed`'s transaction: the job's row locked, its items in flight read from its
    counts, the gap claimed from the index (a window's work, whatever the job's size)."""
    with session_scope(engine) as session:
        job = reads.get_job(session, job_id, lock=True)
        if _is_batch(job.config_json):  # every item waits in the same rounds
            window = max(window, PipelineSettings.load().batch_window)
        in_flight = reads.counts(session, job_id).get("queued", 0)
        runs = store.claim_items(session, job, window - in_flight, lease_seconds=lease_seconds)
        return _Claim(runs, job.config_json, job.vlm_cache)


#: Lease of a local job's runs: this process renews it while it works, so a job whose process
#: died shows as stalled within this many seconds (``eval status``), not "running, ETA 97 s".
LOCAL_LEASE_SECONDS = 30.0
#: How often a job run here reads whether it was cancelled elsewhere: its runs claimed ahead
#: make no model call once it was (:func:`_watching_for_a_cancel`).
CANCEL_POLL_SECONDS = 0.5


def run_local(
    engine: Engine,
    job_id: str,
    agents: AgentsSource,
    *,
    workers: int = 2,
    window: int | None = None,
    tool_batch_size: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    restart: Sequence[str] = (),
    on_interrupt: Callable[[], None] | None = None,
) -> None:
    """Work the job in this process with a pool of ``workers`` threads until nothing is left.

    ``agents``: the agents, or a function of the job's stored configuration giving them
    (:class:`~agentic_iqa.pipeline.AgentsCache`), which is how the CLI runs a job as it was
    submitted.  The job's runs hold a lease this process renews while it works.
    ``tool_batch_size`` above 1: each thread scores the first tool steps of its share of runs
    together (:func:`service.walk_batch`); by default :func:`local_batch_size`.
    ``on_progress`` is told how many items just ended.  ``restart``: runs a resume found in
    flight (:func:`resume`), walked to their end first, under this process's leases.
    A Ctrl-C or SIGTERM (KeyboardInterrupt) marks the job interrupted and tells
    ``on_interrupt`` at once, then waits for the items in flight to end before it propagates
    (:func:`_interruptible`).
    """
    from . import service

    with read_scope(engine) as session:
        batched = _is_batch(reads.get_job(session, job_id).config_json)
    if batched:
        _run_local_batched(
            engine,
            job_id,
            agents,
            workers=workers,
            on_progress=on_progress,
            restart=restart,
            on_interrupt=on_interrupt,
        )
        return
    batch_size = tool_batch_size or local_batch_size(engine, job_id, agents)
    window = window or max(8, 4 * workers, batch_size * workers if batch_size > 1 else 0)
    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())

    # The first step of each run claimed here, begun from its claim: no transaction of its own.
    firsts: dict[str, service.NextStep] = {}
    service.STOPPED_HERE.discard(job_id)  # it runs again (a resume): its runs may begin ahead

    def walk(run_ids: list[str]) -> int:
        if batch_size > 1:
            service.walk_batch(engine, agents, run_ids, max_batch=batch_size, firsts=firsts)
        else:
            service.walk_embedded(engine, agents, run_ids[0], first=firsts.pop(run_ids[0], None))
        return len(run_ids)

    with (
        _renewing_leases(engine, job_id, LOCAL_LEASE_SECONDS),
        _watching_for_a_cancel(engine, job_id, service.STOPPED_HERE),
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iqa-job") as pool,
        _interruptible(engine, job_id, on_interrupt),
    ):
        # One worker walks the runs in this thread (no hand-over to a pool thread per item).
        work = map if workers == 1 else pool.map
        for ended in work(walk, [[run_id] for run_id in restart]):
            if on_progress is not None:
                on_progress(ended)

        def claimed() -> list[str]:
            claim = _claim(engine, job_id, window, LOCAL_LEASE_SECONDS)
            firsts.update(
                service.first_steps(
                    agents,
                    job_id,
                    claim.runs,
                    config_json=claim.config_json,
                    vlm_cache=claim.vlm_cache,
                )
            )
            return [run.run_id for run in claim.runs]

        if workers > 1 and batch_size == 1:
            _keep_busy(
                pool, walk, claimed, lambda: _submitting(engine, job_id), window, on_progress
            )
        else:  # one thread, or batches: a window at a time
            while True:
                batch = claimed()
                if not batch and _submitting(engine, job_id):  # its next rows are coming
                    time.sleep(SUBMITTING_POLL_SECONDS)
                    continue
                if not batch:
                    break
                # Batched: one share per thread; else one run at a time.
                shares = (
                    [batch[index::workers] for index in range(workers)]
                    if batch_size > 1
                    else [[run_id] for run_id in batch]
                )
                for ended in work(walk, [share for share in shares if share]):
                    if on_progress is not None:
                        on_progress(ended)
    job_ended(engine, job_id)


def _keep_busy(
    pool: ThreadPoolExecutor,
    walk: Callable[[list[str]], int],
    claimed: Callable[[], list[str]],
    submitting: Callable[[], bool],
    window: int,
    on_progress: Callable[[int], None] | None,
) -> None:
    """Walk the job's runs on the pool's threads, one run each as threads come free, claiming
    more whenever half the window has ended: no thread waits for the slowest item of a window
    before the next one is claimed."""
    running: set[Future[int]] = set()
    while True:
        if len(running) <= window // 2:
            running |= {pool.submit(walk, [run_id]) for run_id in claimed()}
        if not running:
            if not submitting():
                return
            time.sleep(SUBMITTING_POLL_SECONDS)  # its next rows are on their way
            continue
        ended, running = futures.wait(running, return_when=futures.FIRST_COMPLETED)
        for future in ended:
            count = future.result()
            if on_progress is not None:
                on_progress(count)


def job_ended(engine: Engine, job_id: str) -> bool:
    """What a job that ended here leaves behind (its runner's last act; the workers'
    supervisor does the same for theirs): its counts checked against its items, the
    planner's statistics refreshed, its headline for ``eval list`` computed and stored
    (:mod:`.headline`).  False, doing nothing, when the job has not ended."""
    from ..db.engine import analyze
    from ..db.items import recount
    from . import headline

    with session_scope(engine) as session:
        if reads.get_job(session, job_id, lock=True).status == "running":
            return False
        recount(session, job_id)
        analyze(session)
    headline.store(engine, job_id)
    return True


#: How often a local runner that ran out of items asks whether the submit stored more.
SUBMITTING_POLL_SECONDS = 0.2


def _submitting(engine: Engine, job_id: str) -> bool:
    """Whether the job's submit is still adding rows (and the job still running)."""
    with read_scope(engine) as session:
        job = reads.get_job(session, job_id)
        return job.submitting and job.status == "running"


@functools.lru_cache(maxsize=64)
def _is_batch(config_json: str | None) -> bool:
    """Whether a job's stored configuration sends its calls in batches (parsed once: every
    feed asks)."""
    if not config_json:
        return False
    return RunConfig.from_json(config_json).batch


def _run_local_batched(
    engine: Engine,
    job_id: str,
    agents: AgentsSource,
    *,
    workers: int,
    on_progress: Callable[[int], None] | None,
    restart: Sequence[str] = (),
    on_interrupt: Callable[[], None] | None = None,
) -> None:
    """A batch job (``--batch``) from this process: its runs walked by ``workers`` threads
    until they wait for a batch, its rounds driven here (:func:`.batches.drive_local`)."""
    from . import batches, service

    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())
    settings = PipelineSettings.load()

    def finished() -> int:
        current = progress(engine, job_id)
        return current.finished

    with (
        _renewing_leases(engine, job_id, LOCAL_LEASE_SECONDS),
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iqa-job") as pool,
        _interruptible(engine, job_id, on_interrupt),
    ):
        before = finished()

        def walk(run_ids: list[str]) -> None:
            nonlocal before
            list(
                pool.map(
                    lambda run_id: service.walk_embedded(
                        engine, agents, run_id, lease_seconds=LOCAL_LEASE_SECONDS
                    ),
                    run_ids,
                )
            )
            now = finished()
            if on_progress is not None and now > before:
                on_progress(now - before)
            before = now

        if restart:
            walk(list(restart))
        batches.drive_local(
            engine,
            job_id,
            walk,
            lease_seconds=LOCAL_LEASE_SECONDS,
            settings=settings,
            feed=lambda dispatch: feed(
                engine, job_id, settings.batch_window, dispatch, lease_seconds=LOCAL_LEASE_SECONDS
            ),
        )


#: A local metric job's tool batch on a GPU when none is set: on an H200, 16 made the job
#: 1.6x pyiqa's own CUDA loop where one image at a time made it 0.6-0.8x
#: (docs/measurements/h200-2026-11-26d/).
GPU_TOOL_BATCH = 16


def local_batch_size(engine: Engine, job_id: str, agents: AgentsSource) -> int:
    """1 for an agent job (its tool calls are not known ahead: threads take runs as they come
    free); for a metric job the ``tool_batch_size`` setting where it is set (environment or
    pipeline.yaml), else :data:`GPU_TOOL_BATCH` when its tools run on a GPU and 1 on a CPU
    (there the hand-crafted metrics run slower batched)."""
    from . import service

    with read_scope(engine) as session:
        job = reads.get_job(session, job_id)
        tools, config_json = job.tools, job.config_json
    if not tools:
        return 1
    settings = PipelineSettings.load()
    if "tool_batch_size" in settings.model_fields_set:
        return settings.tool_batch_size
    config = RunConfig.from_json(config_json) if config_json else None
    device = service.resolve_agents(agents, config).registry.device()
    return GPU_TOOL_BATCH if device.startswith("cuda") else 1


@contextmanager
def _interruptible(
    engine: Engine, job_id: str, on_interrupt: Callable[[], None] | None
) -> Iterator[None]:
    """A Ctrl-C (or SIGTERM, :class:`Terminated`) while the block runs: the job is marked
    interrupted (:func:`note_interrupted`) and ``on_interrupt`` told before the pool around the
    block waits for the items in flight, so that ``eval status`` says so at once, not
    "running, ETA" until they end."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        note_interrupted(engine, job_id, signal_name(interrupt))
        if on_interrupt is not None:
            on_interrupt()
        raise


@contextmanager
def _every(seconds: float, tick: Callable[[], bool | None], name: str) -> Iterator[None]:
    """While the block runs, ``tick`` on a daemon thread every ``seconds``, until it returns
    True; a tick that raises (a busy database) is simply tried at the next one."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            try:
                if tick():
                    return
            except Exception:
                continue

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _renewing_leases(engine: Engine, job_id: str, seconds: float) -> AbstractContextManager[None]:
    """While the block runs, the job's open runs' leases are pushed ahead every quarter lease
    (one UPDATE): alive here means not stalled; a killed process stops renewing."""

    def renew() -> None:
        with session_scope(engine) as session:
            store.extend_leases(session, job_id, seconds)

    return _every(seconds / 4, renew, "iqa-job-leases")


def _watching_for_a_cancel(
    engine: Engine, job_id: str, stopped: set[str]
) -> AbstractContextManager[None]:
    """While the block runs, whether the job was cancelled (``eval cancel`` from another
    process) is read every :data:`CANCEL_POLL_SECONDS`; once it was, the job joins
    ``stopped`` (:data:`~agentic_iqa.runtime.service.STOPPED_HERE`), so the runs claimed
    here whose first step was begun from the claim end as cancelled instead of each asking
    the model once more.  A later step of a run reads the job anyway."""

    def cancelled() -> bool:
        with read_scope(engine) as session:
            if reads.get_job(session, job_id).status != "cancelled":
                return False
        stopped.add(job_id)
        return True

    return _every(CANCEL_POLL_SECONDS, cancelled, "iqa-cancel-watch")


@dataclass(frozen=True)
class TakeOver:
    """What :func:`take_over` found: the job's live leases (``live`` runs, the last running out
    at ``until``), the process recorded as renewing them and its state seen from here
    (:meth:`~.heartbeat.Holder.state`; None: none recorded), and whether this process now holds
    them (``taken``)."""

    taken: bool
    live: int
    until: datetime | None
    holder: Holder | None
    state: str | None

    @property
    def seconds_left(self) -> float:
        """Until the last live lease runs out (0: none left)."""
        if self.until is None:
            return 0.0
        return max(0.0, (_aware(self.until) - datetime.now(UTC)).total_seconds())


def take_over(engine: Engine, job_id: str, *, force: bool = False) -> TakeOver:
    """Make this process the job's holder, if nobody else is: its runs in flight hold no live
    lease, or their holder is a process of this host that is gone (killed: its pid is no
    longer that process), or ``force``.  The leases are then renewed in this process's name in
    the same transaction, so a second resume beside this one finds a live holder.

    The job's row is locked while deciding: of two resumes of a job whose process died, one
    takes it over and the other finds the first one alive.
    """
    with session_scope(engine) as session:
        reads.get_job(session, job_id, lock=True)
        found = store.leases(session, job_id)
        holder = Holder.from_json(found.holder)
        state = holder.state() if holder is not None else None
        taken = force or found.live == 0 or state == "gone"
        if taken:
            store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())
            store.extend_leases(session, job_id, LOCAL_LEASE_SECONDS)
    return TakeOver(taken, found.live, found.until, holder, state)


def resume(engine: Engine, job_id: str) -> tuple[int, list[str]]:
    """Reopen failed and cancelled items; returns (reopened, unfinished run ids to restart).

    Items already done are never recomputed.  An item whose image (or reference) in an object
    store is no longer the object found at submit fails with the reason instead: its score
    would be of another image.
    """
    with session_scope(engine) as session:
        reopened, runs = store.reopen(session, job_id)
        stored = store.stored_objects(session, job_id)
        job = reads.get_job(session, job_id)
        if job.waiting and job.waiting.startswith(INTERRUPTED):  # it goes on now
            job.waiting = job.waiting_at = None
    changed = _changed_objects(stored)
    if not changed:
        return reopened, runs
    with session_scope(engine) as session:
        gone = set(store.fail_changed(session, changed))
        finish_if_complete(session, reads.get_job(session, job_id))
    return reopened, [run for run in runs if run not in gone]


def _changed_objects(
    stored: list[tuple[int, str | None, str | None, str | None, str | None]],
) -> dict[int, str]:
    """The items whose objects are not those recorded at submit, with why."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display, stat

    changed: dict[int, str] = {}
    for item_id, image, image_digest, reference, reference_digest in stored:
        for location, recorded in ((image, image_digest), (reference, reference_digest)):
            if not location or not recorded or recorded.startswith("sha256:"):
                continue  # a checksum of the bytes: the worker's read compares it
            try:
                now = stat(location).digest
            except StorageError as exc:
                if exc.stops_job:
                    raise
                changed[item_id] = f"{display(location)} cannot be read any more: {exc}"
                break
            if now != recorded:
                changed[item_id] = (
                    f"{display(location)} changed since the job was submitted ({recorded}, "
                    f"now {now}): its score would be of another image; submit a new job to "
                    "assess the new version"
                )
                break
    return changed


def cancel(engine: Engine, job_id: str) -> int:
    """Cancel the job's open items; a batch job's open batches are cancelled at the provider
    too (what they answered so far is still read, and a resume uses it)."""
    with session_scope(engine) as session:
        cancelled = store.cancel(session, job_id)
        batched = _is_batch(reads.get_job(session, job_id).config_json)
    if batched:
        from . import batches

        batches.cancel(engine, job_id)
    settle_if_idle(engine, job_id)
    return cancelled


def settle_if_idle(engine: Engine, job_id: str) -> bool:
    """A job stopped here (cancelled) with nothing in flight has ended: :func:`job_ended`.
    With items in flight, whoever ends the last of them settles it (its runner, or the
    workers' supervisor)."""
    with read_scope(engine) as session:
        in_flight = reads.counts(session, job_id).get("queued", 0)
    return not in_flight and job_ended(engine, job_id)


@dataclass(frozen=True)
class BatchProgress:
    """Where a batch job's rounds are: ``round`` batches sent so far (0: none yet), the open
    ones (:class:`~agentic_iqa.db.batches.BatchView`), requests by state."""

    round: int
    open: tuple[Any, ...]
    requests: dict[str, int]


@dataclass(frozen=True)
class Progress:
    job_id: str
    name: str
    status: str
    counts: dict[str, int]
    created_at: datetime
    finished_at: datetime | None
    #: Items in flight with no progress for longer than their lease (about to be re-sent, or
    #: no worker is running): an ETA would be a lie while there are any.
    stalled: int = 0
    #: A metric job's tools (``eval submit --tools``); None for an agent job.
    tools: tuple[str, ...] | None = None
    #: Why the job stopped early (its backend refuses every request); None otherwise.
    error: str | None = None
    #: Why a process could not run the job's items as submitted (a worker without the key).
    waiting: str | None = None
    #: A local job whose process is gone: open items and no lease alive (``eval resume``).
    orphaned: bool = False
    #: A batch job (``--batch``): its rounds so far, its open batches, its requests by state.
    batch: BatchProgress | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(self.counts.get(s, 0) for s in ("done", "failed", "cancelled"))

    @property
    def elapsed(self) -> float:
        end = self.finished_at or datetime.now(UTC)
        return max(1e-9, (end - self.created_at).total_seconds())

    @property
    def throughput(self) -> float:
        """Items finished per second since the job was submitted."""
        return self.finished / self.elapsed

    @property
    def interrupted(self) -> bool:
        """Its run here was stopped (Ctrl-C: :func:`note_interrupted`; a full disk:
        :func:`note_disk_full`) and nothing went on since."""
        return bool(self.waiting and self.waiting.startswith(INTERRUPTED))

    @property
    def state(self) -> str:
        """The state a user is shown (:func:`shown_state`)."""
        return shown_state(self.status, self.waiting, self.orphaned)

    @property
    def disk_full(self) -> bool:
        """Its run here stopped on a full disk, and nothing went on since."""
        return bool(self.waiting and self.waiting.startswith(DISK_FULL))

    @property
    def eta_seconds(self) -> float | None:
        if self.stalled or self.orphaned or self.interrupted:
            return None
        remaining = self.total - self.finished
        if remaining == 0:
            return 0.0
        return remaining / self.throughput if self.throughput > 0 else None


#: How a job's ``waiting`` note begins when its run here was stopped before its end.
INTERRUPTED = "interrupted"
#: ... and when that was a full disk.
DISK_FULL = f"{INTERRUPTED}: the disk is full"


def shown_state(status: str, waiting: str | None, orphaned: bool) -> str:
    """The state a user is shown: the job's status, or while it runs "interrupted" (its run
    here was stopped; "interrupted (disk full)") or "stalled" (its process is gone), where
    "running" would say that something is still working on it."""
    if status != "running":
        return status
    if waiting and waiting.startswith(DISK_FULL):
        return "interrupted (disk full)"
    if waiting and waiting.startswith(INTERRUPTED):
        return INTERRUPTED
    return "stalled" if orphaned else status


def listed_state(session: Session, job: Job, counts: dict[str, int]) -> str:
    """:func:`shown_state` from the job's row, its ``counts`` and its runs' leases, reading none
    of its items (``eval list``: a job of a million items lists as fast as one of ten)."""
    if job.status != "running":
        return str(job.status)
    return shown_state(job.status, job.waiting, _orphaned(session, job, counts))


def _orphaned(session: Session, job: Job, counts: dict[str, int]) -> bool:
    """A running job with open items that no process works on: a local one whose holder is
    gone or whose leases all passed, or one never dispatched a minute after its submit."""
    if job.status != "running":
        return False
    open_items = counts.get("pending", 0) + counts.get("queued", 0)
    # A job whose process died before it began a single run (before it said where it runs)
    # is as orphaned as a local one, once the moment after submit is past.
    unclaimed = (
        open_items > 0
        and (datetime.now(UTC) - _aware(job.created_at)).total_seconds() > UNDISPATCHED_SECONDS
        and not reads.has_runs(session, job.id)
    )
    holder = Holder.from_json(job.lease_holder) if job.dispatch == "local" else None
    # A local job whose process is gone is stalled at once, not when its leases run out.
    return (
        (job.dispatch == "local" or unclaimed)
        and open_items > 0
        and (
            not reads.live_leases(session, job.id)
            or (holder is not None and holder.state() == "gone")
        )
    )


def note_interrupted(engine: Engine, job_id: str, how: str = "Ctrl-C") -> bool:
    """Mark the job as stopped here by ``how`` (Ctrl-C, SIGTERM: status then says
    "interrupted", with no ETA, until a resume); False when the database would not take the
    note."""
    try:
        with session_scope(engine) as session:
            store.note_waiting(
                session,
                job_id,
                f"{INTERRUPTED} ({how}): `agentic-iqa eval resume {job_id[:8]}` continues it",
            )
        return True
    except Exception:  # the interrupt itself must still end the command
        return False


def space_needed(engine: Engine, job_id: str) -> int | None:
    """Bytes the rest of a job needs in a SQLite database, from what its finished items took
    (the whole file over the items finished, times those left, plus a quarter); None when it
    cannot be told (a server database, nothing finished)."""
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    try:
        size = (
            sum(
                os.path.getsize(path)
                for path in (database, f"{database}-wal")
                if os.path.exists(path)
            )
            if database
            else 0
        )
        current = progress(engine, job_id)
    except Exception:  # the estimate is a courtesy: a database that fails here says so elsewhere
        return None
    left = current.total - current.finished
    if not size or not current.finished or left <= 0:
        return None
    return int(size / current.finished * left * 1.25) + (1 << 20)


def note_disk_full(engine: Engine, job_id: str, needed: int | None) -> bool:
    """Mark the job as stopped by a full disk (status then says so, with no ETA); the write
    may itself fail on that disk, hence a bool and no exception."""
    amount = f" (about {needed / 1e6:.0f} MB more for the rest)" if needed else ""
    try:
        with session_scope(engine) as session:
            store.note_waiting(
                session,
                job_id,
                f"{DISK_FULL}{amount}: free space, then `agentic-iqa eval resume {job_id[:8]}`",
            )
        return True
    except Exception:
        return False


#: A job with no run this long after it was created was never started by any process.
UNDISPATCHED_SECONDS = 60.0


def _aware(moment: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def progress(engine: Engine, job_id: str | None = None) -> Progress:
    """Counts by state from SQL; the latest job when ``job_id`` is None."""
    with read_scope(engine) as session:
        job = reads.get_job(session, job_id) if job_id else reads.latest_job(session)
        if job is None:
            raise reads.JobNotFound("(latest)")
        running = job.status == "running"
        stalled = reads.stalled_count(session, job.id) if running else 0
        counts = reads.counts(session, job.id)
        orphaned = _orphaned(session, job, counts)
        tools = job.metric_tools
        batch = None
        if _is_batch(job.config_json):
            from ..db import batches as batch_store

            batch = BatchProgress(
                batch_store.next_round(session, job.id) - 1,
                tuple(batch_store.batch_views(session, job.id)),
                batch_store.request_counts(session, job.id),
            )
        return Progress(
            job.id,
            job.name,
            job.status,
            counts,
            job.created_at,
            job.finished_at,
            stalled,
            tuple(tools) if tools else None,
            job.error,
            job.waiting if running else None,
            orphaned,
            batch,
        )


def wait(
    engine: Engine,
    job_id: str,
    *,
    poll: float = 1.0,
    timeout: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> Progress:
    """Block until the job is no longer running (or ``timeout`` passes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        current = progress(engine, job_id)
        if on_progress is not None:
            on_progress(current)
        if current.status != "running":
            return current
        if deadline is not None and time.monotonic() > deadline:
            return current
        time.sleep(poll)
