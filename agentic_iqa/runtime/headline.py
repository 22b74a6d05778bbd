"""What ``eval list`` shows of a job, computed once when it ends and kept on its row.

A job's headline is its figures, one per line (the agent's, or each tool's of a metric job:
SRCC/PLCC against MOS or MCQ accuracy, :func:`agentic_iqa.reports.sweeps.headlines`), and its VLM
cost.  They come from the job's report over every item, which at a million items takes as long
as ``eval report``; listing twenty jobs must not, so the figures are computed when a job ends
(by the process that ran its last item: :func:`agentic_iqa.runtime.lifecycle.job_ended`) and
stored with the item counts they were computed on.  A headline whose counts are no longer the
job's (a resume ran more items, a job ended before headlines were kept) is computed again, once,
by the first listing that needs it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Engine

from ..db import jobs as job_store
from ..db.about import job_about
from ..db.engine import read_scope, session_scope
from ..db.exports import report_for_job, vlm_summary
from ..db.items import counts as item_counts
from ..db.jobs import get_job
from ..db.models import Job, utc_now

log = logging.getLogger(__name__)


def compute(
    engine: Engine, job_id: str, *, bootstrap: int = 0, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the job's description (:func:`~agentic_iqa.db.about.job_about`) and its figures from
    its report (:func:`~agentic_iqa.db.exports.report_for_job`, read a page at a time, without
    the logistic fits behind a PLCC, which no figure shows); ``bootstrap`` resamples give them
    intervals (a paper table's)."""
    from ..reports.sweeps import headlines

    with read_scope(engine) as session:
        about = job_about(session, get_job(session, job_id))
        built = report_for_job(session, job_id, bootstrap=bootstrap, seed=seed, logistic=False)
    return about, headlines(built, about.get("tools"))


def placeholder(tools: Sequence[str] | None) -> list[dict[str, Any]]:
    """Return the figures of a job still running: one per line, none measured (``-``)."""
    lines: Sequence[str | None] = tools or [None]
    return [{"tool": tool, "kind": None, "n": 0} for tool in lines]


def _plain(value: Any) -> Any:
    """Return a number numpy gave, as JSON takes it."""
    return value.item() if hasattr(value, "item") else str(value)


def stored(job: Job, counts: Mapping[str, int]) -> dict[str, Any] | None:
    """Return the job's stored headline, when it was computed on the items as they are now."""
    if job.status == "running" or not job.headline_json:
        return None
    document = json.loads(job.headline_json)
    return document if document.get("counts") == dict(counts) else None


def store(engine: Engine, job_id: str) -> dict[str, Any] | None:
    """Compute an ended job's headline and keep it (``figures``, ``cost_usd``, the
    ``counts`` it was computed on, ``computed_at``); None for a running job, or when it could
    not be computed (logged: the job itself ended well, and a listing tries again)."""
    try:
        with read_scope(engine) as session:
            job = get_job(session, job_id)
            if job.status == "running":
                return None
            counts = item_counts(session, job_id)
            cost = vlm_summary(session, job_id).get("cost_usd")
        _about, figures = compute(engine, job_id)
        document = {
            "figures": figures,
            "cost_usd": cost,
            "counts": counts,
            "computed_at": utc_now().isoformat(),
        }
        with session_scope(engine) as session:
            job_store.store_headline(session, job_id, json.dumps(document, default=_plain))
        return document
    except Exception as exc:  # noqa: BLE001 - a listing computes it again
        log.warning("job %s: its headline for `eval list` was not stored: %s", job_id[:8], exc)
        return None
