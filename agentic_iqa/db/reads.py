"""Reading what the pipeline stored: runs, steps, tool calls, replans, VLM usage, jobs.

Every function takes an open session (a :func:`~agentic_iqa.db.engine.read_scope` for displays
and polls, which never holds the write lock) and changes nothing.  Writes are in
:mod:`.steps` (a run's step lifecycle) and :mod:`.jobs` (dataset jobs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Row, bindparam, case, func, or_, select, text
from sqlalchemy.orm import Session

from ..redact import redact
from .models import (
    ITEM_COUNTERS,
    ITEM_STATUSES,
    BatchRequest,
    Job,
    JobItem,
    ReplanRow,
    Run,
    StepRecord,
    ToolLog,
    UtcDateTime,
    VlmBatch,
    VlmCall,
    utc_now,
)

if TYPE_CHECKING:
    import numpy as np

    from ..jobs.columns import JobColumns
    from ..jobs.spec import JobSpec
    from ..state import AgenticIQAState
    from ..vlm.usage import ModelUsage, PriceTable

#: Questions a user asks of the database, as SQL that runs unchanged on SQLite and PostgreSQL.
#: Parameters (``:since``) are bound by :func:`run_example_query`, or by your SQL client.
EXAMPLE_QUERIES: dict[str, str] = {
    "runs_where_brisque_fell_back": """
        SELECT r.id AS run_id, r.image_path, t.iteration, t.object_name, t.distortion,
               t.tool_name AS used_instead, t.error
        FROM runs AS r
        JOIN tool_logs AS t ON t.run_id = r.id
        WHERE t.requested_tool = 'BRISQUE' AND t.fallback
        ORDER BY r.created_at, r.id, t.iteration, t.id
    """,
    "mean_normalized_score_per_tool": """
        SELECT tool_name, COUNT(*) AS calls, COUNT(normalized_score) AS scored,
               AVG(normalized_score) AS mean_normalized_score
        FROM tool_logs
        GROUP BY tool_name
        ORDER BY tool_name
    """,
    "failed_runs_since": """
        SELECT id AS run_id, query, image_path, error, finished_at
        FROM runs
        WHERE status = 'failed' AND finished_at >= :since
        ORDER BY finished_at DESC, id
    """,
}


class RunNotFound(KeyError):
    """No run with this id (a task for a deleted run, or an id from another database)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id

    def __str__(self) -> str:
        return f"no run with id {self.run_id!r} in the database"


class JobNotFound(KeyError):
    """No job with this id (or unique prefix) in the database."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no job with id {self.job_id!r} in the database"


def get_job(session: Session, job_id: str, *, lock: bool = False) -> Job:
    """The job; ``lock`` holds its row until commit (PostgreSQL), so feeders take turns."""
    job = session.get(Job, job_id, with_for_update=lock or None, populate_existing=lock)
    if job is None:
        raise JobNotFound(job_id)
    return job


def latest_job(session: Session) -> Job | None:
    return session.scalars(select(Job).order_by(Job.created_at.desc()).limit(1)).first()


def get_run(session: Session, run_id: str) -> Run:
    """The run, or :class:`RunNotFound`."""
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(run_id)
    return run


def load_state(session: Session, run_id: str) -> AgenticIQAState:
    from ..state import state_from_json

    """The run's latest state, as the pipeline's models."""
    return state_from_json(get_run(session, run_id).state_json)


def step_status(session: Session, run_id: str, step: str, iteration: int) -> str | None:
    """'running', 'succeeded' or 'failed'; None when the step never began."""
    return session.scalar(
        select(StepRecord.status).where(
            StepRecord.run_id == run_id, StepRecord.step == step, StepRecord.iteration == iteration
        )
    )


def current_step(session: Session, run_id: str) -> str | None:
    """The step the run is busy with ("tool_execution#0"), for progress displays."""
    record = session.scalars(
        select(StepRecord)
        .where(StepRecord.run_id == run_id, StepRecord.status == "running")
        .order_by(StepRecord.id.desc())
        .limit(1)
    ).first()
    return None if record is None else f"{record.step}#{record.iteration}"


def steps_for(session: Session, run_id: str) -> list[StepRecord]:
    """Every step record of the run, in the order the steps first began."""
    return list(
        session.scalars(
            select(StepRecord)
            .where(StepRecord.run_id == run_id)
            .order_by(StepRecord.iteration, StepRecord.id)
        )
    )


def tool_logs_for(session: Session, run_id: str) -> list[ToolLog]:
    """Every tool call of the run, in order."""
    return list(
        session.scalars(
            select(ToolLog).where(ToolLog.run_id == run_id).order_by(ToolLog.iteration, ToolLog.id)
        )
    )


def replans_for(session: Session, run_id: str) -> list[ReplanRow]:
    """Every replanning round of the run, in order."""
    return list(
        session.scalars(
            select(ReplanRow).where(ReplanRow.run_id == run_id).order_by(ReplanRow.iteration)
        )
    )


def run_example_query(session: Session, name: str, **params: Any) -> list[Row[Any]]:
    """Run one of :data:`EXAMPLE_QUERIES`; a ``since`` datetime is bound as UTC on both dialects.

    (SQLite stores timestamps as text; an unbound Python datetime would be compared as a
    differently formatted string.)
    """
    statement = text(EXAMPLE_QUERIES[name])
    if isinstance(params.get("since"), datetime):
        statement = statement.bindparams(bindparam("since", type_=UtcDateTime()))
    return list(session.execute(statement, params))


def _real(column: Any) -> Any:
    """``column`` on real calls, 0 on cache hits (which cost nothing)."""
    return func.coalesce(func.sum(case((VlmCall.cache_hit, 0), else_=column)), 0)


def vlm_usage(
    session: Session, *, run_id: str | None = None, job_id: str | None = None
) -> list[ModelUsage]:
    """Calls, cache hits and tokens per (backend, model), for a run or every run of a job;
    calls answered by a provider batch apart (they cost the batch price)."""
    is_batch = VlmCall.batch.is_not(None)
    statement = (
        select(
            VlmCall.backend,
            VlmCall.model,
            VlmCall.endpoint,
            is_batch,
            _real(1),
            func.coalesce(func.sum(case((VlmCall.cache_hit, 1), else_=0)), 0),
            _real(VlmCall.input_tokens),
            _real(VlmCall.output_tokens),
            _real(VlmCall.cached_tokens),
            func.coalesce(
                func.sum(
                    case(
                        (VlmCall.cache_hit, 0),
                        ((VlmCall.input_tokens.is_(None)) | (VlmCall.output_tokens.is_(None)), 1),
                        else_=0,
                    )
                ),
                0,
            ),
        )
        .group_by(VlmCall.backend, VlmCall.model, VlmCall.endpoint, is_batch)
        .order_by(VlmCall.backend, VlmCall.model, VlmCall.endpoint, is_batch)
    )
    if run_id is not None:
        statement = statement.where(VlmCall.run_id == run_id)
    if job_id is not None:
        statement = statement.join(Run, Run.id == VlmCall.run_id).where(Run.job_id == job_id)
    from ..vlm.usage import ModelUsage

    return [
        ModelUsage(
            backend,
            model,
            int(calls),
            int(hits),
            int(inputs),
            int(outputs),
            int(cached),
            int(unmetered),
            endpoint=endpoint,
            batch=bool(batch),
        )
        for backend, model, endpoint, batch, calls, hits, inputs, outputs, cached, unmetered in (
            session.execute(statement).all()
        )
    ]


def vlm_steps(session: Session, run_id: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(real calls, cache hits) per (step, iteration) of a run: whether its answers came from
    the response cache is derived from the calls, not stored on the step."""
    rows = session.execute(
        select(
            VlmCall.step,
            VlmCall.iteration,
            _real(1),
            func.coalesce(func.sum(case((VlmCall.cache_hit, 1), else_=0)), 0),
        )
        .where(VlmCall.run_id == run_id)
        .group_by(VlmCall.step, VlmCall.iteration)
    ).all()
    return {
        (step, int(iteration)): (int(calls), int(hits)) for step, iteration, calls, hits in rows
    }


