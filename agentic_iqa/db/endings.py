"""End many one-step runs in one transaction: a chunk of a metric job's items, written together.

A metric job's run has one step (its tools), begun from its claim with no record yet
(:attr:`agentic_iqa.runtime.service.Begun.recorded`).  Written one at a time, each such run
costs a transaction of ten small statements (its step, its state, its end, its tool logs, its
item, its job's counts); here a chunk of them costs one transaction of a handful of statements
in all, each executed once for the whole chunk:

* the steps, inserted as they ended (succeeded), ``ON CONFLICT DO NOTHING RETURNING``: a step
  someone else recorded meanwhile (a take-over after a lost lease) makes that run's outcome
  stale, and nothing else of it is written, as a fenced attempt's would not be;
* the runs' states and ends, one UPDATE by key executed for every run;
* their tool logs, keyed so that none is stored twice;
* their items closed as done and the job's counts moved by as many
  (:func:`.items.close_done_items`).

Only what is the same for the whole chunk is done here; a run that ends otherwise (failed, a
cancelled job, a model that could not see, replans) is left to the one-at-a-time writers, which
say why in its item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from ..redact import redact
from ..state import AgenticIQAState, ExecutorOutput, state_to_json
from .engine import changed_rows
from .items import close_done_items
from .jobs import job_cancelled
from .models import Run, StepRecord, ToolLog, UtcDateTime, utc_now
from .queries import dialect_insert, insert_missing
from .runs import lease_deadline
from .steps import update_json

__all__ = ["RunEnding", "end_runs", "ending_of", "ends_alone", "hold_leases", "recorded_steps"]

_RUNS = Run.__table__
_STEPS = StepRecord.__table__

#: The keys a tool log is stored under (as :func:`.steps.complete_step` stores them).
TOOL_LOG_KEYS = ("run_id", "iteration", "object_name", "distortion")

_END_RUN = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("b_run"))
    .values(
        status="succeeded",
        started_at=func.coalesce(_RUNS.c.started_at, bindparam("b_start", type_=UtcDateTime())),
        state_json=bindparam("b_state"),
        iteration_count=bindparam("b_iterations"),
        final_answer=None,
        quality_score=None,
        unread=None,
        error=None,
        finished_at=bindparam("b_now", type_=UtcDateTime()),
        lease_until=None,
    )
)


@dataclass(frozen=True)
class RunEnding:
    """A metric run whose one step succeeded, as it is to be written: its step's record, its
    final state, its tool logs (rows of ``tool_logs``), already redacted."""

    run_id: str
    job_id: str
    step: str
    iteration: int
    started_at: datetime
    output_json: str
    state_json: str
    iteration_count: int
    worker: str | None = None
    queue: str | None = None
    tool_logs: Sequence[dict[str, Any]] = field(default_factory=tuple)


def ends_alone(state: AgenticIQAState) -> bool:
    """Tell whether a run that ends with ``state`` must be written one at a time: only a metric
    run whose tools ran with no error, with no answer to read and no replans, ends in a chunk."""
    return (
        not state.get("metric_tools")
        or bool(state.get("error"))
        or state.get("summarizer_result") is not None
        or bool(state.get("replan_history"))
    )


def ending_of(
    run_id: str,
    job_id: str,
    step: str,
    iteration: int,
    *,
    started_at: datetime,
    state: AgenticIQAState,
    update: Mapping[str, Any],
    worker: str | None = None,
    queue: str | None = None,
) -> RunEnding:
    """Return how the run's one step, begun at ``started_at``, is written: ``update`` its
    outcome and ``state`` the run's state with it merged, both redacted as
    :func:`.steps.complete_step` stores them."""
    evidence = update.get("executor_evidence")
    logs = ExecutorOutput.model_validate(evidence).tool_logs if evidence is not None else []
    return RunEnding(
        run_id=run_id,
        job_id=job_id,
        step=step,
        iteration=iteration,
        started_at=started_at,
        output_json=redact(update_json(update)),
        state_json=redact(state_to_json(state)),
        iteration_count=state.get("iteration_count", 0),
        worker=worker,
        queue=queue,
        tool_logs=[
            ToolLog.columns_from(entry, run_id=run_id, iteration=iteration) for entry in logs
        ],
    )


def end_runs(session: Session, endings: Sequence[RunEnding]) -> tuple[list[str], list[str]]:
    """Write ``endings`` in the caller's transaction; return the runs left out: those whose step
    someone else recorded meanwhile (stale: nothing of them written) and those of a cancelled
    job (for the one-at-a-time writers to end as cancelled)."""
    stale: list[str] = []
    cancelled: list[str] = []
    by_job: dict[str, list[RunEnding]] = {}
    for ending in endings:
        by_job.setdefault(ending.job_id, []).append(ending)
    for job_id, ones in by_job.items():
        if job_cancelled(session, job_id):
            cancelled.extend(ending.run_id for ending in ones)
            continue
        recorded = _insert_steps(session, ones)
        written = [ending for ending in ones if ending.run_id in recorded]
        stale.extend(ending.run_id for ending in ones if ending.run_id not in recorded)
        if not written:
            continue
        now = utc_now()
        session.execute(
            _END_RUN,
            [
                {
                    "b_run": ending.run_id,
                    "b_start": ending.started_at,
                    "b_state": ending.state_json,
                    "b_iterations": ending.iteration_count,
                    "b_now": now,
                }
                for ending in written
            ],
        )
        insert_missing(
            session, ToolLog, TOOL_LOG_KEYS, [row for ending in written for row in ending.tool_logs]
        )
        close_done_items(session, job_id=job_id, run_ids=[ending.run_id for ending in written])
    return stale, cancelled


def _insert_steps(session: Session, endings: Sequence[RunEnding]) -> set[str]:
    """Insert the endings' steps as succeeded; return the runs whose step was inserted (not
    recorded by anyone before)."""
    statement = (
        dialect_insert(session, _STEPS)
        .on_conflict_do_nothing(index_elements=["run_id", "step", "iteration"])
        .returning(_STEPS.c.run_id)
    )
    now = utc_now()
    inserted = session.execute(
        statement,
        [
            {
                "run_id": ending.run_id,
                "step": ending.step,
                "iteration": ending.iteration,
                "status": "succeeded",
                "attempts": 1,
                "worker": ending.worker,
                "queue": ending.queue,
                "started_at": ending.started_at,
                "finished_at": now,
                "output_json": ending.output_json,
                "lease_until": None,
            }
            for ending in endings
        ],
    )
    return set(inserted.scalars().all())


def recorded_steps(session: Session, run_ids: Sequence[str]) -> set[str]:
    """Return those of ``run_ids`` that have a step recorded (begun or ended) already."""
    if not run_ids:
        return set()
    return set(
        session.scalars(
            select(_STEPS.c.run_id).where(_STEPS.c.run_id.in_(list(run_ids))).distinct()
        )
    )


def hold_leases(session: Session, run_ids: Sequence[str], seconds: float) -> int:
    """Push the leases of those of ``run_ids`` that have not ended ``seconds`` ahead (a chunk's
    runs, walked one after the other on a worker); return how many moved."""
    if not run_ids:
        return 0
    return changed_rows(
        session.execute(
            update(_RUNS)
            .where(_RUNS.c.id.in_(list(run_ids)), _RUNS.c.status.in_(("pending", "running")))
            .values(lease_until=lease_deadline(seconds))
        )
    )
