"""A dataset job from manifest to finished items: submit, feed, run locally, resume, cancel.

The same code path serves both transports: items are claimed a window at a time (each gets a
stored run), and each run is walked by :func:`.service.run_embedded` in a local
thread pool, or by the Celery coordinator on the workers.  Never one chord over the dataset:
at most ``window`` items are in flight, so a 10,000-item job keeps memory flat everywhere.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine

from iqa_tools.settings import ToolSettings

from ..config import PipelineSettings
from ..db import jobs as store
from ..db import reads
from ..db.engine import read_scope, session_scope
from ..db.items import finish_if_complete
from ..jobs.manifest import (
    ManifestEntry,
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    bad_row_key,
    read_manifest,
)
from ..jobs.sources import dataset_entries
from ..jobs.spec import MODES, JobSpec, JobSpecError
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
        return {"line": entry.line, "item_key": entry.key or bad_row_key(entry.line),
                "status": "failed", "error": f"line {entry.line}{given}: {entry.message}",
                "finished_at": datetime.now(UTC)}
    return {"line": entry.line, "item_key": entry.item_id, "image": str(entry.image),
            "reference": str(entry.reference) if entry.reference else None,
            "query": entry.query, "mos": entry.mos, "answer_truth": entry.answer,
            "meta_json": json.dumps(entry.extra, default=str) if entry.extra else None,
            "image_digest": entry.image_digest, "reference_digest": entry.reference_digest,
            "status": "pending"}


def submit(engine: Engine, spec: JobSpec | Path | None = None, /, **keywords: Any) -> str:
    """Create the job and all its items (bad rows as failed items); returns the job id.

    ``spec`` (:class:`~agentic_iqa.jobs.spec.JobSpec`) says it all, and is stored as the job's
    record.  The older form, a manifest and keywords (:func:`spec_from_keywords`), builds one.
    """
    if not isinstance(spec, JobSpec):
        spec = spec_from_keywords(spec, **keywords)
    elif keywords:
        raise TypeError(f"submit() takes a JobSpec or keywords, not both: {sorted(keywords)}")
    return _submit(engine, spec)


def spec_from_keywords(manifest: Path | None, *, name: str | None = None,
                       query: str | None = None, root: Path | str | None = None,
                       max_replan_iterations: int | None = None,
                       check_images: bool = True, mos_range: tuple[float, float] | None = None,
                       vlm_cache: bool = True, tools: Sequence[str] | None = None,
                       tool_settings: ToolSettings | None = None, config: RunConfig | None = None,
                       mode: str | None = None, dataset: str | None = None,
                       split: str | None = None, image_dir: Path | str | None = None,
                       limit: int | None = None, batch: bool = False, group: str | None = None,
                       score: str = "mos") -> JobSpec:
    """The spec the keywords of :func:`submit` describe; a spec that cannot run is a
    :class:`~.tools.MetricToolsError` (mode and tools) or a
    :class:`~.manifest.ManifestFormatError` (the source), as before specs.

    ``config``: what the items run with (:mod:`agentic_iqa.runconfig`); None captures the
    configuration in force here.  ``max_replan_iterations``: None takes ``max_replan_iterations`` of
    ``configs/pipeline.yaml`` (or ``AGENTIC_IQA_MAX_REPLAN_ITERATIONS``).
    ``mos_range`` (low, high): a MOS outside it makes its row a bad row.  ``vlm_cache=False``
    is stored with the job in the same transaction, so no worker can start an item with it on.
    ``tools``: a metric job, which runs these tools on every item instead of the agent; they are
    checked first (:class:`~.tools.MetricToolsError`), and a full-reference tool on a row without
    a reference refuses the whole job, rolled back before anything is committed.
    ``mode``: "agent" (default), "vlm" (the VLM alone) or "tools" (given ``tools``).
    ``dataset``: a public dataset by name (:mod:`agentic_iqa.datasets`) read from its own files
    under ``root`` (then the folder to read, and every path it names stays in it, as with a
    manifest's ``root``), ``split`` of it; its MOS scale is the job's ``mos_range``.
    ``image_dir``: a manifest's image paths are relative to it.
    ``limit``: the first ``limit`` rows only.  ``batch``: the model calls go through the
    providers' batch interfaces, in rounds (:mod:`.batches`); refused (``VLMConfigurationError``,
    nothing stored) where a role's backend has none.
    """
    if mode is not None and mode not in MODES:
        raise MetricToolsError(f"unknown mode {mode!r}: agent, vlm or tools")
    try:
        return JobSpec.build(
            manifest=manifest, name=name, query=query, root=root,
            max_replan_iterations=max_replan_iterations, check_images=check_images,
            mos_range=mos_range, vlm_cache=vlm_cache, tools=tools, tool_settings=tool_settings,
            config=config, mode=mode, dataset=dataset, split=split, image_dir=image_dir,
            limit=limit, batch=batch, group=group, score=score)
    except JobSpecError as exc:
        mode_fault = "--mode" in str(exc) or "--tools" in str(exc)
        raise (MetricToolsError if mode_fault else ManifestFormatError)(str(exc)) from None


def _submit(engine: Engine, spec: JobSpec) -> str:
    """The job ``spec`` describes, its items in, its record stored with it."""
    tool_settings = spec.tool_settings
    metric_tools = check_tools(list(spec.tools), tool_settings) if spec.tools else None
    mode, config, batch, vlm_cache = spec.mode, spec.config, spec.batch, spec.vlm_cache
    max_replan_iterations = spec.max_replan_iterations
    if max_replan_iterations is None:  # the configured bound, stored with the job
        max_replan_iterations = (config.max_replan_iterations if config is not None
                                 else PipelineSettings.load().max_replan_iterations)
    if config is None:  # what shapes every answer, stored with the job (runconfig)
        config = capture(max_replan_iterations=max_replan_iterations, vlm_cache=vlm_cache,
                         metric_tools=metric_tools, tool_settings=tool_settings, batch=batch)
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
    if dataset is not None:
        if root is None:
            raise ManifestFormatError(f"--dataset {dataset} needs --root: the folder the "
                                      "dataset was unpacked into")
        described, entries = dataset_entries(dataset, root, split, check_images=check_images,
                                             score=spec.score, subset=spec.subset)
        source, confine = f"dataset {described['name']} ({described['split']}) in {root}", root
    elif manifest is None:
        raise ManifestFormatError("give a manifest (CSV, JSON, JSONL or a folder of images) or "
                                  "--dataset NAME --root DIR")
    else:
        manifest = Path(manifest)
        entries = read_manifest(manifest, root=root, check_images=check_images, access=access,
                                mos_range=mos_range, image_dir=image_dir, subset=spec.subset)
        source, confine = str(manifest.resolve()), root
    if metric_tools:
        entries = not_only_questions(
            _with_references(entries, full_reference(metric_tools, tool_settings)))
    stored = spec.model_copy(update={
        "config": config, "max_replan_iterations": max_replan_iterations, "query": query,
        "tools": tuple(metric_tools) if metric_tools else None, "batch": config.batch,
        "allowed_locations": access.allowed, "root": _place(_stored_root(confine)),
        "manifest": manifest.resolve() if isinstance(manifest, Path) else manifest,
        "dataset": described["name"] if described else None,
        "split": described["split"] if described else spec.split,
        "mos_range": tuple(described["mos_range"]) if described and described["mos_range"]
        else spec.mos_range})
    if described is not None and spec.score != "mos":
        described = {**described, "score": spec.score}
    name = spec.name or stored.default_name()
    stored = stored.model_copy(update={"name": name})
    with session_scope(engine) as session:
        job_id = store.create_job(
            session, name=name, manifest=source,
            default_query=query, root=_stored_root(confine),
            max_replan_iterations=max_replan_iterations, vlm_cache=vlm_cache,
            tools=metric_tools, config_json=config.to_json(), mode=mode,
            dataset_json=json.dumps(described) if described else None,
            spec_json=stored.to_json(), group=spec.group,
        )
        store.add_items(session, job_id, (_item_row(entry) for entry in entries))
        finish_if_complete(session, reads.get_job(session, job_id))
    return job_id


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


def _with_references(entries: Iterator[ManifestEntry], fr_tools: list[str]
                     ) -> Iterator[ManifestEntry]:
    """``entries`` unchanged; a good row without a reference stops the submit when a tool
    needs one (it could never be scored, and the job would be half a job)."""
    for entry in entries:
        if fr_tools and isinstance(entry, ManifestItem) and entry.reference is None:
            kind = "is a full-reference tool" if len(fr_tools) == 1 else \
                "are full-reference tools"
            raise MetricToolsError(
                f"line {entry.line} ({entry.item_id!r}): {', '.join(fr_tools)} {kind} and this "
                "row has no reference: give a `reference` for every row, or leave out the "
                "full-reference tools")
        yield entry


def feed(engine: Engine, job_id: str, window: int, dispatch: Callable[[str], None], *,
         lease_seconds: float | None = None) -> int:
    """Top the job up to ``window`` items in flight; returns how many runs were dispatched.

    The job's row is locked while counting and claiming, so two feeders (two supervisors) never
    both fill the same gap.  ``lease_seconds``: the runs are supervised (workers).
    """
    with session_scope(engine) as session:
        job = reads.get_job(session, job_id, lock=True)
        if _is_batch(job.config_json):  # every item waits in the same rounds
            window = max(window, PipelineSettings.load().batch_window)
        in_flight = reads.counts(session, job_id).get("queued", 0)
        run_ids = store.claim(session, job, window - in_flight, lease_seconds=lease_seconds)
    for run_id in run_ids:  # after the commit, so a worker always finds its run
        dispatch(run_id)
    return len(run_ids)


#: Lease of a local job's runs: this process renews it while it works, so a job whose process
#: died shows as stalled within this many seconds (``eval status``), not "running, ETA 97 s".
LOCAL_LEASE_SECONDS = 30.0


def run_local(engine: Engine, job_id: str, agents: AgentsSource, *, workers: int = 2,
              window: int | None = None, tool_batch_size: int | None = None,
              on_progress: Callable[[int], None] | None = None,
              restart: Sequence[str] = (),
              on_interrupt: Callable[[], None] | None = None) -> None:
    """Work the job in this process with a pool of ``workers`` threads until nothing is left.

    ``agents``: the agents, or a function of the job's stored configuration giving them
    (:class:`~agentic_iqa.pipeline.AgentsCache`), which is how the CLI runs a job as it was
    submitted.  The job's runs hold a lease this process renews while it works.
    ``tool_batch_size`` above 1: each thread scores the first tool steps of its share of runs
    together (:func:`service.walk_batch`); by default :func:`local_batch_size`.
    ``on_progress`` is told how many items just ended.  ``restart``: runs a resume found in
    flight (:func:`resume`), walked to their end first, under this process's leases.
    A Ctrl-C (KeyboardInterrupt) marks the job interrupted and tells ``on_interrupt`` at once,
    then waits for the items in flight to end before it propagates (:func:`_interruptible`).
    """
    from . import service

    with read_scope(engine) as session:
        batched = _is_batch(reads.get_job(session, job_id).config_json)
    if batched:
        _run_local_batched(engine, job_id, agents, workers=workers, on_progress=on_progress,
                           restart=restart, on_interrupt=on_interrupt)
        return
    batch_size = tool_batch_size or local_batch_size(engine, job_id, agents)
    window = window or max(8, 4 * workers, batch_size * workers if batch_size > 1 else 0)
    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())

    def walk(run_ids: list[str]) -> int:
        if batch_size > 1:
            service.walk_batch(engine, agents, run_ids, max_batch=batch_size)
        else:
            service.walk_embedded(engine, agents, run_ids[0])
        return len(run_ids)

    with _renewing_leases(engine, job_id, LOCAL_LEASE_SECONDS), \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iqa-job") as pool, \
            _interruptible(engine, job_id, on_interrupt):
        # One worker walks the runs in this thread (no hand-over to a pool thread per item).
        work = map if workers == 1 else pool.map
        for ended in work(walk, [[run_id] for run_id in restart]):
            if on_progress is not None:
                on_progress(ended)
        while True:
            batch: list[str] = []
            feed(engine, job_id, window, batch.append, lease_seconds=LOCAL_LEASE_SECONDS)
            if not batch:
                break
            # Batched: one share per thread; else one run at a time, as threads come free.
            shares = ([batch[index::workers] for index in range(workers)] if batch_size > 1
                      else [[run_id] for run_id in batch])
            for ended in work(walk, [share for share in shares if share]):
                if on_progress is not None:
                    on_progress(ended)


def _is_batch(config_json: str | None) -> bool:
    return bool(config_json) and RunConfig.from_json(config_json).batch


def _run_local_batched(engine: Engine, job_id: str, agents: AgentsSource, *, workers: int,
                       on_progress: Callable[[int], None] | None,
                       restart: Sequence[str] = (),
                       on_interrupt: Callable[[], None] | None = None) -> None:
    """A batch job (``--batch``) from this process: its runs walked by ``workers`` threads
    until they wait for a batch, its rounds driven here (:func:`.batches.drive_local`)."""
    from . import batches, service

    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())
    settings = PipelineSettings.load()

    def finished() -> int:
        current = progress(engine, job_id)
        return current.finished

    with _renewing_leases(engine, job_id, LOCAL_LEASE_SECONDS), \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iqa-job") as pool, \
            _interruptible(engine, job_id, on_interrupt):
        before = finished()

        def walk(run_ids: list[str]) -> None:
            nonlocal before
            list(pool.map(lambda run_id: service.walk_embedded(
                engine, agents, run_id, lease_seconds=LOCAL_LEASE_SECONDS), run_ids))
            now = finished()
            if on_progress is not None and now > before:
                on_progress(now - before)
            before = now

        if restart:
            walk(list(restart))
        batches.drive_local(
            engine, job_id, walk, lease_seconds=LOCAL_LEASE_SECONDS, settings=settings,
            feed=lambda dispatch: feed(engine, job_id, settings.batch_window, dispatch,
                                       lease_seconds=LOCAL_LEASE_SECONDS))


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
def _interruptible(engine: Engine, job_id: str,
                   on_interrupt: Callable[[], None] | None) -> Iterator[None]:
    """A Ctrl-C while the block runs: the job is marked interrupted (:func:`note_interrupted`)
    and ``on_interrupt`` told before the pool around the block waits for the items in flight,
    so that ``eval status`` says so at once, not "running, ETA" until they end."""
    try:
        yield
    except KeyboardInterrupt:
        note_interrupted(engine, job_id)
        if on_interrupt is not None:
            on_interrupt()
        raise


@contextmanager
def _renewing_leases(engine: Engine, job_id: str, seconds: float) -> Iterator[None]:
    """While the block runs, the job's open runs' leases are pushed ahead every quarter lease
    (one UPDATE): alive here means not stalled; a killed process stops renewing."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(seconds / 4):
            try:
                with session_scope(engine) as session:
                    store.extend_leases(session, job_id, seconds)
            except Exception:  # a busy database: the next tick renews
                continue

    thread = threading.Thread(target=renew, name="iqa-job-leases", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


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


def _changed_objects(stored: list[tuple[int, str | None, str | None, str | None, str | None]]
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
                    "assess the new version")
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
    return cancelled


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


def note_interrupted(engine: Engine, job_id: str) -> bool:
    """Mark the job as stopped here by Ctrl-C (status then says "interrupted", with no ETA,
    until a resume); False when the database would not take the note."""
    try:
        with session_scope(engine) as session:
            store.note_waiting(session, job_id, f"{INTERRUPTED} (Ctrl-C): `agentic-iqa eval "
                               f"resume {job_id[:8]}` continues it")
        return True
    except Exception:  # the interrupt itself must still end the command
        return False


def space_needed(engine: Engine, job_id: str) -> int | None:
    """Bytes the rest of a job needs in a SQLite database, from what its finished items took
    (the whole file over the items finished, times those left, plus a quarter); None when it
    cannot be told (a server database, nothing finished)."""
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    try:
        size = sum(os.path.getsize(path) for path in (database, f"{database}-wal")
                   if os.path.exists(path)) if database else 0
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
            store.note_waiting(session, job_id, f"{DISK_FULL}{amount}: free space, then "
                               f"`agentic-iqa eval resume {job_id[:8]}`")
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
        open_items = counts.get("pending", 0) + counts.get("queued", 0)
        # A job whose process died before it began a single run (before it said where it
        # runs) is as orphaned as a local one, once the moment after submit is past.
        unclaimed = running and open_items > 0 and (
            datetime.now(UTC) - _aware(job.created_at)).total_seconds() > UNDISPATCHED_SECONDS \
            and not reads.run_count(session, job.id)
        holder = Holder.from_json(job.lease_holder) if job.dispatch == "local" else None
        # A local job whose process is gone is stalled at once, not when its leases run out.
        orphaned = (running and (job.dispatch == "local" or unclaimed) and open_items > 0
                    and (not reads.live_leases(session, job.id)
                         or (holder is not None and holder.state() == "gone")))
        tools = job.metric_tools
        batch = None
        if _is_batch(job.config_json):
            from ..db import batches as batch_store

            batch = BatchProgress(batch_store.next_round(session, job.id) - 1,
                                  tuple(batch_store.batch_views(session, job.id)),
                                  batch_store.request_counts(session, job.id))
        return Progress(job.id, job.name, job.status, counts, job.created_at,
                        job.finished_at, stalled, tuple(tools) if tools else None, job.error,
                        job.waiting if running else None, orphaned, batch)


def wait(engine: Engine, job_id: str, *, poll: float = 1.0, timeout: float | None = None,
         on_progress: Callable[[Progress], None] | None = None) -> Progress:
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