_ID_PREFIX = re.compile(r"^[0-9a-f-]{1,36}$")
#: How many matches an ambiguous prefix lists.
MAX_MATCHES = 10


class AmbiguousId(LookupError):
    """A short id that starts more than one job's (or run's) id."""

    def __init__(self, kind: str, prefix: str, matches: list[str]) -> None:
        super().__init__(prefix)
        self.kind, self.prefix, self.matches = kind, prefix, matches

    def __str__(self) -> str:
        more = "" if len(self.matches) <= MAX_MATCHES else " and more"
        listed = ", ".join(self.matches[:MAX_MATCHES])
        return (
            f"{self.kind} id {self.prefix!r} is ambiguous: it starts {listed}{more}; "
            "give more characters"
        )


class NoJobs(JobNotFound):
    """The latest job was asked for, and the database holds none."""

    def __init__(self) -> None:
        super().__init__("(latest)")

    def __str__(self) -> str:
        return "no job in the database yet: submit one with `agentic-iqa eval submit MANIFEST`"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start is not None and end is not None else None


def _by_prefix(session: Session, column: Any, reference: str) -> list[str]:
    """Ids equal to ``reference``, else the ids it is a prefix of (at most one more than
    :data:`MAX_MATCHES`, enough to tell "ambiguous" and list some)."""
    exact = session.scalars(select(column).where(column == reference)).first()
    if exact is not None:
        return [exact]
    prefix = reference.lower()
    if not _ID_PREFIX.match(prefix):
        return []
    return list(
        session.scalars(
            select(column).where(column.like(f"{prefix}%")).order_by(column).limit(MAX_MATCHES + 1)
        )
    )


def resolve_job_id(session: Session, reference: str | None) -> str:
    """The job a full id, a unique prefix of one (the 8 characters progress bars show), or
    None (the latest job) means; :class:`JobNotFound` or :class:`AmbiguousId` otherwise."""
    if reference is None:
        job = latest_job(session)
        if job is None:
            raise NoJobs()
        return job.id
    matches = _by_prefix(session, Job.id, reference.strip())
    if not matches:
        raise JobNotFound(reference)
    if len(matches) > 1:
        raise AmbiguousId("job", reference, matches)
    return matches[0]


def resolve_run_id(session: Session, reference: str) -> str:
    """The run a full id or a unique prefix of one means (:class:`RunNotFound`,
    :class:`AmbiguousId`)."""
    matches = _by_prefix(session, Run.id, reference.strip())
    if not matches:
        raise RunNotFound(reference)
    if len(matches) > 1:
        raise AmbiguousId("run", reference, matches)
    return matches[0]


def item_run_id(session: Session, job_id: str, item: str) -> str:
    """The run of a job's item, named by its id in the manifest, its line number or its
    image's file name (or path); a :class:`LookupError` says what matched instead."""
    named = [
        JobItem.item_key == item,
        JobItem.image == item,
        JobItem.image.endswith(f"/{item}", autoescape=True),
    ]
    if item.isdigit():
        named.append(JobItem.line == int(item))
    rows = session.execute(
        select(JobItem.item_key, JobItem.line, JobItem.image, JobItem.run_id)
        .where(JobItem.job_id == job_id, or_(*named))
        .order_by(JobItem.line)
        .limit(MAX_MATCHES + 1)
    ).all()
    exact = [row for row in rows if row.item_key == item]  # an id beats a line or a file name
    rows = exact or rows
    if not rows:
        raise LookupError(
            f"job {job_id[:8]} has no item {item!r} (an item id, a line number "
            "or an image file name)"
        )
    if len(rows) > 1:
        listed = ", ".join(f"{row.item_key} (line {row.line})" for row in rows[:MAX_MATCHES])
        raise LookupError(f"item {item!r} of job {job_id[:8]} is ambiguous: {listed}")
    row = rows[0]
    if row.run_id is None:
        raise LookupError(
            f"item {row.item_key} (line {row.line}) of job {job_id[:8]} has no "
            "run (a bad row, or not started yet)"
        )
    return row.run_id


