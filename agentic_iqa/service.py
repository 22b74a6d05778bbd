"""Runs that persist: the same steps as the in-process agent, with every step in the database.

This layer sits between the domain (pipeline.py: pure step decisions and step functions) and the
transports: the embedded runner calls it in a loop, the Celery tasks (workers/) call it once per
message.  Each step is idempotent, keyed by (run, step, iteration): a step already recorded as
succeeded is skipped, so a redelivered message neither duplicates rows nor recomputes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from .db import jobs, repository
from .db.engine import session_scope
from .pipeline import Agents, next_step, run_step
from .state import AgenticIQAState, merge_state
from .vlm.base import TransientVLMError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NextStep:
    step: str
    iteration: int


def create_run(engine: Engine, query: str, image_path: str, reference_path: str | None = None,
               *, max_replan_iterations: int = 2, backend: str | None = None,
               job_id: str | None = None) -> str:
    with session_scope(engine) as session:
        return repository.create_run(
            session, query=query, image_path=image_path, reference_path=reference_path,
            max_replan_iterations=max_replan_iterations, backend=backend, job_id=job_id,
        )


def load(engine: Engine, run_id: str) -> AgenticIQAState:
    with session_scope(engine) as session:
        return repository.load_state(session, run_id)


def advance(engine: Engine, run_id: str) -> NextStep | None:
    """The step to run next for ``run_id``; when there is none, the run is closed."""
    with session_scope(engine) as session:
        run = repository.get_run(session, run_id)
        if run.status in {"succeeded", "failed"}:
            return None
        if run.job_id is not None and jobs.get_job(session, run.job_id).status == "cancelled":
            repository.fail_run(session, run_id, error="cancelled with its job")
            return None
        state = repository.load_state(session, run_id)
        step = next_step(state)
        if step is None:
            repository.finish_run(session, run_id, state=state)
            return None
        return NextStep(step, state.get("iteration_count", 0))


def execute_step(engine: Engine, agents: Agents, run_id: str, step: str, iteration: int, *,
                 worker: str | None = None, queue: str | None = None) -> bool:
    """Run one step of one run and persist it; False when there was nothing to do.

    A :class:`TransientVLMError` is re-raised after the attempt is recorded, for the caller to
    retry; any other error fails the step and the run, with the reason.
    """
    with session_scope(engine) as session:
        state = repository.load_state(session, run_id)
        if state.get("iteration_count", 0) != iteration or next_step(state) != step:
            log.info("run %s: %s#%d is stale or done, skipping", run_id, step, iteration)
            return False
        if repository.begin_step(session, run_id, step, iteration, worker=worker,
                                 queue=queue) is None:
            return False
    started = time.perf_counter()
    try:
        update = run_step(step, state, agents)
    except TransientVLMError as exc:
        with session_scope(engine) as session:
            repository.fail_step(session, run_id, step, iteration, error=f"transient: {exc}")
        raise
    except Exception as exc:  # a step that cannot finish ends the run, with the reason
        log.exception("run %s: %s#%d failed", run_id, step, iteration)
        reason = f"{step} failed: {type(exc).__name__}: {exc}"
        with session_scope(engine) as session:
            repository.fail_step(session, run_id, step, iteration, error=reason)
            repository.fail_run(session, run_id, error=reason)
        return True
    key = step if step == "replan" else f"{step}#{iteration}"
    update = {**update, "step_seconds": {**state.get("step_seconds", {}),
                                         key: time.perf_counter() - started}}
    new_state = merge_state(state, update)
    with session_scope(engine) as session:
        repository.complete_step(session, run_id, step, iteration, state=new_state,
                                 update=update)
    return True


def fail(engine: Engine, run_id: str, step: str, iteration: int, reason: str) -> None:
    """Give up on a run (e.g. transient errors outlasted every retry)."""
    with session_scope(engine) as session:
        repository.fail_step(session, run_id, step, iteration, error=reason)
        repository.fail_run(session, run_id, error=reason)


def run_embedded(engine: Engine, agents: Agents, run_id: str) -> AgenticIQAState:
    """Walk a stored run to its end in this process (the embedded default: no broker)."""
    while (upcoming := advance(engine, run_id)) is not None:
        try:
            execute_step(engine, agents, run_id, upcoming.step, upcoming.iteration,
                         worker="embedded", queue="in-process")
        except TransientVLMError as exc:
            fail(engine, run_id, upcoming.step, upcoming.iteration,
                 f"{upcoming.step} failed: {exc}")
    return load(engine, run_id)
