"""Write and read a run: created, its context read before each step, its lease moved, ended;
found by id or prefix, listed, described whole.

Every function takes an open :class:`~sqlalchemy.orm.Session` and leaves the commit to the
caller (:func:`~agentic_iqa.db.engine.session_scope`), so a task's bookkeeping and its result
land in one transaction.  A run's steps, tool calls and replans are written by :mod:`.steps`;
its VLM calls by :mod:`.vlm_calls`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from ..evidence import object_label
from ..redact import redact
from ..reports.unread import CANNOT_SEE, result_unread
from ..runconfig import RunConfig
from ..state import (
    DEFAULT_MAX_REPLAN_ITERATIONS,
    AgenticIQAState,
    initial_state,
    merge_state,
    state_from_json,
    state_to_json,
)
from .engine import changed_rows
from .items import close_item
from .models import (
    Job,
    JobItem,
    ReplanRow,
    Run,
    StepRecord,
    ToolLog,
    new_run_id,
    utc_now,
)
from .queries import AmbiguousId, ids_by_prefix, iso
from .vlm_calls import vlm_usage

_RUNS = Run.__table__
_JOBS = Job.__table__
_ITEMS = JobItem.__table__


class RunNotFound(KeyError):
    """No run with this id (a task for a deleted run, or an id from another database)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id

    def __str__(self) -> str:
        return f"no run with id {self.run_id!r} in the database"


def get_run(session: Session, run_id: str) -> Run:
    """Return the run, or raise :class:`RunNotFound`."""
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(run_id)
    return run


def load_state(session: Session, run_id: str) -> AgenticIQAState:
    """Return the run's latest state, as the pipeline's models."""
    return state_from_json(get_run(session, run_id).state_json)


def resolve_run_id(session: Session, reference: str) -> str:
    """Return the run a full id or a unique prefix of one means (:class:`RunNotFound`,
    :class:`AmbiguousId`)."""
    matches = ids_by_prefix(session, Run.id, reference.strip())
    if not matches:
        raise RunNotFound(reference)
    if len(matches) > 1:
        raise AmbiguousId("run", reference, matches)
    return matches[0]


def lease_deadline(seconds: float | None) -> datetime | None:
    """When a lease of ``seconds`` taken now runs out (None: not supervised)."""
    return None if seconds is None else utc_now() + timedelta(seconds=seconds)


def create_run(
    session: Session,
    *,
    query: str,
    image_path: str,
    reference_path: str | None = None,
    max_replan_iterations: int = DEFAULT_MAX_REPLAN_ITERATIONS,
    backend: str | None = None,
    job_id: str | None = None,
    lease_seconds: float | None = None,
    metric_tools: Sequence[str] | None = None,
    mode: Literal["agent", "vlm"] = "agent",
    config_json: str | None = None,
) -> str:
    """Create a 'pending' run with its initial state; returns its id.

    With ``lease_seconds`` the run is handed to workers and supervised from now on: if nothing
    happens to it within the lease (the message was lost), it is re-sent.  ``metric_tools``:
    a metric job's run, which only runs these tools (no plan, no VLM).  ``mode="vlm"``: the
    VLM answers alone (no plan, no tools).  ``config_json``: what shapes a run of no job
    (:class:`~agentic_iqa.runconfig.RunConfig`), as a job's configuration shapes its runs.
    """
    state = initial_state(
        query,
        image_path,
        reference_path,
        max_replan_iterations=max_replan_iterations,
        metric_tools=metric_tools,
        mode=mode,
    )
    run = Run(
        query=query,
        image_path=image_path,
        reference_path=reference_path,
        status="pending",
        state_json=state_to_json(state),
        iteration_count=0,
        max_replan_iterations=max_replan_iterations,
        backend=backend,
        job_id=job_id,
        created_at=utc_now(),
        lease_until=lease_deadline(lease_seconds),
        config_json=config_json,
    )
    session.add(run)
    session.flush()
    return run.id


def create_runs(
    session: Session,
    inputs: Sequence[tuple[str, str, str | None]],
    *,
    max_replan_iterations: int,
    job_id: str,
    lease_seconds: float | None = None,
    metric_tools: Sequence[str] | None = None,
    mode: Literal["agent", "vlm"] = "agent",
) -> list[tuple[str, AgenticIQAState]]:
    """Create the runs (as :func:`create_run`) for a window of a job's items, (query, image,
    reference) each: one INSERT for them all; returns their ids and initial states, in order."""
    lease_until = lease_deadline(lease_seconds)
    rows: list[dict[str, Any]] = []
    states: list[AgenticIQAState] = []
    for query, image_path, reference_path in inputs:
        state = initial_state(
            query,
            image_path,
            reference_path,
            max_replan_iterations=max_replan_iterations,
            metric_tools=metric_tools,
            mode=mode,
        )
        states.append(state)
        rows.append(
            {
                "id": new_run_id(),
                "query": query,
                "image_path": image_path,
                "reference_path": reference_path,
                "status": "pending",
                "state_json": state_to_json(state),
                "iteration_count": 0,
                "max_replan_iterations": max_replan_iterations,
                "job_id": job_id,
                "created_at": utc_now(),
                "lease_until": lease_until,
            }
        )
    if rows:
        session.execute(insert(_RUNS), rows)
    return [(row["id"], state) for row, state in zip(rows, states, strict=True)]