def job_models(session: Session, job_id: str) -> list[tuple[str, str]]:
    """The (backend, model) pairs the job's runs asked, from the recorded VLM calls."""
    rows = session.execute(
        select(VlmCall.backend, VlmCall.model)
        .distinct()
        .join(Run, Run.id == VlmCall.run_id)
        .where(Run.job_id == job_id)
        .order_by(VlmCall.backend, VlmCall.model)
    ).all()
    return [(backend, model) for backend, model in rows]


def job_summary(session: Session, job_id: str) -> dict[str, Any]:
    """What a job is, for a report's header: id, name, dates, query, backend and model
    (:func:`job_about`), with how many items ask their own query and the seconds its steps
    were at work (:func:`busy_seconds`), which read its items and steps."""
    about = job_about(session, get_job(session, job_id))
    own_queries = int(
        session.scalar(
            select(func.count()).where(JobItem.job_id == job_id, JobItem.query.is_not(None))
        )
        or 0
    )
    return {
        **about,
        "items_with_own_query": own_queries,
        "busy_seconds": busy_seconds(session, job_id),
    }


def job_about(session: Session, job: Job) -> dict[str, Any]:
    """What a job is, from its own row (``eval list`` reads nothing else): id, name, dates,
    query, backend and model, tools, source, mode, group, spec.

    Backend and model are those the job was submitted with (a builtin role names the
    builtin's own model, whatever name was stored beside it), else (a job stored before
    configurations were kept) those the runs' VLM calls recorded; the builtin backend records
    no calls, so a job without any is reported as ``builtin`` (a metric job asks no VLM at
    all).
    """
    from ..runconfig import RunConfig

    config = RunConfig.from_json(job.config_json) if job.config_json else None
    spec = spec_of(job)
    models = [] if job.metric_tools or config is not None else job_models(session, job.id)
    if job.metric_tools:
        backend, model = "none (metric job)", ", ".join(job.metric_tools)
    elif config is not None:  # what the job was submitted with; what answered is beside it
        backend = ", ".join(dict.fromkeys(c.backend for c in config.roles.values()))
        model = ", ".join(dict.fromkeys(c.answering_model or "-" for c in config.roles.values()))
    elif models:
        backend = ", ".join(dict.fromkeys(backend for backend, _ in models))
        model = ", ".join(dict.fromkeys(model for _, model in models))
    else:
        backend, model = "builtin", "builtin (offline measurements; no VLM calls recorded)"
    return {
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "created_at": _iso(job.created_at),
        "finished_at": _iso(job.finished_at),
        "query": job.default_query,
        "backend": backend,
        "model": model,
        "tools": job.metric_tools,
        "manifest": job.manifest,
        "mode": job.mode,
        "dataset": json.loads(job.dataset_json) if job.dataset_json else None,
        "configuration": config.describe() if config is not None else None,
        "error": job.error,
        "group": spec.group,
        "spec": spec.describe(),
        "scored_against": spec.scored_against,
    }


def busy_seconds(session: Session, job_id: str) -> float | None:
    """Seconds in which at least one of the job's steps was at work: the union of its steps'
    own start-to-end intervals, so that a job interrupted for a day and resumed, or waiting
    for batches, is not charged the wait (its created-to-finished span would be); None when no
    step has ended."""
    spans = cast(
        "list[tuple[datetime, datetime]]",  # a step that ended had started
        session.execute(
            select(StepRecord.started_at, StepRecord.finished_at)
            .join(Run, Run.id == StepRecord.run_id)
            .where(Run.job_id == job_id, StepRecord.finished_at.is_not(None))
            .order_by(StepRecord.started_at)
        ).all(),
    )
    if not spans:
        return None
    total, start, end = 0.0, spans[0][0], spans[0][1]
    for begun, ended in spans[1:]:
        if begun > end:  # a gap: nothing of the job was at work
            total += (end - start).total_seconds()
            start, end = begun, ended
        else:
            end = max(end, ended)
    return total + (end - start).total_seconds()


def spec_of(job: Job) -> JobSpec:
    """The job's record: its stored spec, or one reconstructed from its columns (a job stored
    before 0012)."""
    from ..jobs.spec import JobSpec, reconstruct
    from ..runconfig import RunConfig

    if job.spec_json:
        spec = JobSpec.from_json(job.spec_json)
        return (
            spec
            if spec.group == job.job_group
            else spec.model_copy(update={"group": job.job_group})
        )
    return reconstruct(
        name=job.name,
        manifest=job.manifest,
        default_query=job.default_query,
        root=job.root,
        max_replan_iterations=job.max_replan_iterations,
        vlm_cache=job.vlm_cache,
        tools=job.metric_tools,
        mode=job.mode,
        dataset=json.loads(job.dataset_json) if job.dataset_json else None,
        config=RunConfig.from_json(job.config_json) if job.config_json else None,
    )


def job_ids(
    session: Session,
    *,
    group: str | None = None,
    status: str | None = None,
    limit: int | None = None,
) -> list[str]:
    """Jobs newest first (``eval list``, ``eval compare --group``): of one sweep, in one
    state."""
    statement = select(Job.id).order_by(Job.created_at.desc(), Job.id)
    if group is not None:
        statement = statement.where(Job.job_group == group)
    if status is not None:
        statement = statement.where(Job.status == status)
    if limit is not None:
        statement = statement.limit(limit)
    return list(session.scalars(statement))


def job_spec(session: Session, job_id: str) -> JobSpec:
    """The spec of the job with this id (:func:`spec_of`)."""
    return spec_of(get_job(session, job_id))


