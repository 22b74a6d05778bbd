"""Write and read a batch job's rounds: batches sent, polled, answered, read.

Every function takes an open session and leaves the commit to the caller, like
:mod:`.steps`.  The requests the batches carry wait in :mod:`.batch_requests`.  The rules that
keep a request from being paid for twice live in the two:

- a request is keyed by its place in its run (run, step, iteration, seq): a step parked twice
  at the same place (a redelivery, a resume) asks for it once;
- a request is given to exactly one batch at a time (``batch_id``, set in the transaction that
  creates the batch row, under the job's lock), and only a batch's own answers are written to
  it;
- an answer, once written, is never asked for again;
- a request the provider refused for good (the request itself is bad) is not sent again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ..redact import redact
from .engine import changed_rows
from .models import BatchRequest, Run, VlmBatch, utc_now


def line_id(batch_id: str, request_id: int) -> str:
    """Return a request's ``custom_id`` in a batch: its row's ``q<id>`` after the batch row's own
    id. The results of a batch found again after a crash by its time and size alone (Anthropic
    lists no metadata) prove whose they are: no other batch, of this database or of another
    on the same account, holds these ids."""
    return f"b{batch_id.replace('-', '')[:16]}_q{request_id}"


def line_prefix(batch_id: str) -> str:
    """Return what every custom_id of the batch row ``batch_id`` begins with."""
    return line_id(batch_id, 0).removesuffix("0")


def open_batches(session: Session, job_id: str | None = None) -> list[VlmBatch]:
    """Return the batches whose answers are not read yet (of one job, or all)."""
    query = select(VlmBatch).where(VlmBatch.read.is_(False)).order_by(VlmBatch.created_at)
    if job_id is not None:
        query = query.where(VlmBatch.job_id == job_id)
    return list(session.scalars(query))


def next_round(session: Session, job_id: str) -> int:
    """Return the number of the job's next round of batches."""
    return (
        int(session.scalar(select(func.max(VlmBatch.round)).where(VlmBatch.job_id == job_id)) or 0)
        + 1
    )


@dataclass(frozen=True)
class Gathered:
    """A batch row just created and the requests given to it (custom id, role, request)."""

    batch_id: str
    role: str
    requests: list[tuple[str, str]]


def gather(
    session: Session,
    job_id: str,
    groups: dict[str, str],
    *,
    max_requests: int,
) -> list[Gathered]:
    """Give every pending request of the job to a new batch: one per backend and model
    (``groups``: role -> its group's role, the first of the roles with the same backend, model
    and endpoint), split at ``max_requests``.  The caller holds the job's lock."""
    rows = list(
        session.scalars(
            select(BatchRequest)
            .join(Run, Run.id == BatchRequest.run_id)
            .where(
                BatchRequest.job_id == job_id,
                BatchRequest.status == "pending",
                Run.status.in_(("pending", "running")),
            )  # a run that ended asks nothing
            .order_by(BatchRequest.id)
        )
    )
    if not rows:
        return []
    by_group: dict[str, list[BatchRequest]] = {}
    for row in rows:
        by_group.setdefault(groups.get(row.role, row.role), []).append(row)
    number = next_round(session, job_id)
    gathered = []
    for role, members in by_group.items():
        for start in range(0, len(members), max_requests):
            chunk = members[start : start + max_requests]
            batch = VlmBatch(
                job_id=job_id,
                round=number,
                role=role,
                backend="",
                model="",
                status="submitting",
                ended=False,
                read=False,
                request_count=len(chunk),
                polls=0,
            )
            session.add(batch)
            session.flush()
            for row in chunk:
                row.status, row.batch_id = "submitted", batch.id
            gathered.append(
                Gathered(
                    batch.id, role, [(line_id(batch.id, row.id), row.request_json) for row in chunk]
                )
            )
    session.flush()
    return gathered


def describe_batch(session: Session, batch_id: str, *, backend: str, model: str) -> None:
    """Record the backend and model a batch row is sent to."""
    session.execute(
        update(VlmBatch).where(VlmBatch.id == batch_id).values(backend=backend, model=model)
    )


