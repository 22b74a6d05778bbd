"""Walk stored runs to their end in this process: one run at a time, or a batch of runs whose
tool steps are scored together.

The steps are those of :mod:`.service` (each recorded, idempotent); here they are walked in a
loop with no broker, by ``assess``, the local job runner (:mod:`.local`) and, for the tools
scored ahead of a batch of runs, the workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from iqa_tools.storage.access import reading

from ..db import jobs
from ..db.endings import end_runs, ending_of, recorded_steps
from ..db.engine import session_scope
from ..db.runs import RunNotFound, job_config, run_context
from ..db.steps import StaleAttempt
from ..pipeline import (
    TRANSIENT_RETRY,
    TransientRetry,
    next_step,
    planned_tool_calls,
)
from ..runconfig import CannotHonour
from ..state import AgenticIQAState
from ..vlm.base import TransientVLMError
from ..vlm.usage import CallCollector
from .service import (
    RAN,
    STOPPED_HERE,
    AgentsSource,
    Begun,
    Deferred,
    NextStep,
    ReadingSpec,
    StepResult,
    TimeLimit,
    advance,
    execute_step,
    give_up,
    load,
    log,
    reading_of,
    resolve_agents,
    store_outcome,
)


def first_steps(
    agents: AgentsSource,
    job_id: str,
    claimed: Sequence[jobs.Claimed],
    *,
    config_json: str | None,
    vlm_cache: bool,
) -> dict[str, NextStep]:
    """Return the first step of each run just claimed for this process (:func:`jobs.claim_items`),
    begun from what the claim knows (a new run's state, its job's configuration, its item's
    digests) without reading it back or writing anything: the step's record is written with
    its outcome (:attr:`Begun.recorded`), so a local item costs one transaction, not two.
    Empty when this process cannot run the job as submitted (each run's own first step then
    says why)."""
    config = job_config(config_json)
    try:
        resolved = resolve_agents(agents, config)
    except CannotHonour:
        return {}
    policy = config.access if config is not None else None
    firsts: dict[str, NextStep] = {}
    for run in claimed:
        step = next_step(run.state)
        if step is not None:
            firsts[run.run_id] = NextStep(
                step,
                run.state.get("iteration_count", 0),
                Begun(
                    run.state,
                    1,
                    job_id,
                    vlm_cache,
                    frozenset(),
                    resolved,
                    (policy, run.digests),
                    recorded=False,
                ),
            )
    return firsts


def score_tools_ahead(
    engine: Engine, agents: AgentsSource, items: list[tuple[str, int]], *, max_batch: int
) -> int:
    """Batch the tool calls that several runs' tool steps are about to make (one read of their
    states, same-sized inputs of a tool in one forward pass); returns the calls computed.

    Nothing is written here but the score cache: each run's step then runs as usual through
    :func:`.service.execute_step` (lease, idempotency, logs) and takes its own score from the batch.
    A run whose state does not load or whose step is stale is simply left out.
    """
    return _score_ahead(engine, agents, items, max_batch=max_batch, registries={})


def _score_ahead(
    engine: Engine,
    agents: AgentsSource,
    items: list[tuple[str, int]],
    *,
    max_batch: int,
    registries: dict[int, Any],
    firsts: dict[str, NextStep] | None = None,
) -> int:
    """Score as :func:`score_tools_ahead` does, filling ``registries`` with those that scored (by
    id); ``firsts``: runs whose first step is begun from their claim (their state known)."""
    from iqa_tools.images import LoadedImage, read_image

    calls: dict[int, list[tuple[str, LoadedImage, LoadedImage | None]]] = {}
    images: dict[tuple[str, str], LoadedImage] = {}

    def image(path: str, spec: ReadingSpec) -> LoadedImage:
        key = (path, repr(spec))  # one job's reading never serves another's
        if key not in images:
            with reading(*spec):
                images[key] = read_image(path)
        return images[key]

    runs = []
    known = firsts or {}
    for run_id, iteration in items:
        begun = known[run_id].begun if run_id in known else None
        if begun is not None and begun.state.get("iteration_count", 0) == iteration:
            runs.append((begun.state, begun.agents.registry, begun.reading))
    unknown = [(run_id, iteration) for run_id, iteration in items if run_id not in known]
    if unknown:
        with session_scope(engine) as session:
            for run_id, iteration in unknown:
                try:
                    run = run_context(session, run_id)
                    registry = resolve_agents(agents, run.config).registry
                except Exception as exc:  # the step itself reports a missing or broken run
                    log.info("run %s: not batched: %s", run_id, exc)
                    continue
                if run.state.get("iteration_count", 0) == iteration:
                    runs.append((run.state, registry, reading_of(run)))
    for state, registry, spec in runs:  # one batch per registry: jobs may differ in settings
        registries[id(registry)] = registry
        for tool, image_path, reference_path in planned_tool_calls(state, registry):
            try:
                calls.setdefault(id(registry), []).append(
                    (
                        tool,
                        image(image_path, spec),
                        image(reference_path, spec) if reference_path else None,
                    )
                )
            except Exception as exc:  # unreadable input: its step reports it
                log.info("%s: not batched: %s", image_path, exc)
    return sum(
        registries[key].score_batches(batch, max_batch=max_batch)
        for key, batch in calls.items()
        if len(batch) >= 2
    )


def walk_batch(
    engine: Engine,
    agents: AgentsSource,
    run_ids: list[str],
    *,
    max_batch: int,
    firsts: dict[str, NextStep] | None = None,
    where: Where | None = None,
) -> None:
    """Walk new runs to their end in this thread (:func:`walk_embedded`), their first tool
    steps scored together ahead (a local metric job on a GPU: one forward pass per tool and
    image size instead of one per image).  Scoring ahead is an optimisation: if it fails,
    each step computes its own scores as usual.  ``firsts``: their first steps, begun from
    their claim (:func:`first_steps`), each taken by its run's walk.  ``where``: as for
    :func:`walk_chunk`."""
    registries: dict[int, Any] = {}
    known = firsts or {}
    try:
        try:
            _score_ahead(
                engine,
                agents,
                [(run_id, 0) for run_id in run_ids],
                max_batch=max_batch,
                registries=registries,
                firsts=known,
            )
        except Exception:
            log.exception("scoring %d runs' tool steps ahead failed", len(run_ids))
        walk_chunk(engine, agents, run_ids, firsts=known, where=where)
    finally:  # a score no step took (a run that failed before it) must not outlive the batch
        for registry in registries.values():
            registry.clear_batch()


def walk_chunk(
    engine: Engine,
    agents: AgentsSource,
    run_ids: list[str],
    *,
    firsts: dict[str, NextStep] | None = None,
    where: Where | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Walk runs to their end in this thread (:func:`walk_embedded`), the ends of those that a
    metric job's one step ends written together, in one transaction after the last
    (:func:`end_deferred`): a chunk of a metric job's items costs a handful of
    statements, not ten each.  Those computed before an interrupt are still written.
    ``firsts``: as for :func:`walk_batch`.  ``where``: the worker, queue and time limit the
    steps run under, and what keeps the chunk's leases (a worker's); default in-process.
    ``stop``: asked before each run; once it says so (a Ctrl-C) the rest of the chunk is left
    as claimed, for a resume.  Returns how many runs were walked."""
    known = firsts if firsts is not None else {}
    endings: list[Deferred] = []
    where = where or Where()
    walked = 0
    try:
        for run_id in run_ids:
            if stop is not None and stop():
                break
            walked += 1
            if where.between is not None:
                where.between()
            walk_embedded(
                engine,
                agents,
                run_id,
                first=known.pop(run_id, None),
                endings=endings,
                where=where,
            )
    finally:
        end_deferred(engine, endings)
    return walked