def _run_row(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "created_at": _iso(run.created_at),
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
    """The latest ``limit`` runs, newest first; with ``job_id``, the runs of that job's items
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


def _logged_calls(steps: list[StepRecord]) -> dict[tuple[int, str, str], dict[str, Any]]:
    """The tool calls as the tool steps stored them, per (iteration, object, distortion): the
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
    """A stored call's load time, and what it scored: ``region`` (None: the whole image) and
    ``requested_for`` (the objects a whole-image score was asked for)."""
    return {
        "load_time_s": entry.get("load_time"),
        "region": entry.get("region"),
        "requested_for": list(entry.get("requested_for") or []),
    }


def run_details(session: Session, run_id: str) -> dict[str, Any]:
    """Everything stored about a run: inputs, dates, plan, every step (worker, queue, times),
    every tool call (raw and normalized score), replans with reasons, answer and reasoning."""
    from ..state import state_from_json
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
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
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
                {"object": key, **entry.model_dump(mode="json")}
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
                "started_at": _iso(record.started_at),
                "finished_at": _iso(record.finished_at),
                "duration_s": _seconds(record.started_at, record.finished_at),
                "error": record.error,
            }
            for record in steps
        ],
        "tool_logs": [
            {
                "iteration": log.iteration,
                "object": log.object_name,
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
                "timestamp": _iso(log.timestamp),
            }
            for log in logs
        ],
        "notes": list(evidence.notes) if evidence is not None else [],
        "replans": [
            {
                "iteration": row.iteration,
                "reason": row.reason,
                "created_at": _iso(row.created_at),
                "failure": row.failure,
            }
            for row in replans
        ],
        "quality_reasoning": result.quality_reasoning if result is not None else None,
        "level_distribution": result.level_distribution if result is not None else None,
        "probability_source": result.probability_source if result is not None else None,
        "answer_unparseable": result.answer_unparseable if result is not None else None,
        "answer_notes": list(result.notes) if result is not None else [],
        "vlm_usage": summarize(vlm_usage(session, run_id=run_id), PriceTable.load()),
    }


# -- a job's progress and rows -------------------------------------------------------------------


def items_run(session: Session, job_id: str) -> int:
    """Items whose run has ended (done or failed after running): the divisor of cost per
    item. Bad rows never ran and cost nothing.  From the job's counts, less its failed items
    without a run (read among its failed ones alone)."""
    counted = counts(session, job_id)
    never_ran = int(session.scalar(_sql(session, "never_ran"), {"job": job_id}) or 0)
    return counted.get("done", 0) + counted.get("failed", 0) - never_ran


def vlm_summary(session: Session, job_id: str, prices: PriceTable | None = None) -> dict[str, Any]:
    """The job's VLM calls, cache hits, tokens, cost and cost per item (by SQL sums)."""
    from ..vlm.usage import PriceTable, summarize

    job = get_job(session, job_id)
    # A metric job asks no model: nothing to sum over its million runs.
    usage = [] if job.metric_tools else vlm_usage(session, job_id=job_id)
    unused = unused_batch_answers(session, job) if job.config_json else []
    summary = summarize(
        [*usage, *unused], prices or PriceTable.load(), items=items_run(session, job_id)
    )
    summary["unused_batch_answers"] = sum(entry.calls for entry in unused)
    return summary


def unused_batch_answers(session: Session, job: Job) -> list[ModelUsage]:
    """Answers the provider's batches brought (and billed) that no run of the job took: its
    runs ended first (the job was cancelled while a batch was open; a resume takes them over,
    and they are then counted as its calls).  Per model, at the batch price."""
    from ..runconfig import RunConfig
    from ..vlm.cache import response_from_json
    from ..vlm.settings import endpoint_host
    from ..vlm.usage import ModelUsage

    taken = (
        select(VlmCall.id)
        .where(
            VlmCall.run_id == BatchRequest.run_id,
            VlmCall.step == BatchRequest.step,
            VlmCall.iteration == BatchRequest.iteration,
            VlmCall.seq == BatchRequest.seq,
            VlmCall.batch.is_not(None),
        )
        .exists()
    )
    rows = session.execute(
        select(BatchRequest.response_json, VlmBatch.backend, VlmBatch.model, VlmBatch.role)
        .join(VlmBatch, VlmBatch.id == BatchRequest.batch_id)
        .where(BatchRequest.job_id == job.id, BatchRequest.status == "answered", ~taken)
    ).all()
    if not rows:
        return []
    assert job.config_json is not None  # a job with batches stores its configuration
    roles = RunConfig.from_json(job.config_json).roles
    sums: dict[tuple[str, str, str | None], list[int]] = {}
    for response_json, backend, model, role in rows:
        config = roles.get(role)
        usage = response_from_json(response_json).usage if response_json else None
        entry = sums.setdefault(
            (backend, model, endpoint_host(config) if config else None), [0, 0, 0, 0, 0]
        )
        entry[0] += 1
        if usage is None or usage.input_tokens is None or usage.output_tokens is None:
            entry[4] += 1
            continue
        entry[1] += usage.input_tokens
        entry[2] += usage.output_tokens
        entry[3] += usage.cached_tokens or 0
    return [
        ModelUsage(
            backend,
            model,
            calls,
            0,
            tokens_in,
            tokens_out,
            cached,
            unmetered,
            endpoint=endpoint,
            batch=True,
        )
        for (backend, model, endpoint), (calls, tokens_in, tokens_out, cached, unmetered) in sorted(
            sums.items(), key=lambda pair: tuple(map(str, pair[0]))
        )
    ]


def jobs_to_feed(session: Session) -> list[str]:
    """Running jobs that the workers feed and that still have items waiting."""
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "running", Job.dispatch == "workers")
            .where(
                select(JobItem.id)
                .where(JobItem.job_id == Job.id, JobItem.status == "pending")
                .exists()
            )
        )
    )


def jobs_to_settle(session: Session, *, since: datetime, limit: int = 5) -> list[str]:
    """Jobs the workers ran that ended since ``since`` with nothing in flight and no headline
    stored yet (:func:`agentic_iqa.runtime.lifecycle.job_ended` has not run for them)."""
    return list(
        session.scalars(
            select(Job.id)
            .where(
                Job.status.in_(("done", "cancelled")),
                Job.dispatch == "workers",
                Job.headline_json.is_(None),
                Job.items_queued == 0,
                Job.finished_at >= since,
            )
            .order_by(Job.finished_at)
            .limit(limit)
        )
    )


