"""Repository functions of dataset jobs: items in, progress counts out, items closed by runs.

Everything here works in batches and by SQL counts, so a job of 10,000 items never needs them
all in memory: items are inserted in chunks as the manifest streams, claimed a window at a time,
and exported with ``yield_per``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from ..redact import redact
from ..vlm.usage import PriceTable, summarize
from .items import close_item_for_run, finish_if_complete
from .models import Job, JobItem, Run, ToolLog, VlmCall, utc_now
from .reads import get_job, vlm_usage
from .steps import create_run, lease_deadline

INSERT_BATCH = 500
TERMINAL_ITEM = ("done", "failed", "cancelled")




def create_job(session: Session, *, name: str, manifest: str, default_query: str,
               root: str | None = None, max_replan_iterations: int = 2,
               vlm_cache: bool = True, tools: Sequence[str] | None = None,
               config_json: str | None = None) -> str:
    """A running job; ``tools``: a metric job, whose runs only run these tools;
    ``config_json``: the configuration its items run with (:mod:`agentic_iqa.runconfig`)."""
    job = Job(name=name, manifest=manifest, default_query=default_query, root=root,
              max_replan_iterations=max_replan_iterations, status="running",
              vlm_cache=vlm_cache, tools=",".join(tools) if tools else None,
              config_json=config_json)
    session.add(job)
    session.flush()
    return job.id




def set_dispatch(session: Session, job_id: str, dispatch: str) -> None:
    """Who feeds the job from now on: ``workers`` (the supervisor) or ``local``."""
    get_job(session, job_id).dispatch = dispatch


def items_run(session: Session, job_id: str) -> int:
    """Items whose run has ended (done or failed after running): the divisor of cost per
    item. Bad rows never ran and cost nothing."""
    return int(session.scalar(select(func.count()).where(
        JobItem.job_id == job_id, JobItem.run_id.is_not(None),
        JobItem.status.in_(("done", "failed")))) or 0)


def vlm_summary(session: Session, job_id: str, prices: PriceTable | None = None
                ) -> dict[str, Any]:
    """The job's VLM calls, cache hits, tokens, cost and cost per item (by SQL sums)."""
    get_job(session, job_id)
    return summarize(vlm_usage(session, job_id=job_id), prices or PriceTable.load(),
                     items=items_run(session, job_id))


def jobs_to_feed(session: Session) -> list[str]:
    """Running jobs that the workers feed and that still have items waiting."""
    return list(session.scalars(
        select(Job.id).where(Job.status == "running", Job.dispatch == "workers")
        .where(select(JobItem.id).where(JobItem.job_id == Job.id, JobItem.status == "pending")
               .exists())
    ))


def stalled_count(session: Session, job_id: str) -> int:
    """Items in flight whose run's lease has passed: nothing has happened to them lately."""
    return int(session.scalar(
        select(func.count()).select_from(JobItem).join(Run, Run.id == JobItem.run_id)
        .where(JobItem.job_id == job_id, JobItem.status == "queued",
               Run.status.in_(("pending", "running")), Run.lease_until.is_not(None),
               Run.lease_until < utc_now())
    ) or 0)


def failed_items(session: Session, job_id: str, limit: int = 50) -> list[JobItem]:
    """The job's failed items (the first ``limit``), with their reasons."""
    return list(session.scalars(select(JobItem).where(
        JobItem.job_id == job_id, JobItem.status == "failed").order_by(JobItem.id).limit(limit)))


def live_leases(session: Session, job_id: str) -> int:
    """Runs of the job in flight whose lease is still running: someone is working on them."""
    return int(session.scalar(
        select(func.count()).select_from(Run)
        .where(Run.job_id == job_id, Run.status.in_(("pending", "running")),
               Run.lease_until.is_not(None), Run.lease_until >= utc_now())) or 0)


def extend_leases(session: Session, job_id: str, seconds: float) -> int:
    """Push the leases of the job's open runs ``seconds`` ahead (the local runner's sign of
    life); returns how many."""
    return int(session.execute(
        update(Run).where(Run.job_id == job_id, Run.status.in_(("pending", "running")))
        .values(lease_until=lease_deadline(seconds))).rowcount or 0)


def finish_complete_jobs(session: Session) -> int:
    """Running jobs with nothing pending or queued are done (a lost or raced closing)."""
    open_items = select(JobItem.id).where(JobItem.job_id == Job.id,
                                          JobItem.status.in_(("pending", "queued")))
    jobs = session.scalars(select(Job).where(Job.status == "running", ~open_items.exists())
                           .with_for_update(skip_locked=True)).all()
    for job in jobs:
        job.status, job.finished_at = "done", utc_now()
    return len(jobs)


