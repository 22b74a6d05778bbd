"""Read what choosing a job's items for its report's page needs, a page of items at a time.

Every item's row id, whether it failed, and for a multiple-choice item whether its answer was
right: three small columns, not a trace, so a million items cost a few megabytes; the MOS
items' rank errors come from :func:`agentic_iqa.db.traces.job_ranking`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import bindparam, case, select
from sqlalchemy.orm import Session

from ..reports.item_pages import Outline
from .exports import ITEMS_BY_ID
from .models import Job, JobItem, Run
from .traces import RUNS_BY_ID

if TYPE_CHECKING:
    from ..reports.item_pages import ItemPages

_ITEMS = JobItem.__table__
_RUNS = Run.__table__

#: Items read a statement.
OUTLINE_PAGE = 5000

_OUTLINE = (
    select(
        _ITEMS.c.id,
        _ITEMS.c.status,
        _ITEMS.c.answer_truth,
        case((_ITEMS.c.answer_truth.is_not(None), _RUNS.c.final_answer), else_=None),
    )
    .select_from(_ITEMS.outerjoin(_RUNS, _RUNS.c.id == _ITEMS.c.run_id))
    .with_hint(_ITEMS, f"INDEXED BY {ITEMS_BY_ID}", dialect_name="sqlite")
    .with_hint(_RUNS, f"INDEXED BY {RUNS_BY_ID}", dialect_name="sqlite")
    .where(_ITEMS.c.job_id == bindparam("job"), _ITEMS.c.id > bindparam("after"))
    .order_by(_ITEMS.c.id)
    .limit(bindparam("limit"))
)


def item_outline(session: Session, job_id: str, page: int = OUTLINE_PAGE) -> Outline:
    """Return the job's :class:`Outline`, read ``page`` items a statement."""
    from ..reports.metrics.accuracy import answer_letter

    if page < 1:
        raise ValueError(f"page must be at least 1, got {page}")
    ids: list[int] = []
    failed: list[bool] = []
    wrong: list[float] = []
    after = int(session.scalar(select(Job.items_after).where(Job.id == job_id)) or 0)
    while rows := session.execute(_OUTLINE, {"job": job_id, "after": after, "limit": page}).all():
        after = rows[-1][0]
        for row_id, status, truth, answer in rows:
            ids.append(row_id)
            failed.append(status == "failed")
            if truth is None or status != "done":
                wrong.append(float("nan"))
            else:
                wrong.append(0.0 if answer_letter(answer) == truth else 1.0)
    return Outline(
        row_id=np.array(ids, dtype=np.int64),
        failed=np.array(failed, dtype=bool),
        wrong=np.array(wrong, dtype=float),
    )


def read_item_pages(session: Session, job_id: str, *, limit: int, seed: int = 0) -> ItemPages:
    """Return the report's items shown one by one: the job's items chosen
    (:func:`agentic_iqa.reports.item_pages.choose_items`) from its outline and ranking, and the
    chosen items' traces, only theirs read."""
    from ..reports.item_pages import choose_items, item_pages
    from .jobs import get_job
    from .traces import job_ranking, traces_of_items

    job_id = get_job(session, job_id).id
    ranking = job_ranking(session, job_id)
    choice = choose_items(item_outline(session, job_id), ranking, limit, seed)
    chosen = sorted(choice.why)
    # One read scope: every chosen item is there, its trace in the order asked.
    traces = traces_of_items(session, job_id, chosen, ranking=ranking)
    return item_pages(zip(chosen, traces, strict=True), choice, job_id, seed=seed)