def stalled_count(session: Session, job_id: str) -> int:
    """Items in flight whose run's lease has passed: nothing has happened to them lately."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(JobItem)
            .join(Run, Run.id == JobItem.run_id)
            .where(
                JobItem.job_id == job_id,
                JobItem.status == "queued",
                Run.status.in_(("pending", "running")),
                Run.lease_until.is_not(None),
                Run.lease_until < utc_now(),
            )
        )
        or 0
    )


def failed_items(session: Session, job_id: str, limit: int = 50) -> list[JobItem]:
    """The job's failed items (the first ``limit``, in manifest order: bad rows that keep their
    own id are stored after the others), with their reasons."""
    return list(
        session.scalars(
            select(JobItem)
            .where(JobItem.job_id == job_id, JobItem.status == "failed")
            .order_by(JobItem.line, JobItem.id)
            .limit(limit)
        )
    )


def has_runs(session: Session, job_id: str) -> bool:
    """Whether the job has had a run: none means no process ever began one of its items
    (one row of an index, not a count of a million)."""
    return session.scalar(select(Run.id).where(Run.job_id == job_id).limit(1)) is not None


def live_leases(session: Session, job_id: str) -> int:
    """Runs of the job in flight whose lease is still running: someone is working on them."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Run)
            .where(
                Run.job_id == job_id,
                Run.status.in_(("pending", "running")),
                Run.lease_until.is_not(None),
                Run.lease_until >= utc_now(),
            )
        )
        or 0
    )


_JOBS = Job.__table__
_COUNTERS = select(*(_JOBS.c[column] for column in ITEM_COUNTERS.values())).where(
    _JOBS.c.id == bindparam("b_job")
)


def counts(session: Session, job_id: str) -> dict[str, int]:
    """The job's items by state (the states it has items in): the counts kept on its row as
    items move (:mod:`.items`), five numbers whatever its size; counted from the items only
    for a job whose counts are not known yet."""
    row = session.execute(_COUNTERS, {"b_job": job_id}).first()
    if row is None or any(count is None for count in row):
        return count_items(session, job_id)
    return {status: int(count) for status, count in zip(ITEM_STATUSES, row, strict=True) if count}


def count_items(session: Session, job_id: str) -> dict[str, int]:
    """The job's items by state, counted from the items (one pass over its index entries)."""
    rows = session.execute(
        select(JobItem.status, func.count())
        .where(JobItem.job_id == job_id)
        .group_by(JobItem.status)
    ).all()
    return {status: int(count) for status, count in rows}


def _question_type(meta_json: str | None) -> str | None:
    """The item's question type as its dataset or manifest gives it (Q-Bench's ``type``)."""
    if not meta_json:
        return None
    value = json.loads(meta_json).get("question_type")
    return str(value) if value not in (None, "") else None


# -- a job's items, a page at a time ---------------------------------------------------------------
#
# Every reader of a job's items walks them by id, a page at a time: ``job_id = ? AND id > ?
# ORDER BY id LIMIT n`` on the index ``ix_job_items_job_id_id`` (job_id, id), which serves the
# order, so a page costs its own rows on SQLite and PostgreSQL alike (with only (job_id,
# status) SQLite sorted the whole job for every page: quadratic).  The page's tool calls and
# answering models are read for the same id range.  No ORM object is built and no run's
# stored state is parsed where its columns say what is needed.
#
# On SQLite every table is named with the index it is read by (``INDEXED BY``): its planner
# trusts statistics taken when the table was small (``ANALYZE`` after a submit, before any run
# existed) and then scans ``runs`` once for every item of a page; PostgreSQL refreshes its own.

#: Items per page of a report's columns, and of ``eval export``.
PAGE = 5000
#: The index every page of a job's items is read from (:class:`~.models.JobItem`).
ITEMS_BY_ID = "ix_job_items_job_id_id"
#: The index a job's items in one state are found by.
ITEMS_BY_STATUS = "ix_job_items_job_id_status_id"
#: SQLite's names of the unique indexes the other rows of a page are found by.
_SQLITE_UNIQUE = {
    "runs": "sqlite_autoindex_runs_1",
    "tool_logs": "sqlite_autoindex_tool_logs_1",
    "vlm_calls": "sqlite_autoindex_vlm_calls_1",
    "item_keys": "sqlite_autoindex_job_items_1",
}


def _table(dialect: str, table: str, index: str) -> str:
    """``table``, read from ``index`` on SQLite (``INDEXED BY``)."""
    return f"{table} INDEXED BY {index}" if dialect == "sqlite" else table