def close_orphaned_items(session: Session) -> int:
    """Items still 'queued' whose run already ended (its closing was lost): close them now."""
    running_jobs = select(Job.id).where(Job.status == "running")
    runs = session.scalars(  # by (job, status): the index, not a scan of every item ever
        select(Run).join(JobItem, JobItem.run_id == Run.id)
        .where(JobItem.job_id.in_(running_jobs), JobItem.status == "queued",
               Run.status.in_(("succeeded", "failed")))
        .limit(500)
    ).all()
    for run in runs:
        close_item_for_run(session, run)
    return len(runs)




def add_items(session: Session, job_id: str, rows: Iterable[dict[str, Any]]) -> int:
    """Insert item rows (column dicts) in batches; returns how many."""
    batch: list[dict[str, Any]] = []
    total = 0
    for row in rows:
        batch.append({"job_id": job_id, **row})
        if len(batch) >= INSERT_BATCH:
            session.execute(insert(JobItem), batch)
            total += len(batch)
            batch.clear()
    if batch:
        session.execute(insert(JobItem), batch)
        total += len(batch)
    return total


def counts(session: Session, job_id: str) -> dict[str, int]:
    rows = session.execute(
        select(JobItem.status, func.count()).where(JobItem.job_id == job_id)
        .group_by(JobItem.status)
    ).all()
    return {status: int(count) for status, count in rows}


def claim(session: Session, job: Job, limit: int, *, lease_seconds: float | None = None
          ) -> list[str]:
    """Give up to ``limit`` pending items a run each and mark them queued; returns run ids.

    ``lease_seconds``: the runs go to workers and are supervised from now on.
    """
    if limit <= 0 or job.status != "running":
        return []
    items = session.scalars(
        select(JobItem).where(JobItem.job_id == job.id, JobItem.status == "pending")
        .order_by(JobItem.id).limit(limit).with_for_update(skip_locked=True)
    ).all()
    run_ids = []
    for item in items:
        run_id = create_run(session, query=item.query or job.default_query,
                            image_path=str(item.image), reference_path=item.reference,
                            max_replan_iterations=job.max_replan_iterations, job_id=job.id,
                            lease_seconds=lease_seconds, metric_tools=job.metric_tools)
        item.run_id, item.status, item.queued_at = run_id, "queued", utc_now()
        run_ids.append(run_id)
    return run_ids






def cancel(session: Session, job_id: str) -> int:
    """Stop a job: waiting items are cancelled; runs already on workers end as cancelled."""
    job = get_job(session, job_id)
    if job.status != "running":
        return 0
    job.status, job.finished_at = "cancelled", utc_now()
    result = session.execute(
        update(JobItem).where(JobItem.job_id == job_id, JobItem.status == "pending")
        .values(status="cancelled", finished_at=utc_now())
    )
    return int(result.rowcount or 0)


def note_waiting(session: Session, job_id: str, reason: str) -> None:
    """A process could not run the job's items as submitted: say why (``eval status``)."""
    session.execute(update(Job).where(Job.id == job_id)
                    .values(waiting=redact(reason), waiting_at=utc_now()))


def stop_on_fatal_error(session: Session, job_id: str, error: Exception, reason: str) -> bool:
    """A run of the job failed on a fatal backend error: stop the job, if the policy says so
    (:func:`agentic_iqa.jobs.policy.stops_job`), with one message; returns whether it did.
    Items not started are cancelled, runs in flight end as cancelled; ``eval resume`` reopens
    them once the cause is fixed."""
    from ..jobs.policy import stop_message, stops_job

    job = get_job(session, job_id, lock=True)
    if job.status != "running":
        return False
    status = getattr(error, "status", None)
    done = counts(session, job_id).get("done", 0)
    alike = 0
    if status is not None:
        alike = int(session.scalar(select(func.count()).select_from(JobItem).join(
            Run, Run.id == JobItem.run_id).where(
            JobItem.job_id == job_id, Run.status == "failed",
            Run.error.contains(f"HTTP {status}"))) or 0)
    if not stops_job(status, done=done, failed_alike=alike):
        return False
    message = redact(stop_message(reason))
    cancel(session, job_id)
    job.error = message
    session.execute(update(JobItem).where(JobItem.job_id == job_id, JobItem.status == "cancelled",
                                          JobItem.error.is_(None)).values(error=message))
    return True