@dataclass(frozen=True)
class RunContext:
    """What a step needs of its run before it begins, read in one statement."""

    status: str
    job_id: str | None
    state: AgenticIQAState
    #: False when the run, or the job it belongs to, was started with ``--no-vlm-cache``.
    vlm_cache: bool
    #: The configuration of the run's job (None: no job, or a job stored before it was kept).
    config: RunConfig | None = None
    #: The digests its item's image and reference had at submit, by location: what is read
    #: must still be that (an object replaced since fails the item, not scored).
    digests: Mapping[str, str] = dataclass_field(default_factory=dict)


#: Every step of every run begins with this read: a Core statement built once (the ORM's
#: identity map and attribute loading cost more than the SQL here).
_RUN_CONTEXT = (
    select(
        _RUNS.c.status,
        _RUNS.c.job_id,
        _RUNS.c.state_json,
        _RUNS.c.vlm_cache,
        _JOBS.c.vlm_cache.label("job_vlm_cache"),
        # A job's runs run as their job says; a run of no job (``assess --distributed``) as
        # it says itself.
        func.coalesce(_JOBS.c.config_json, _RUNS.c.config_json).label("config_json"),
        _ITEMS.c.image,
        _ITEMS.c.image_digest,
        _ITEMS.c.reference,
        _ITEMS.c.reference_digest,
    )
    .select_from(
        _RUNS.outerjoin(_JOBS, _JOBS.c.id == _RUNS.c.job_id).outerjoin(
            _ITEMS, _ITEMS.c.run_id == _RUNS.c.id
        )
    )
    .where(_RUNS.c.id == bindparam("b_run"))
)


def run_context(session: Session, run_id: str) -> RunContext:
    """Read the run's status, job, state and VLM-cache setting, or :class:`RunNotFound`."""
    row = session.execute(_RUN_CONTEXT, {"b_run": run_id}).first()
    if row is None:
        raise RunNotFound(run_id)
    digests = {
        location: digest
        for location, digest in (
            (row.image, row.image_digest),
            (row.reference, row.reference_digest),
        )
        if location and digest
    }
    return RunContext(
        row.status,
        row.job_id,
        state_from_json(row.state_json),
        bool(row.vlm_cache) and row.job_vlm_cache is not False,
        job_config(row.config_json),
        digests,
    )


@functools.lru_cache(maxsize=16)
def job_config(text: str | None) -> RunConfig | None:
    """Return a job's stored configuration (``jobs.config_json``), parsed once per process
    (every step reads it)."""
    return RunConfig.from_json(text) if text else None


def finish_run(
    session: Session, run_id: str, *, state: AgenticIQAState, state_saved: bool = False
) -> None:
    """Close the run with its final state: succeeded when the Summarizer answered, or, for a
    metric job's run (which has no Summarizer), when its tools ran without a run error.

    ``state_saved``: ``state`` is already the run's stored state (the caller just wrote or
    read it), so it is not serialised and written a second time.  ``runs.unread`` says why no
    answer was read (:func:`~agentic_iqa.reports.unread.result_unread`), and a done item whose
    model said it cannot see the image is counted on its job (:func:`~.items.close_item`)."""
    result = state.get("summarizer_result")
    metric_done = bool(state.get("metric_tools")) and not state.get("error")
    values: dict[str, Any] = {
        "status": "succeeded" if result is not None or metric_done else "failed",
        "final_answer": result.final_answer if result is not None else None,
        "quality_score": result.quality_score if result is not None else None,
        "unread": result_unread(result),
        "error": redact(state.get("error")),
        "iteration_count": state.get("iteration_count", 0),
        "finished_at": utc_now(),
        "lease_until": None,
    }
    if not state_saved:
        values["state_json"] = redact(state_to_json(state))
    _end_run(session, run_id, values)


def _end_run(session: Session, run_id: str, values: dict[str, Any]) -> None:
    """Write a run's end (one UPDATE by key, no read of the run first) and close its job's
    item (:func:`~.items.close_item`), in the caller's transaction."""
    session.flush()  # an ORM caller's changes to the run come before these
    ended = session.execute(
        update(_RUNS).where(_RUNS.c.id == run_id).values(values).returning(_RUNS.c.job_id)
    ).first()
    if ended is None:
        raise RunNotFound(run_id)
    _expire_run(session, run_id)
    if ended.job_id is not None:
        close_item(
            session,
            run_id=run_id,
            job_id=ended.job_id,
            succeeded=values["status"] == "succeeded",
            error=values.get("error"),
            cannot_see=values.get("unread") == CANNOT_SEE,
        )