@cache
def _statements(dialect: str) -> dict[str, Any]:
    """The statements that read a job's items a page at a time, for one dialect: ``:job``, the
    page after ``:after`` (its ``:limit`` items, or up to ``:last``)."""
    items = _table(dialect, "job_items", ITEMS_BY_ID)
    with_runs = (
        f"FROM {items} LEFT OUTER JOIN {_table(dialect, 'runs', _SQLITE_UNIQUE['runs'])}"
        " ON runs.id = job_items.run_id"
    )
    page = (
        "WHERE job_items.job_id = :job AND job_items.id > :after ORDER BY job_items.id LIMIT :limit"
    )
    in_range = "job_items.job_id = :job AND job_items.id > :after AND job_items.id <= :last"
    failed = "job_items.status = 'failed'"
    asked = "job_items.answer_truth IS NOT NULL"
    export = (
        "SELECT job_items.id, job_items.item_key, job_items.line, job_items.image, "
        'job_items.reference, job_items."query", job_items.status, job_items.error, '
        "job_items.run_id, job_items.mos, job_items.answer_truth, job_items.meta_json, "
        "runs.id AS ran, runs.final_answer, runs.quality_score, {state} AS run_state "
        f"{with_runs} {page}"
    )
    report = (
        "SELECT job_items.id, job_items.status, job_items.mos, job_items.answer_truth, "
        f'job_items."query", CASE WHEN {asked} OR job_items.mos IS NOT NULL THEN '
        f"job_items.meta_json END, CASE WHEN {failed} THEN job_items.error END, {{key}}, "
        "{image}, job_items.run_id, runs.quality_score, "
        f"CASE WHEN {asked} THEN runs.final_answer END {with_runs} {page}"
    )
    keys = 'job_items.item_key COLLATE "C"' if dialect == "postgresql" else "job_items.item_key"
    return {
        "export": text(export.format(state="runs.state_json")),
        "export_metric": text(export.format(state="NULL")),
        "report": text(
            report.format(key=f"CASE WHEN {failed} THEN job_items.item_key END", image="NULL")
        ),
        # An item's image groups its items in a comparison only where it was scored or
        # answered: a pending one's is never read.
        "report_identities": text(
            report.format(
                key="job_items.item_key",
                image="CASE WHEN job_items.run_id IS NOT NULL OR job_items.status IN ('done', "
                "'failed') THEN job_items.image END",
            )
        ),
        "report_keys": text(report.format(key="job_items.item_key", image="NULL")),
        "logs": text(
            "SELECT job_items.id, tool_logs.tool_name, tool_logs.raw_score, "
            "tool_logs.normalized_score, tool_logs.fallback, tool_logs.object_name, "
            f"tool_logs.distortion FROM {items} JOIN "
            f"{_table(dialect, 'tool_logs', _SQLITE_UNIQUE['tool_logs'])} "
            f"ON tool_logs.run_id = job_items.run_id WHERE {in_range}"
        ),
        "answerers": text(
            "SELECT DISTINCT job_items.id, vlm_calls.backend, vlm_calls.model FROM "
            f"{items} JOIN {_table(dialect, 'vlm_calls', _SQLITE_UNIQUE['vlm_calls'])} "
            f"ON vlm_calls.run_id = job_items.run_id WHERE {in_range} "
            "AND vlm_calls.error IS NULL"
        ),
        "ran_images": text(
            f"SELECT job_items.id, job_items.image, job_items.image_digest FROM {items} "
            "WHERE job_items.job_id = :job AND job_items.id > :after "
            "AND job_items.status IN ('done', 'failed') AND job_items.image IS NOT NULL "
            "ORDER BY job_items.id LIMIT :limit"
        ),
        # Its failed items that never ran, among its failed ones (SQLite, left to itself, walks
        # every item without a run of every job by ``ix_job_items_run_id``: a second a
        # million).
        "never_ran": text(
            f"SELECT count(*) FROM {_table(dialect, 'job_items', ITEMS_BY_STATUS)} "
            "WHERE job_items.job_id = :job AND job_items.status = 'failed' "
            "AND job_items.run_id IS NULL"
        ),
        # SQLite's BINARY collation and PostgreSQL's "C" compare UTF-8 bytewise: code points,
        # the order Python sorts text in.
        "key_order": text(
            f"SELECT job_items.id FROM {_table(dialect, 'job_items', _SQLITE_UNIQUE['item_keys'])}"
            f" WHERE job_items.job_id = :job ORDER BY {keys}"
        ),
    }


def _sql(session: Session, name: str) -> Any:
    return _statements(session.get_bind().dialect.name)[name]


def _first_id(session: Session, job_id: str) -> int:
    """Below every item id of the job (the walk starts after it)."""
    return int(session.scalar(select(Job.items_after).where(Job.id == job_id)) or 0)


def _page_logs(session: Session, job_id: str, after: int, last: int) -> list[Row[Any]]:
    """The tool calls of a page's items (its id range), each item's in the order of the table's
    key (iteration, object, distortion) as SQLite reads them, unsorted as the export always read
    them: an export's and a report's per-tool means are summed in that order, one statement
    for both, so the same means."""
    return list(
        session.execute(
            _sql(session, "logs"),  # all at once, not fetched one by one
            {"job": job_id, "after": after, "last": last},
        ).all()
    )


def _page_answerers(
    session: Session, job_id: str, after: int, last: int, builtin: str | None
) -> dict[int, str]:
    """Who answered each item of a page that ran: the recorded VLM calls' backend/model and,
    where the builtin answers a role (it records no call), the builtin's own."""
    answered: dict[int, set[str]] = {}
    for item, backend, model in session.execute(
        _sql(session, "answerers"), {"job": job_id, "after": after, "last": last}
    ):
        answered.setdefault(item, set()).add(f"{backend}/{model}")
    return {
        item: ";".join(sorted(names | ({builtin} if builtin else set())))
        for item, names in answered.items()
    }


def builtin_answerer(session: Session, job: Job) -> str | None:
    """``builtin/<its model>`` when the builtin backend answers a role of the job, else None.

    A job stored before configurations were kept names no backend: its calls say who
    answered, and where it recorded none the builtin did (it is the only backend that records
    none), as ``eval report``'s header says too."""
    from ..vlm.settings import BUILTIN_MODEL

    if job.metric_tools:
        return None
    if not job.config_json:
        return None if job_models(session, job.id) else f"builtin/{BUILTIN_MODEL}"
    from ..runconfig import RunConfig

    roles = RunConfig.from_json(job.config_json).roles.values()
    return next((f"builtin/{c.answering_model}" for c in roles if c.backend == "builtin"), None)