def reopen(session: Session, job_id: str) -> tuple[int, list[str]]:
    """Resume: failed and cancelled items that did run go back to pending (a new run each);
    queued items keep their run, which is handed back for re-coordination.  Items that never
    ran because the row itself is bad stay failed: rerunning cannot fix a missing file.
    Returns (items reopened, run ids to re-coordinate)."""
    job = get_job(session, job_id)
    job.status, job.finished_at, job.error = "running", None, None
    reopened = session.execute(
        update(JobItem).where(
            JobItem.job_id == job_id,
            ((JobItem.status == "failed") & JobItem.run_id.is_not(None))
            | (JobItem.status == "cancelled"),
        ).values(status="pending", run_id=None, error=None, queued_at=None, finished_at=None)
    )
    queued = session.scalars(
        select(JobItem.run_id).join(Run, Run.id == JobItem.run_id)
        .where(JobItem.job_id == job_id, JobItem.status == "queued",
               Run.status.in_(("pending", "running")))
    ).all()
    # A queued item whose run already ended (its closing was lost) is closed now.
    for run in session.scalars(
        select(Run).join(JobItem, JobItem.run_id == Run.id)
        .where(JobItem.job_id == job_id, JobItem.status == "queued",
               Run.status.in_(("succeeded", "failed")))
    ):
        close_item_for_run(session, run)
    finish_if_complete(session, job)
    return int(reopened.rowcount or 0), [r for r in queued if r]


def export_rows(session: Session, job_id: str, batch: int = 500) -> Iterator[dict[str, Any]]:
    """Items with their run's answer and the tool logs' per-tool means (normalized in
    ``tool_scores``, raw in ``raw_scores``), streamed in batches."""
    import json

    from ..jobs.metrics import answer_letter  # numpy: only exports and reports need it

    last_id = 0
    while True:
        page = session.execute(
            select(JobItem, Run).outerjoin(Run, Run.id == JobItem.run_id)
            .where(JobItem.job_id == job_id, JobItem.id > last_id)
            .order_by(JobItem.id).limit(batch)
        ).all()
        if not page:
            return
        last_id = page[-1][0].id
        run_ids = [run.id for _item, run in page if run is not None]
        logs: dict[str, list[ToolLog]] = {}
        answered: dict[str, set[str]] = {}
        if run_ids:
            for log in session.scalars(select(ToolLog).where(ToolLog.run_id.in_(run_ids))):
                logs.setdefault(log.run_id, []).append(log)
            for run_id, backend, model in session.execute(  # who actually answered
                    select(VlmCall.run_id, VlmCall.backend, VlmCall.model).distinct()
                    .where(VlmCall.run_id.in_(run_ids), VlmCall.error.is_(None))):
                answered.setdefault(run_id, set()).add(f"{backend}/{model}")
        for item, run in page:
            row: dict[str, Any] = {
                "item_id": item.item_key, "line": item.line, "image": item.image,
                "reference": item.reference, "query": item.query, "status": item.status,
                "error": redact(item.error), "run_id": item.run_id, "mos": item.mos,
                "answer_truth": item.answer_truth, "final_answer": None, "quality_score": None,
                "reasoning": None, "level_distribution": None, "answered_by": None,
                "correct": None, "severities": None, "fallbacks": 0, "tools": None,
                "tool_scores": {}, "raw_scores": {},
            }
            if run is not None:
                row["final_answer"], row["quality_score"] = run.final_answer, run.quality_score
                if item.answer_truth and run.final_answer:
                    row["correct"] = answer_letter(run.final_answer) == item.answer_truth
                state = json.loads(run.state_json)
                summary = state.get("summarizer_result") or {}
                row["reasoning"] = redact(summary.get("quality_reasoning"))
                row["level_distribution"] = summary.get("level_distribution")
                row["answered_by"] = ";".join(sorted(answered.get(run.id, ()))) or None
                row["severities"] = _severities(state)
                run_logs = logs.get(run.id, [])
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
            yield row


def tool_names(session: Session, job_id: str) -> list[str]:
    """Every tool that scored an item of the job (the export's per-tool columns)."""
    return list(session.scalars(
        select(ToolLog.tool_name).distinct()
        .join(JobItem, JobItem.run_id == ToolLog.run_id)
        .where(JobItem.job_id == job_id, ToolLog.normalized_score.is_not(None))
        .order_by(ToolLog.tool_name)
    ))


def _severities(state: dict[str, Any]) -> str | None:
    analysis = (state.get("executor_evidence") or {}).get("distortion_analysis") or {}
    parts = [f"{item['type']}={item['severity']}" for items in analysis.values() for item in items]
    return ";".join(parts) or None
