"""Submit a dataset job: its rows read, checked and stored as a stream, its record with them.

:func:`submit` stores the job a :class:`~agentic_iqa.jobs.spec.JobSpec` describes, a chunk of
rows per transaction; :class:`Submission` does the same in a thread of its own, so that the
job's first items run (here, or on the workers) while the rest of its rows are read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine

from ..config import PipelineSettings
from ..db import jobs as store
from ..db.engine import session_scope
from ..db.items import add_items, finish_if_complete
from ..jobs.manifest import (
    ManifestEntry,
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    bad_row_key,
    read_manifest,
)
from ..jobs.sources import dataset_entries
from ..jobs.spec import JobSpec, place
from ..jobs.tools import (
    MetricToolsError,
    check_tools,
    full_reference,
    metric_query,
    not_only_questions,
)
from ..runconfig import capture

if TYPE_CHECKING:  # the agent (pipeline, service) loads only where items run: not for status
    pass


DEFAULT_QUERY = "Rate the quality of this image."


def _item_row(entry: ManifestEntry) -> dict[str, Any]:
    """Return the item's columns; a bad row is keyed by the id it gave when no other row has it,
    else by its line, in a form no manifest id can take (:attr:`ManifestError.key`): two items of a
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


class SubmitStopped(Exception):
    """The submit was asked to stop (:meth:`Submission.stop`, a Ctrl-C) before its last row."""


@dataclass
class Tally:
    """The rows a submit has handed to the database so far: items, bad rows among them."""

    items: int = 0
    bad: int = 0
    #: Rows left out because their image is one the builtin was fitted on
    #: (``exclude_in_sample``), and rows whose image could not be read to tell.
    in_sample: int = 0
    in_sample_unreadable: int = 0


def submit(
    engine: Engine,
    spec: JobSpec,
    *,
    stored: Callable[[str], None] | None = None,
    tally: Tally | None = None,
) -> str:
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
    return _submit(engine, spec, stored, threading.Event(), tally if tally is not None else Tally())


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
        """Return the job's id once its first items are stored; the submit's error if it failed
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
        """Return the job's id once every row is stored; the submit's error if it failed."""
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
    """Return the job ``spec`` describes, its items in, its record stored with it (:func:`submit`);
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
    if spec.exclude_in_sample:
        entries = _without_in_sample(entries, tally)
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
            "root": place(_stored_root(confine)),
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
            job = store.get_job(session, job_id)
            job.submitting = True
            # Nothing is committed before the job is known to be one (its first row a metric
            # job can score), so a refusal leaves nothing behind.
            known = not metric_tools
            while True:
                if chunk:
                    add_items(session, job_id, (_item_row(entry) for entry in chunk))
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


def _without_in_sample(entries: Iterator[ManifestEntry], tally: Tally) -> Iterator[ManifestEntry]:
    """``entries`` less the items whose image the builtin backend was fitted on (by the SHA-256
    recorded when the row was checked, else the file's bytes), counted in ``tally``; an image
    that cannot be read to tell (an object in a store) is kept, and counted too."""
    from ..reports.in_sample import fitted_images, image_sha256

    fitted = fitted_images()
    for entry in entries:
        if isinstance(entry, ManifestItem):
            recorded = entry.image_digest
            digest = image_sha256(str(entry.image), recorded)
            if digest is None:
                tally.in_sample_unreadable += 1
            elif digest in fitted:
                tally.in_sample += 1
                continue
        yield entry


def _scorable(entry: ManifestEntry, fr_tools: list[str]) -> bool:
    """Return whether a metric job's tools can score this entry: a good row that is no question,
    with a reference when a full-reference tool is among them."""
    return (
        isinstance(entry, ManifestItem)
        and not entry.options
        and (not fr_tools or entry.reference is not None)
    )


def _store_rest(engine: Engine, job_id: str, rows: _Rows) -> None:
    """Store the rows after the first commit, a chunk per transaction; at the last, the job is no
    longer submitting (and done, if every item already ended).  A failure on the way cancels
    the job with the reason (its rows after it were never stored) and is raised."""
    try:
        while not rows.ended:
            chunk = rows.take(SUBMIT_CHUNK, SUBMIT_WAIT_SECONDS)
            with session_scope(engine) as session:
                if chunk:
                    add_items(session, job_id, (_item_row(entry) for entry in chunk))
                    chunk.clear()  # held no longer than its statement
                if rows.ended:
                    job = store.get_job(session, job_id, lock=True)
                    job.submitting = False
                    finish_if_complete(session, job)
    except BaseException as exc:
        rows.close()
        _give_up(engine, job_id, rows.last_line, exc)
        raise


def _give_up(engine: Engine, job_id: str, last_line: int, error: BaseException) -> None:
    """Give up a submit that failed after its first commit: the job is cancelled (what runs ends as
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
            job = store.get_job(session, job_id, lock=True)
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
        """Return up to ``limit`` entries: those that come within ``wait`` seconds of the first.
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
    """Yield ``entries``; when a tool needs a reference, a first good row without one stops the
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


def _stored_root(confine: Path | str | None) -> str | None:
    """Return the confining root as stored: a folder resolved, a URL as given."""
    if confine is None or isinstance(confine, str):
        return confine
    return str(confine.resolve())