def export_rows(
    session: Session, job_id: str, batch: int = 500, *, builtin: str | None = None
) -> Iterator[dict[str, Any]]:
    """Items with their run's answer and the tool logs' per-tool means (normalized in
    ``tool_scores``, raw in ``raw_scores``), streamed a page of ``batch`` items at a time.

    ``answered_by`` names the recorded VLM calls' models, and ``builtin`` (the builtin's own,
    :func:`builtin_answerer`) for every item that ran.  A metric job's runs have no summary,
    severities nor crops, so their stored state is never parsed; another job's is, for its
    reasoning, level probabilities and severities, which only the state holds.
    """
    from ..jobs.metrics import answer_letter  # numpy: only exports and reports need it

    metric = bool(session.scalar(select(Job.tools).where(Job.id == job_id)))
    statement = _sql(session, "export_metric" if metric else "export")
    after = _first_id(session, job_id)
    while True:
        page = session.execute(statement, {"job": job_id, "after": after, "limit": batch}).all()
        if not page:
            return
        last = page[-1].id
        logs: dict[int, list[Row[Any]]] = {}
        for log in _page_logs(session, job_id, after, last):
            logs.setdefault(log[0], []).append(log)
        answered = {} if metric else _page_answerers(session, job_id, after, last, builtin)
        after = last
        for item in page:
            row: dict[str, Any] = {
                "item_id": item.item_key,
                "line": item.line,
                "image": item.image,
                "reference": item.reference,
                "query": item.query,
                "status": item.status,
                "error": redact(item.error),
                "run_id": item.run_id,
                "mos": item.mos,
                "answer_truth": item.answer_truth,
                "final_answer": None,
                "quality_score": None,
                "reasoning": None,
                "level_distribution": None,
                "answered_by": None,
                "correct": None,
                "severities": None,
                "fallbacks": 0,
                "tools": None,
                "scored_on": None,
                "tool_scores": {},
                "raw_scores": {},
                "meta": item.meta_json,
                "question_type": _question_type(item.meta_json),
            }
            if item.run_id:
                row["answered_by"] = builtin
            if item.ran is not None:
                row["final_answer"], row["quality_score"] = item.final_answer, item.quality_score
                if item.answer_truth and item.final_answer:
                    row["correct"] = answer_letter(item.final_answer) == item.answer_truth
                run_logs = logs.get(item.id, [])
                parsed = (
                    json.loads(item.run_state)
                    if item.run_state is not None
                    and (not metric or any(log.object_name != "Global" for log in run_logs))
                    else {}
                )
                summary = parsed.get("summarizer_result") or {}
                row["reasoning"] = redact(summary.get("quality_reasoning"))
                row["level_distribution"] = summary.get("level_distribution")
                row["answered_by"] = answered.get(item.id, builtin)
                row["severities"] = _severities(parsed)
                row["fallbacks"] = sum(1 for log in run_logs if log.fallback)
                per_tool: dict[str, list[float]] = {}
                per_tool_raw: dict[str, list[float]] = {}
                for log in run_logs:
                    if log.normalized_score is not None:
                        per_tool.setdefault(log.tool_name, []).append(log.normalized_score)
                    if log.raw_score is not None:
                        per_tool_raw.setdefault(log.tool_name, []).append(log.raw_score)
                row["tool_scores"] = {t: sum(v) / len(v) for t, v in per_tool.items()}
                row["raw_scores"] = {t: sum(v) / len(v) for t, v in per_tool_raw.items()}
                row["tools"] = ";".join(sorted(per_tool)) or None
                row["scored_on"] = _scored_on(run_logs, parsed)
            yield row


def report_columns(
    session: Session,
    job_id: str,
    *,
    identities: bool = False,
    baseline: bool = True,
    page: int = PAGE,
) -> JobColumns:
    """The job's items as a report reads them (:class:`~agentic_iqa.jobs.columns.JobColumns`),
    from columns only: the items', their runs' answer and score, their tool calls' scores
    averaged per tool (as the export's), who answered; never a run's stored state, and an
    item's error, id or question only where the report uses it.  ``identities``: each item's
    id and image digests and its id's rank, for ``eval compare``, and only the columns a
    comparison reads (no distortion nor question type; a metric job's tool scores, or another's
    quality score and answers: :class:`~agentic_iqa.jobs.columns.ColumnsBuilder`'s
    ``breakdown`` and ``scores``); with ``baseline`` False
    (a job compared with the baseline) its id digests only, the baseline's ranks and images
    being those a comparison uses.  Memory: the arrays (some 60 bytes an item) and one page."""
    import numpy as np

    from ..jobs.columns import ColumnsBuilder, Page

    job = get_job(session, job_id)
    builtin = builtin_answerer(session, job)
    metric, default_query = bool(job.metric_tools), job.default_query
    # A comparison judges a metric job by its tools' scores, another by its quality score and
    # answers (:func:`agentic_iqa.jobs.in_sample.job_mode`): it reads only those.
    tool_lines = (job.mode or ("tools" if metric else "agent")) == "tools"
    tools = sorted(
        {
            *(job.metric_tools or ()),
            *([] if metric or (identities and not tool_lines) else tool_names(session, job_id)),
        }
    )
    ranked = identities and baseline
    statement = _sql(
        session, "report" if not identities else "report_identities" if baseline else "report_keys"
    )
    # Its arrays made once, of the job's size (the counts on its row).
    builder = ColumnsBuilder(
        identities=identities,
        image_digests=baseline,
        breakdown=not identities,
        scores=not (identities and tool_lines),
        expected=sum(counts(session, job_id).values()),
    )
    ids = np.empty(builder.expected if ranked else 0, dtype=np.int64)
    read = 0
    after = _first_id(session, job_id)
    while True:
        rows = session.execute(statement, {"job": job_id, "after": after, "limit": page}).all()
        if not rows:
            break
        (
            item_ids,
            statuses,
            mos,
            truths,
            queries,
            metas,
            errors,
            keys,
            images,
            runs,
            scores,
            answers,
        ) = zip(*rows, strict=True)
        last = item_ids[-1]
        at = np.array(item_ids, dtype=np.int64)
        size = at.size
        if ranked:
            if read + size > ids.size:  # more items than counted: the rest grows it
                ids = np.concatenate([ids[:read], np.empty(max(size, ids.size), np.int64)])
            ids[read : read + size] = at
            read += size
        ran = np.array([bool(run) for run in runs], dtype=bool)
        raw: dict[str, np.ndarray] = {name: np.full(size, np.nan) for name in tools}
        normalized: dict[str, np.ndarray] = {name: np.full(size, np.nan) for name in tools}
        fallbacks: np.ndarray = np.zeros(size)
        usage: dict[str, np.ndarray] = {}
        logs = _page_logs(session, job_id, after, last)
        if logs:
            log_items, log_tools, log_raw, log_normalized, log_fallback, *_ = zip(
                *logs, strict=True
            )
            where = np.searchsorted(at, np.array(log_items, dtype=np.int64))
            raw_values = np.array(log_raw, dtype=float)
            normalized_values = np.array(log_normalized, dtype=float)
            fallbacks = np.bincount(
                where, weights=np.array(log_fallback, dtype=float), minlength=size
            )
            names = np.array(log_tools, dtype=object)
            for name in dict.fromkeys(log_tools):
                mine = names == name
                for values, target in ((normalized_values, normalized), (raw_values, raw)):
                    given = mine & ~np.isnan(values)
                    count = np.bincount(where[given], minlength=size)
                    if target is normalized:
                        usage[name] = count > 0
                    if name not in target:  # not one of the export's tool columns
                        continue
                    # Summed in the calls' order, as the export's mean is: the same value.
                    total = np.bincount(where[given], weights=values[given], minlength=size)
                    scored = count > 0
                    target[name][scored] = total[scored] / count[scored]
        fallbacks[~ran] = 0
        for name, scored in usage.items():
            builder.columns.tool_usage[name] += int(np.count_nonzero(scored & ran))
        answered = {} if metric else _page_answerers(session, job_id, after, last, builtin)
        who = (
            [
                answered.get(item, builtin) if run else None
                for item, run in zip(item_ids, runs, strict=True)
            ]
            if answered or builtin
            else [None] * size
        )
        for name in raw:
            raw[name][~ran] = np.nan
            normalized[name][~ran] = np.nan
        builder.add(
            Page(
                status=statuses,
                mos=np.array(mos, dtype=float),
                score=np.where(ran, np.array(scores, dtype=float), np.nan),
                truth=truths,
                answer=answers,
                query=[query or default_query for query in queries],
                question_type=[
                    _question_type(meta) if truth is not None else None
                    for meta, truth in zip(metas, truths, strict=True)
                ],
                meta=metas,
                error=[redact(error) for error in errors],
                item=keys,
                image=images,
                answered_by=who,
                tools=None,
                fallbacks=fallbacks,
                raw=cast("dict[str, Sequence[Any] | np.ndarray]", raw),
                normalized=cast("dict[str, Sequence[Any] | np.ndarray]", normalized),
                tool_columns=tools,
            )
        )
        after = last
    key_rank = _key_ranks(session, job_id, ids[:read] if read else None) if ranked else None
    del ids
    return builder.finish(key_rank=key_rank)


