"""Describe a job from what is stored: its spec, what it was run with, its dates, the seconds
its steps were at work (``eval list``, a report's header, a job's stored headline).

A job's own row says most of it; the VLM calls its runs recorded say who answered a job
stored before configurations were kept.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .jobs import get_job
from .models import Job, JobItem, Run, StepRecord, VlmCall
from .queries import iso

if TYPE_CHECKING:
    from ..jobs.spec import JobSpec


def spec_of(job: Job) -> JobSpec:
    """Return the job's record: its stored spec, or one reconstructed from its columns (a job stored
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


def job_spec(session: Session, job_id: str) -> JobSpec:
    """Return the spec of the job with this id (:func:`spec_of`)."""
    return spec_of(get_job(session, job_id))


def job_models(session: Session, job_id: str) -> list[tuple[str, str]]:
    """Return the (backend, model) pairs the job's runs asked, from the recorded VLM calls."""
    rows = session.execute(
        select(VlmCall.backend, VlmCall.model)
        .distinct()
        .join(Run, Run.id == VlmCall.run_id)
        .where(Run.job_id == job_id)
        .order_by(VlmCall.backend, VlmCall.model)
    ).all()
    return [(backend, model) for backend, model in rows]


def job_about(session: Session, job: Job) -> dict[str, Any]:
    """Describe a job from its own row (``eval list`` reads nothing else): id, name, dates,
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
        "created_at": iso(job.created_at),
        "finished_at": iso(job.finished_at),
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
    """Return the seconds in which at least one of the job's steps was at work: the union of its
    steps' own start-to-end intervals, so that a job interrupted for a day and resumed, or waiting
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


def job_summary(session: Session, job_id: str) -> dict[str, Any]:
    """Describe a job for a report's header: id, name, dates, query, backend and model
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