def _expire_run(session: Session, run_id: str) -> None:
    """Expire the Run this session holds, which no longer says what the database does: it is
    read again when used (callers that loaded it, such as a fenced step's, see the run's end)."""
    run = session.identity_map.get(session.identity_key(Run, run_id))
    if run is not None:
        session.expire(run)


def fail_run(session: Session, run_id: str, *, error: str) -> None:
    """Close the run as failed (a step gave up for good)."""
    state_json = session.scalar(select(_RUNS.c.state_json).where(_RUNS.c.id == run_id))
    if state_json is None:
        raise RunNotFound(run_id)
    values: dict[str, Any] = {
        "status": "failed",
        "error": redact(error),
        "finished_at": utc_now(),
        "lease_until": None,
    }
    state = state_from_json(state_json)
    if not state.get("error"):  # every reader of the state sees why, not only of the row
        values["state_json"] = redact(state_to_json(merge_state(state, {"error": error})))
    _end_run(session, run_id, values)


def extend_lease(
    session: Session,
    run_id: str,
    seconds: float,
    *,
    step: tuple[str, int] | tuple[str, int, int] | None = None,
) -> bool:
    """Push the run's lease (and a running step's) ``seconds`` ahead; False if it has ended.

    Called when a run is dispatched, by a running step's heartbeat, and before a delayed retry.
    A heartbeat names its attempt (``step=(name, iteration, attempt)``): a stale attempt (its
    step taken over) moves nothing, neither the step's lease nor the run's.
    """
    deadline = lease_deadline(seconds)
    if step is not None:
        name, iteration, *attempt = step
        fenced = update(StepRecord).where(
            StepRecord.run_id == run_id,
            StepRecord.step == name,
            StepRecord.iteration == iteration,
            StepRecord.status == "running",
        )
        if attempt:
            fenced = fenced.where(StepRecord.attempts == attempt[0])
        if not changed_rows(session.execute(fenced.values(lease_until=deadline))) and attempt:
            return False
    moved = changed_rows(
        session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status.in_(("pending", "running")))
            .values(lease_until=deadline)
        )
    )
    return bool(moved)