def _key_ranks(session: Session, job_id: str, item_ids: np.ndarray | None) -> np.ndarray:
    """Each item's (in ``item_ids``' order) rank among the job's item ids in code-point
    order, as Python sorts text: the database orders them (bytewise: SQLite's BINARY, the "C"
    collation on PostgreSQL), so no id is held as text here."""
    import numpy as np

    size = 0 if item_ids is None else item_ids.size
    ranks = np.zeros(size, dtype=np.int32 if size < 2**31 else np.int64)  # (4 MB a million)
    if item_ids is None or not item_ids.size:
        return ranks
    result = session.execute(
        _sql(session, "key_order"), {"job": job_id}, execution_options={"yield_per": PAGE}
    )
    rank = 0
    # A page at a time: without a size, ``partitions`` gives a text statement's rows one by one
    # (yield_per streams them but does not size the partitions), a numpy call per item.
    for chunk in result.partitions(PAGE):
        found = np.fromiter((row[0] for row in chunk), dtype=np.int64, count=len(chunk))
        ranks[np.searchsorted(item_ids, found)] = np.arange(rank, rank + found.size)
        rank += found.size
    return ranks


def in_sample_overlap(
    session: Session,
    job_id: str,
    items: int,
    fitted: Mapping[str, str],
    hashes: dict[str, str | None] | None = None,
    *,
    page: int = PAGE,
) -> dict[str, int]:
    """How many of the job's items that ran (done or failed) are images the builtin was fitted
    on, by the SHA-256 recorded when each was submitted (an image without one is read and
    hashed: :func:`~agentic_iqa.jobs.in_sample.fitted_overlap`), of its ``items``; pending
    items are never read."""
    from ..jobs.in_sample import fitted_overlap

    statement = _sql(session, "ran_images")

    def ran() -> Iterator[tuple[str, str | None]]:
        after = _first_id(session, job_id)
        while rows := session.execute(
            statement, {"job": job_id, "after": after, "limit": page}
        ).all():
            after = rows[-1].id
            yield from ((row.image, row.image_digest) for row in rows)

    return fitted_overlap(ran(), items, fitted, hashes)


def report_for_job(
    session: Session, job_id: str, *, bootstrap: int = 0, seed: int = 0, logistic: bool = True
) -> dict[str, Any]:
    """The job's report (:func:`agentic_iqa.jobs.report.build_report`) read from its columns
    a page at a time (:func:`report_columns`): what ``eval report`` computes, and what a job's
    stored headline is made of (``bootstrap`` 0: no intervals, seconds for a million items;
    ``logistic`` False: no logistic fit, which a headline does not show)."""
    from ..jobs.report import build_report

    metric = bool(session.scalar(select(Job.tools).where(Job.id == job_id)))
    return build_report(
        report_columns(session, job_id),
        bootstrap=bootstrap,
        seed=seed,
        metric_job=metric,
        logistic=logistic,
    )


def tool_names(session: Session, job_id: str) -> list[str]:
    """Every tool that scored an item of the job (the export's per-tool columns)."""
    return list(
        session.scalars(
            select(ToolLog.tool_name)
            .distinct()
            .join(JobItem, JobItem.run_id == ToolLog.run_id)
            .where(JobItem.job_id == job_id, ToolLog.normalized_score.is_not(None))
            .order_by(ToolLog.tool_name)
        )
    )


def _scored_on(logs: Sequence[Row[Any]], state: dict[str, Any]) -> str | None:
    """What an item's tool scores measured ("whole image", "left half (crop)"), from its
    logged calls.  The table has no column for the crop, so the stored state's calls say it; in
    a state written since crops exist, every call off "Global" scored a region's crop (calls for
    objects are filed under "Global"), and before that every call scored the whole image."""
    from ..state import scored_on

    stored = [
        entry
        for entry in (state.get("executor_evidence") or {}).get("tool_logs") or []
        if isinstance(entry, dict)
    ]
    crops = any("region" in entry for entry in stored)
    regions = {
        (entry.get("object_name"), entry.get("distortion")): entry.get("region") for entry in stored
    }
    labels: list[str] = []
    for log in logs:
        if log.normalized_score is None:
            continue
        region = None
        if crops and log.object_name != "Global":
            region = regions.get((log.object_name, log.distortion)) or log.object_name
        labels.append(scored_on(region))
    return ";".join(dict.fromkeys(labels)) or None


def _severities(state: dict[str, Any]) -> str | None:
    analysis = (state.get("executor_evidence") or {}).get("distortion_analysis") or {}
    parts = [f"{item['type']}={item['severity']}" for items in analysis.values() for item in items]
    return ";".join(parts) or None
