"""Run a dataset job in this process, and mark it when that run is stopped.

:func:`run_local` walks the job's runs in a pool of threads, a window claimed at a time, while
daemon threads renew its leases and watch for a cancel from elsewhere; :func:`take_over` makes
this process the job's holder.  A Ctrl-C, a SIGTERM (:class:`Terminated`) or a full disk
leaves a note on the job (:func:`note_interrupted`, :func:`note_disk_full`) that ``eval
status`` shows until a resume.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from ..config import PipelineSettings
from ..db import jobs as store
from ..db.engine import read_scope, session_scope
from ..db.models import aware
from ..runconfig import RunConfig
from .heartbeat import Holder
from .lifecycle import chunks, claim_runs, feed, job_ended
from .progress import DISK_FULL, INTERRUPTED, is_batch, progress
from .space import megabytes

if TYPE_CHECKING:  # the agent (pipeline, service) loads only where items run: not for status
    from .service import AgentsSource


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
    (:class:`~agentic_iqa.agents.team.AgentsCache`), which is how the CLI runs a job as it was
    submitted.  The job's runs hold a lease this process renews while it works.
    ``tool_batch_size`` above 1: each thread scores the first tool steps of its share of runs
    together (:func:`embedded.walk_batch`); by default :func:`local_batch_size`.
    ``on_progress`` is told how many items just ended.  ``restart``: runs a resume found in
    flight (:func:`.lifecycle.resume`), walked to their end first, under this process's leases.
    A Ctrl-C or SIGTERM (KeyboardInterrupt) marks the job interrupted and tells
    ``on_interrupt`` at once, then waits for the items in flight to end before it propagates
    (:func:`_interruptible`).
    """
    from . import embedded, service

    with read_scope(engine) as session:
        batched = is_batch(store.get_job(session, job_id).config_json)
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
    chunk = (
        PipelineSettings.load().metric_chunk_size
        if batch_size == 1 and _metric_job(engine, job_id)
        else 1
    )
    window = window or max(
        8, 4 * workers, batch_size * workers if batch_size > 1 else 0, 2 * chunk * workers
    )
    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())

    # The first step of each run claimed here, begun from its claim: no transaction of its own.
    firsts: dict[str, service.NextStep] = {}
    service.STOPPED_HERE.discard(job_id)  # it runs again (a resume): its runs may begin ahead

    # Set on a Ctrl-C: the runs not yet begun are left for a resume, not walked while the
    # pool winds down (a chunk stops before its next run).
    stopping = threading.Event()

    def walk(run_ids: list[str]) -> int:
        if stopping.is_set():
            return 0
        if batch_size > 1:
            embedded.walk_batch(engine, agents, run_ids, max_batch=batch_size, firsts=firsts)
        elif len(run_ids) > 1:
            return embedded.walk_chunk(engine, agents, run_ids, firsts=firsts, stop=stopping.is_set)
        else:
            embedded.walk_embedded(engine, agents, run_ids[0], first=firsts.pop(run_ids[0], None))
        return len(run_ids)

    with (
        _renewing_leases(engine, job_id, LOCAL_LEASE_SECONDS),
        _watching_for_a_cancel(engine, job_id, service.STOPPED_HERE),
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iqa-job") as pool,
        _interruptible(engine, job_id, on_interrupt, stopping),
    ):
        # One worker walks the runs in this thread (no hand-over to a pool thread per item).
        work = map if workers == 1 else pool.map
        for ended in work(walk, [[run_id] for run_id in restart]):
            if on_progress is not None:
                on_progress(ended)

        def claimed() -> list[str]:
            claim = claim_runs(engine, job_id, window, LOCAL_LEASE_SECONDS)
            firsts.update(
                embedded.first_steps(
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
                pool,
                walk,
                claimed,
                lambda: _submitting(engine, job_id),
                window,
                on_progress,
                chunk=chunk,
                threads=workers,
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
                    else chunks(batch, spread(len(batch), chunk, workers))
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
    *,
    chunk: int = 1,
    threads: int = 1,
) -> None:
    """Walk the job's runs on the pool's threads, ``chunk`` runs each as threads come free,
    claiming more whenever half the window has ended: no thread waits for the slowest item of
    a window before the next one is claimed."""
    running: set[Future[int]] = set()
    while True:
        if len(running) * chunk <= window // 2:
            batch = claimed()
            shares = chunks(batch, spread(len(batch), chunk, threads))
            running |= {pool.submit(walk, share) for share in shares}
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


def spread(count: int, chunk: int, workers: int) -> int:
    """Return the chunk size for ``count`` claimed runs on ``workers`` threads: at most
    ``chunk``, and small enough that every thread gets a share of a small claim."""
    return max(1, min(chunk, -(-count // max(1, workers))))


def _metric_job(engine: Engine, job_id: str) -> bool:
    """Tell whether the job scores tools alone (a metric job: each run one step)."""
    with read_scope(engine) as session:
        return bool(store.get_job(session, job_id).tools)


#: How often a local runner that ran out of items asks whether the submit stored more.
SUBMITTING_POLL_SECONDS = 0.2


def _submitting(engine: Engine, job_id: str) -> bool:
    """Return whether the job's submit is still adding rows (and the job still running)."""
    with read_scope(engine) as session:
        job = store.get_job(session, job_id)
        return job.submitting and job.status == "running"


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
    """Run a batch job (``--batch``) from this process: its runs walked by ``workers`` threads
    until they wait for a batch, its rounds driven here (:func:`.batches.drive_local`)."""
    from . import batches, embedded

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
                    lambda run_id: embedded.walk_embedded(
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
    """Return 1 for an agent job (its tool calls are not known ahead: threads take runs as they come
    free); for a metric job the ``tool_batch_size`` setting where it is set (environment or
    pipeline.yaml), else :data:`GPU_TOOL_BATCH` when its tools run on a GPU and 1 on a CPU
    (there the hand-crafted metrics run slower batched)."""
    from . import service

    with read_scope(engine) as session:
        job = store.get_job(session, job_id)
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
    engine: Engine,
    job_id: str,
    on_interrupt: Callable[[], None] | None,
    stopping: threading.Event | None = None,
) -> Iterator[None]:
    """Mark the job on a Ctrl-C (or SIGTERM, :class:`Terminated`) while the block runs: it is marked
    interrupted (:func:`note_interrupted`) and ``on_interrupt`` told before the pool around the
    block waits for the items in flight, so that ``eval status`` says so at once, not
    "running, ETA" until they end.  ``stopping`` is set first: the pool's threads then begin
    no other run."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        if stopping is not None:
            stopping.set()
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
            if store.get_job(session, job_id).status != "cancelled":
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
        return max(0.0, (aware(self.until) - datetime.now(UTC)).total_seconds())


def take_over(engine: Engine, job_id: str, *, force: bool = False) -> TakeOver:
    """Make this process the job's holder, if nobody else is: its runs in flight hold no live
    lease, or their holder is a process of this host that is gone (killed: its pid is no
    longer that process), or ``force``.  The leases are then renewed in this process's name in
    the same transaction, so a second resume beside this one finds a live holder.

    The job's row is locked while deciding: of two resumes of a job whose process died, one
    takes it over and the other finds the first one alive.
    """
    with session_scope(engine) as session:
        store.get_job(session, job_id, lock=True)
        found = store.leases(session, job_id)
        holder = Holder.from_json(found.holder)
        state = holder.state() if holder is not None else None
        taken = force or found.live == 0 or state == "gone"
        if taken:
            store.set_dispatch(session, job_id, "local", holder=Holder.here().to_json())
            store.extend_leases(session, job_id, LOCAL_LEASE_SECONDS)
    return TakeOver(taken, found.live, found.until, holder, state)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, ``docker stop``) to a process running a job here: a
    KeyboardInterrupt, so that it stops the job as Ctrl-C does, and can be told apart from one
    in what the job is marked with."""


def signal_name(interrupt: BaseException) -> str:
    """Return how an interrupt came, as a job's note and a message say it."""
    return "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"


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


def note_disk_full(engine: Engine, job_id: str, needed: int | None) -> bool:
    """Mark the job as stopped by a full disk (status then says so, with no ETA); the write
    may itself fail on that disk, hence a bool and no exception."""
    amount = f" (about {megabytes(needed)} more for the rest)" if needed else ""
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