def record_state(
    session: Session,
    batch_id: str,
    *,
    provider_id: str | None,
    status: str,
    ended: bool,
    counts: dict[str, int],
    expires_at: datetime | None,
    error: str | None,
    next_poll_at: datetime | None,
    submitted: bool = False,
) -> None:
    """Record what the provider says of the batch now."""
    values: dict[str, Any] = {
        "status": status,
        "ended": ended,
        "counts_json": json.dumps(counts),
        "expires_at": expires_at,
        "error": redact(error),
        "next_poll_at": next_poll_at,
    }
    if provider_id is not None:
        values["provider_id"] = provider_id
    if submitted:
        values["submitted_at"] = utc_now()
    if ended:
        values["ended_at"] = utc_now()
    session.execute(update(VlmBatch).where(VlmBatch.id == batch_id).values(**values))


def submitted_requests(session: Session, batch_id: str) -> list[tuple[int, str]]:
    """Return the requests a batch was given and has not answered yet: (row id, request JSON)."""
    rows = session.execute(
        select(BatchRequest.id, BatchRequest.request_json)
        .where(BatchRequest.batch_id == batch_id, BatchRequest.status == "submitted")
        .order_by(BatchRequest.id)
    ).all()
    return [(int(row_id), text) for row_id, text in rows]


def taken_provider_ids(session: Session, since: datetime) -> set[str]:
    """Return the provider ids recorded for batches that may have been created since ``since``: a
    batch found again after a crash is none of these."""
    return set(
        session.scalars(
            select(VlmBatch.provider_id).where(
                VlmBatch.provider_id.is_not(None),
                VlmBatch.submitted_at.is_(None) | (VlmBatch.submitted_at >= since),
            )
        )
    )


def release(session: Session, batch_id: str, reason: str) -> int:
    """Release a batch row's requests: it holds none of them after all (its create never reached the
    provider, and its job stopped): they wait for the next round, no try counted, and the
    row is closed with ``reason``.  Returns how many went back."""
    result = session.execute(
        update(BatchRequest)
        .where(BatchRequest.batch_id == batch_id, BatchRequest.status == "submitted")
        .values(status="pending", batch_id=None)
    )
    session.execute(
        update(VlmBatch)
        .where(VlmBatch.id == batch_id)
        .values(read=True, ended=True, error=redact(reason), next_poll_at=None, ended_at=utc_now())
    )
    return int(changed_rows(result) or 0)


def disown(session: Session, batch_id: str, reason: str) -> None:
    """Disown a batch: the one adopted for row ``batch_id`` after a crash proved another's (its
    results carry none of the row's custom_ids): it is kept as a closed row of its own, so no later
    search takes it again, and the row is "submitting" once more, looked for again at once
    (its own batch may be the next candidate)."""
    row = session.get(VlmBatch, batch_id)
    if row is None or row.provider_id is None:
        return
    now = utc_now()
    session.add(
        VlmBatch(
            job_id=row.job_id,
            round=row.round,
            role=row.role,
            backend=row.backend,
            model=row.model,
            provider_id=row.provider_id,
            status="not ours",
            ended=True,
            read=True,
            request_count=0,
            error=redact(reason),
            submitted_at=now,
            ended_at=now,
            polls=0,
        )
    )
    row.provider_id, row.status, row.ended, row.counts_json = None, "submitting", False, None
    row.submitted_at = row.ended_at = row.expires_at = row.next_poll_at = None
    session.flush()


def poll_now(session: Session, job_id: str) -> None:
    """Poll the job's open batches at the next pass (a cancel that could not reach the
    provider is tried again there)."""
    session.execute(
        update(VlmBatch)
        .where(VlmBatch.job_id == job_id, VlmBatch.read.is_(False))
        .values(next_poll_at=utc_now())
    )