@dataclass(frozen=True)
class Where:
    """Where a chunk's steps run: the worker and queue their records name, the time limit
    around each (:data:`.service.TimeLimit`), and what runs before each run of the chunk (a
    worker's: renew the chunk's leases)."""

    worker: str = "embedded"
    queue: str = "in-process"
    time_limit: TimeLimit | None = None
    between: Callable[[], None] | None = None


def begin_new_runs(
    engine: Engine, agents: AgentsSource, run_ids: Sequence[str]
) -> tuple[dict[str, NextStep], list[str]]:
    """Begin the first steps of runs just dispatched as a chunk (a metric job's, on a worker),
    from one read of them all, writing nothing (:attr:`.service.Begun.recorded` False, as
    :func:`first_steps` does from a claim); return those begun, and the runs left for the
    one-at-a-time path (a step recorded already: a re-send; a run ended, missing, or whose
    configuration this process cannot honour: that path says why)."""
    begun: dict[str, NextStep] = {}
    left: list[str] = []
    with session_scope(engine) as session:
        recorded = recorded_steps(session, run_ids)
        for run_id in run_ids:
            try:
                run = run_context(session, run_id)
                resolved = resolve_agents(agents, run.config)
            except (RunNotFound, CannotHonour):
                left.append(run_id)
                continue
            step = next_step(run.state)
            if (
                run_id in recorded
                or run.status not in ("pending", "running")
                or step is None
                or run.state.get("iteration_count", 0) != 0
            ):
                left.append(run_id)
                continue
            begun[run_id] = NextStep(
                step,
                0,
                Begun(
                    run.state,
                    1,
                    run.job_id,
                    run.vlm_cache,
                    frozenset(),
                    resolved,
                    reading_of(run),
                    recorded=False,
                ),
            )
    return begun, left


def run_embedded(
    engine: Engine,
    agents: AgentsSource,
    run_id: str,
    *,
    retry: TransientRetry = TRANSIENT_RETRY,
    lease_seconds: float | None = None,
) -> AgenticIQAState:
    """Walk a stored run to its end in this process (:func:`walk_embedded`) and return its
    stored state."""
    walk_embedded(engine, agents, run_id, retry=retry, lease_seconds=lease_seconds)
    return load(engine, run_id)


