"""Write and read the VLM calls of runs: stored per step attempt, summed into usage per model.

The response-cache keys a run has asked, the calls an attempt made, and their calls, cache hits
and tokens per (backend, model) for a run or a job; answers a provider's batch brought that no
run took.  Costs are priced from these by :mod:`agentic_iqa.vlm.usage`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, case, func, select
from sqlalchemy.orm import Session

from ..redact import redact
from ..vlm.usage import CallRecord
from .models import (
    BatchRequest,
    Job,
    Run,
    VlmBatch,
    VlmCall,
    utc_now,
)
from .queries import insert_missing

if TYPE_CHECKING:
    from ..vlm.usage import ModelUsage


_VLM_CALLS = VlmCall.__table__

_KEYS_ASKED = select(_VLM_CALLS.c.request_key).where(
    _VLM_CALLS.c.run_id == bindparam("b_run"), _VLM_CALLS.c.request_key.is_not(None)
)


def vlm_keys_asked(session: Session, run_id: str) -> set[str]:
    """Return the response-cache keys this run has asked already (in any step)."""
    return set(session.scalars(_KEYS_ASKED, {"b_run": run_id}))


def store_vlm_calls(
    session: Session,
    run_id: str,
    step: str,
    iteration: int,
    attempt: int,
    records: Iterable[CallRecord],
) -> None:
    """Store the calls one attempt of a step made, in order; storing them again changes nothing."""
    insert_missing(
        session,
        VlmCall,
        ("run_id", "step", "iteration", "attempt", "seq"),
        [
            {
                "run_id": run_id,
                "step": step,
                "iteration": iteration,
                "attempt": attempt,
                "seq": seq,
                "role": record.role,
                "task": record.task,
                "backend": record.backend,
                "model": record.model,
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "cached_tokens": record.cached_tokens,
                "latency_s": record.latency_s,
                "cache_hit": record.cache_hit,
                "request_key": record.request_key,
                "created_at": utc_now(),
                "error": redact(record.error),
                "endpoint": record.endpoint,
                "batch": record.batch,
            }
            for seq, record in enumerate(records)
        ],
    )
    session.flush()


def _real(column: Any) -> Any:
    """Sum ``column`` over real calls, 0 on cache hits (which cost nothing)."""
    return func.coalesce(func.sum(case((VlmCall.cache_hit, 0), else_=column)), 0)


def vlm_usage(
    session: Session,
    *,
    run_id: str | None = None,
    job_id: str | None = None,
    task: str | None = None,
) -> list[ModelUsage]:
    """Sum the calls, cache hits and tokens per (backend, model), for a run or every run of a job
    (``task``: its calls of that task only, e.g. the follow-up questions); calls answered by a
    provider batch apart (they cost the batch price)."""
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
    if task is not None:
        statement = statement.where(VlmCall.task == task)
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
    """Count (real calls, cache hits) per (step, iteration) of a run: whether its answers came from
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


def unused_batch_answers(session: Session, job: Job) -> list[ModelUsage]:
    """Sum the answers the provider's batches brought (and billed) that no run of the job took: its
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