def claim_polls(
    session: Session, *, backoff: float, maximum: float, stale_submitting: float, limit: int = 50
) -> list[VlmBatch]:
    """Claim the open batches due for a poll (and batches left "submitting" by a process that died),
    their next poll moved ahead so that one supervisor polls each."""
    now = utc_now()
    due = list(
        session.scalars(
            select(VlmBatch)
            .where(
                VlmBatch.read.is_(False),
                (
                    (VlmBatch.provider_id.is_not(None))
                    & (VlmBatch.next_poll_at.is_(None) | (VlmBatch.next_poll_at <= now))
                )
                | (
                    (VlmBatch.status == "submitting")
                    & (VlmBatch.created_at < now - timedelta(seconds=stale_submitting))
                    & (VlmBatch.next_poll_at.is_(None) | (VlmBatch.next_poll_at <= now))
                ),
            )
            .order_by(VlmBatch.next_poll_at, VlmBatch.created_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    for batch in due:
        wait = min(maximum, backoff * 2 ** min(batch.polls, 30))
        batch.polls += 1
        batch.next_poll_at = now + timedelta(seconds=wait)
    session.flush()
    return due


def write_results(
    session: Session,
    batch_id: str,
    results: Iterable[tuple[str, str, str | None, str | None]],
    *,
    max_tries: int,
) -> dict[str, int]:
    """Write a batch's answers: ``(custom_id, kind, response_json, error)`` with kind succeeded,
    errored, refused, expired or canceled (custom ids as :func:`line_id` makes them).
    Answered requests keep their answer; refused ones (the provider says the request itself
    is bad: HTTP 400, 401, 403, 404, 422...) fail at once with the provider's reason; errored
    and expired ones go back to the next round until ``max_tries`` batches failed them, then
    fail with the provider's reason; canceled ones (our cancel) go back without counting.
    Requests the provider did not mention count as expired.  Returns the count of each
    outcome."""
    rows = {
        line_id(batch_id, row.id): row
        for row in session.scalars(
            select(BatchRequest).where(
                BatchRequest.batch_id == batch_id, BatchRequest.status == "submitted"
            )
        )
    }
    outcome: dict[str, int] = {}
    now = utc_now()
    for custom_id, kind, response, error in results:
        row = rows.pop(custom_id, None)
        if row is None:
            continue
        _settle(row, kind, response, error, max_tries, now)
        outcome[kind] = outcome.get(kind, 0) + 1
    for row in rows.values():
        _settle(
            row,
            "expired",
            None,
            "the batch ended without an answer to this request",
            max_tries,
            now,
        )
        outcome["expired"] = outcome.get("expired", 0) + 1
    session.execute(update(VlmBatch).where(VlmBatch.id == batch_id).values(read=True))
    session.flush()
    return outcome


def _settle(
    row: BatchRequest,
    kind: str,
    response: str | None,
    error: str | None,
    max_tries: int,
    now: datetime,
) -> None:
    """Write one request's outcome in its batch (:func:`write_results`)."""
    if kind == "succeeded" and response is not None:
        row.status, row.response_json, row.error, row.answered_at = (
            "answered",
            response,
            None,
            now,
        )
        return
    if kind == "canceled":
        row.status, row.batch_id = "pending", None
        return
    row.tries += 1
    reason = redact(error) or f"the request {kind} in its batch"
    if kind == "refused":  # the same request fails the same way in any batch
        row.status, row.error, row.answered_at = (
            "failed",
            f"{reason} (refused by the provider: not sent again)",
            now,
        )
        return
    if row.tries >= max_tries:
        row.status, row.error, row.answered_at = (
            "failed",
            f"{reason} (in {row.tries} batches)",
            now,
        )
    else:
        row.status, row.batch_id, row.error = "pending", None, reason


def fail_unsent(session: Session, batch_id: str, reason: str) -> None:
    """Fail the requests of a batch the provider refused as a whole, with that reason."""
    session.execute(
        update(BatchRequest)
        .where(BatchRequest.batch_id == batch_id, BatchRequest.status == "submitted")
        .values(status="failed", error=redact(reason), answered_at=utc_now())
    )
    session.execute(
        update(VlmBatch)
        .where(VlmBatch.id == batch_id)
        .values(read=True, ended=True, status="failed", error=redact(reason), ended_at=utc_now())
    )


@dataclass(frozen=True)
class BatchView:
    """A batch as ``eval status`` shows it."""

    round: int
    role: str
    backend: str
    model: str
    provider_id: str | None
    status: str
    requests: int
    counts: dict[str, int]
    expires_at: datetime | None
    error: str | None


def batch_views(session: Session, job_id: str, *, open_only: bool = True) -> list[BatchView]:
    """Return the job's batches (the open ones only, by default) as ``eval status`` shows them."""
    query = select(VlmBatch).where(VlmBatch.job_id == job_id).order_by(VlmBatch.created_at)
    if open_only:
        query = query.where(VlmBatch.read.is_(False))
    return [
        BatchView(
            batch.round,
            batch.role,
            batch.backend,
            batch.model,
            batch.provider_id,
            batch.status,
            batch.request_count,
            json.loads(batch.counts_json) if batch.counts_json else {},
            batch.expires_at,
            batch.error,
        )
        for batch in session.scalars(query)
    ]