def claim_stalled(session: Session, lease_seconds: float, limit: int = 500) -> list[str]:
    """Claim the runs whose lease has passed, re-leased now so that one supervisor re-sends each.

    Several supervisors may call this at once: PostgreSQL skips rows another one has locked,
    SQLite's BEGIN IMMEDIATE lets one writer in at a time.
    """
    now = utc_now()
    runs = session.scalars(
        select(Run)
        .where(
            Run.status.in_(("pending", "running")),
            Run.lease_until.is_not(None),
            Run.lease_until < now,
        )
        .order_by(Run.lease_until)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    deadline = lease_deadline(lease_seconds)
    for run in runs:
        run.lease_until = deadline
        run.resends += 1
    session.flush()
    return [run.id for run in runs]


def set_run_vlm_cache(session: Session, run_id: str, enabled: bool) -> None:
    """Turn the response cache on or off for the run."""
    get_run(session, run_id).vlm_cache = enabled
    session.flush()


def _run_row(run: Run) -> dict[str, Any]:
    """Return a run's row as ``runs list`` and ``runs show`` print it."""
    return {
        "id": run.id,
        "created_at": iso(run.created_at),
        "status": run.status,
        "query": run.query,
        "image": run.image_path,
        "reference": run.reference_path,
        "final_answer": run.final_answer,
        "quality_score": run.quality_score,
        "job_id": run.job_id,
        "error": run.error,
    }


def recent_runs(
    session: Session, *, limit: int = 20, job_id: str | None = None
) -> list[dict[str, Any]]:
    """List the latest ``limit`` runs, newest first; with ``job_id``, the runs of that job's items
    in manifest order, each with its item's id and line."""
    if job_id is None:
        runs = session.scalars(
            select(Run).order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
        )
        return [_run_row(run) for run in runs]
    rows = session.execute(
        select(JobItem.item_key, JobItem.line, JobItem.status, Run)
        .join(Run, Run.id == JobItem.run_id)
        .where(JobItem.job_id == job_id)
        .order_by(JobItem.line, JobItem.id)
        .limit(limit)
    ).all()
    return [
        {**_run_row(run), "item_id": key, "line": line, "item_status": status}
        for key, line, status, run in rows
    ]


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    """Return the seconds from ``start`` to ``end``, or None when either is missing."""
    return (end - start).total_seconds() if start is not None and end is not None else None


def _logged_calls(steps: list[StepRecord]) -> dict[tuple[int, str, str], dict[str, Any]]:
    """Return the tool calls as the tool steps stored them, per (iteration, object, distortion): the
    fields the tool_logs table has no column for (model-load seconds, the region cropped, the
    objects a whole-image score was asked for)."""
    found: dict[tuple[int, str, str], dict[str, Any]] = {}
    for record in steps:
        if record.step != "tool_execution" or not record.output_json:
            continue
        try:
            evidence = json.loads(record.output_json).get("executor_evidence") or {}
        except (ValueError, AttributeError):
            continue
        for entry in evidence.get("tool_logs") or []:
            if isinstance(entry, dict):
                found[
                    (record.iteration, str(entry.get("object_name")), str(entry.get("distortion")))
                ] = entry
    return found


def _call_extras(entry: dict[str, Any]) -> dict[str, Any]:
    """Return a stored call's load time, and what it scored: ``region`` (None: the whole image) and
    ``requested_for`` (the objects a whole-image score was asked for)."""
    return {
        "load_time_s": entry.get("load_time"),
        "region": entry.get("region"),
        "requested_for": list(entry.get("requested_for") or []),
    }


def run_details(session: Session, run_id: str) -> dict[str, Any]:
    """Describe everything stored about a run: inputs, dates, plan, every step (worker, queue,
    times), every tool call (raw and normalized score), replans with reasons, answer and
    reasoning."""
    from ..vlm.usage import PriceTable, summarize

    run = get_run(session, run_id)
    state = state_from_json(run.state_json)
    steps = list(
        session.scalars(
            select(StepRecord)
            .where(StepRecord.run_id == run_id)
            .order_by(StepRecord.iteration, StepRecord.id)
        )
    )
    logs = session.scalars(
        select(ToolLog).where(ToolLog.run_id == run_id).order_by(ToolLog.iteration, ToolLog.id)
    )
    replans = session.scalars(
        select(ReplanRow).where(ReplanRow.run_id == run_id).order_by(ReplanRow.iteration)
    )
    item = session.execute(
        select(JobItem.item_key, JobItem.line, JobItem.status).where(JobItem.run_id == run_id)
    ).first()
    logged = _logged_calls(steps)
    plan = state.get("plan")
    evidence = state.get("executor_evidence")
    result = state.get("summarizer_result")
    return {
        **_run_row(run),
        "backend": run.backend,
        "iterations": run.iteration_count,
        "resends": run.resends,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration_s": _seconds(run.started_at or run.created_at, run.finished_at),
        "job_item": (
            {"item_id": item.item_key, "line": item.line, "status": item.status}
            if item is not None
            else None
        ),
        "metric_tools": state.get("metric_tools"),
        "plan": plan.model_dump(mode="json") if plan is not None else None,
        "distortions": (
            [
                {"object": object_label(key), **entry.model_dump(mode="json")}
                for key, entries in evidence.distortion_analysis.items()
                for entry in entries
            ]
            if evidence is not None and evidence.distortion_analysis
            else []
        ),
        "steps": [
            {
                "step": record.step,
                "iteration": record.iteration,
                "status": record.status,
                "worker": record.worker,
                "queue": record.queue,
                "attempts": record.attempts,
                "started_at": iso(record.started_at),
                "finished_at": iso(record.finished_at),
                "duration_s": _seconds(record.started_at, record.finished_at),
                "error": record.error,
            }
            for record in steps
        ],
        "tool_logs": [
            {
                "iteration": log.iteration,
                "object": object_label(log.object_name),
                "distortion": log.distortion,
                "tool": log.tool_name,
                "requested_tool": log.requested_tool,
                "raw_score": log.raw_score,
                "normalized_score": log.normalized_score,
                "execution_time_s": log.execution_time,
                **_call_extras(logged.get((log.iteration, log.object_name, log.distortion), {})),
                "fallback": log.fallback,
                "cached": log.cached,
                "error": log.error,
                "timestamp": iso(log.timestamp),
            }
            for log in logs
        ],
        "notes": list(evidence.notes) if evidence is not None else [],
        "replans": [
            {
                "iteration": row.iteration,
                "reason": row.reason,
                "created_at": iso(row.created_at),
                "failure": row.failure,
            }
            for row in replans
        ],
        "quality_reasoning": result.quality_reasoning if result is not None else None,
        "level_distribution": result.level_distribution if result is not None else None,
        "probability_source": result.probability_source if result is not None else None,
        "answer_unparseable": result.answer_unparseable if result is not None else None,
        "answered_in_follow_up": result.answered_in_follow_up if result is not None else None,
        "unparseable_reason": redact(result.unparseable_reason) if result is not None else None,
        "answer_notes": list(result.notes) if result is not None else [],
        "vlm_usage": summarize(vlm_usage(session, run_id=run_id), PriceTable.load()),
    }