def walk_embedded(
    engine: Engine,
    agents: AgentsSource,
    run_id: str,
    *,
    retry: TransientRetry = TRANSIENT_RETRY,
    lease_seconds: float | None = None,
    first: NextStep | None = None,
    endings: list[Deferred] | None = None,
    where: Where | None = None,
) -> None:
    """Walk a stored run to its end in this process (the embedded default: no broker).

    A step failing with a transient VLM error is run again per ``retry`` (each attempt is
    recorded on the step); when the error outlasts every attempt, an executor subtask is
    given up and any other step fails the run.  ``lease_seconds``: the steps hold a lease,
    renewed by the heartbeat, so a run left by a process that died shows as stalled.
    A job's items end here: nothing reads their state back (one transaction less each).
    ``first``: the run's first step, begun from its claim (:func:`first_steps`): no
    transaction before it.  ``endings``: where its end waits to be written with others'
    (:func:`walk_chunk`).  ``where``: as for :func:`walk_chunk`.
    """
    where = where or Where()
    if first is not None and first.begun is not None and first.begun.job_id in STOPPED_HERE:
        first = None  # its job was stopped here since the claim: read it, end as cancelled
    upcoming = (
        first
        if first is not None
        else advance(
            engine,
            run_id,
            chain=_in_process,
            worker=where.worker,
            agents=agents,
            lease_seconds=lease_seconds,
        )
    )
    while upcoming is not None:
        try:
            result = retry.call(
                upcoming.step,
                partial(
                    _attempt,
                    engine,
                    agents,
                    run_id,
                    upcoming,
                    [upcoming.begun],
                    lease_seconds,
                    endings,
                    where,
                ),
            )
        except TransientVLMError as exc:
            upcoming = give_up(
                engine, run_id, upcoming.step, upcoming.iteration, f"{upcoming.step} failed: {exc}"
            )
            continue
        upcoming = (
            result.upcoming
            if result.outcome == RAN
            else advance(engine, run_id, lease_seconds=lease_seconds)
        )


def _attempt(
    engine: Engine,
    agents: AgentsSource,
    run_id: str,
    upcoming: NextStep,
    handed: list[Begun | None],
    lease_seconds: float | None = None,
    endings: list[Deferred] | None = None,
    where: Where | None = None,
) -> StepResult:
    """Run one attempt of an embedded step: a step begun ahead is for the first attempt only (a
    retry after a transient error begins it again, as one more attempt)."""
    where = where or Where()
    return execute_step(
        engine,
        agents,
        run_id,
        upcoming.step,
        upcoming.iteration,
        worker=where.worker,
        queue=where.queue,
        lease_seconds=lease_seconds,
        begun=handed.pop() if handed else None,
        chain=_in_process,
        endings=endings,
        time_limit=where.time_limit,
    )


def _in_process(_: NextStep, __: AgenticIQAState) -> str:
    return "in-process"


def end_deferred(engine: Engine, endings: list[Deferred]) -> None:
    """Write the outcomes held in ``endings`` (emptied) in one transaction
    (:func:`~agentic_iqa.db.endings.end_runs`).  A run of a cancelled job, or every run when
    the transaction fails (a run deleted meanwhile), is written one at a time as
    :func:`.service.execute_step` would; a stale one is discarded, as a fenced attempt is."""
    pending, endings[:] = list(endings), []
    if not pending:
        return
    by_run = {deferred.run_id: deferred for deferred in pending}
    try:
        with session_scope(engine) as session:
            stale, alone = end_runs(
                session,
                [
                    ending_of(
                        deferred.run_id,
                        deferred.begun.job_id or "",
                        deferred.step,
                        deferred.iteration,
                        started_at=deferred.begun_at,
                        state=deferred.new_state,
                        update=deferred.update,
                        worker=deferred.worker,
                        queue=deferred.queue,
                    )
                    for deferred in pending
                ],
            )
    except DBAPIError as failed:
        log.warning("ending %d runs together failed (%s): ending each alone", len(pending), failed)
        stale, alone = [], list(by_run)
    for run_id in stale:
        deferred = by_run[run_id]
        log.warning("%s", StaleAttempt(run_id, deferred.step, deferred.iteration, 1))
    for run_id in alone:
        deferred = by_run[run_id]
        try:
            store_outcome(
                engine,
                run_id,
                deferred.step,
                deferred.iteration,
                deferred.begun,
                deferred.new_state,
                deferred.update,
                CallCollector(),
                worker=deferred.worker,
                queue=deferred.queue,
                lease_seconds=None,
                chain=None,
                begun_at=deferred.begun_at,
            )
        except (StaleAttempt, RunNotFound) as lost:
            log.warning("run %s: its outcome is discarded: %s", run_id, lost)
