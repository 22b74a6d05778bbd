"""Read what an item's trace is made of, and hand it to :mod:`agentic_iqa.reports.trace`.

One item (:func:`item_trace`, found by its id or its manifest line) or every item of a job
(:func:`job_traces`), a page at a time: a page's items with their runs in one statement, then
the page's tool calls, replans and model calls in one statement each (``run_id IN (...)``),
so a stream of traces costs a constant number of statements a page whatever the job's size.
Where an item stands among the job's items (its rank error) is read once for a stream
(:func:`job_ranking`, a page at a time) and by one aggregate for a single item.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, case, func, select
from sqlalchemy.orm import Session

from .exports import ITEMS_BY_ID, builtin_answerer
from .jobs import get_job
from .models import Job, JobItem, ReplanRow, Run, ToolLog, VlmCall

if TYPE_CHECKING:
    from ..reports.trace import Rank, Ranking
    from ..vlm.usage import PriceTable

_ITEMS = JobItem.__table__
_RUNS = Run.__table__
_LOGS = ToolLog.__table__
_REPLANS = ReplanRow.__table__
_CALLS = VlmCall.__table__

#: SQLite's index of ``runs.id``: a run is found by its id, never by scanning ``runs``.
RUNS_BY_ID = "sqlite_autoindex_runs_1"
#: Items per page of a stream of traces (each page reads four statements).
TRACE_PAGE = 500
#: How many near item ids an unknown one's error names.
CLOSE_IDS = 5

_ITEM_COLUMNS = (
    _ITEMS.c.id.label("row_id"),
    _ITEMS.c.job_id,
    _ITEMS.c.item_key,
    _ITEMS.c.line,
    _ITEMS.c.image,
    _ITEMS.c.reference,
    _ITEMS.c.query,
    _ITEMS.c.status,
    _ITEMS.c.error,
    _ITEMS.c.mos,
    _ITEMS.c.answer_truth,
    _ITEMS.c.meta_json,
    _ITEMS.c.run_id,
)
_RUN_COLUMNS = (
    _RUNS.c.id.label("run_ran"),
    _RUNS.c.status.label("run_status"),
    _RUNS.c.backend.label("run_backend"),
    _RUNS.c.iteration_count.label("run_iteration_count"),
    _RUNS.c.created_at.label("run_created_at"),
    _RUNS.c.started_at.label("run_started_at"),
    _RUNS.c.finished_at.label("run_finished_at"),
    _RUNS.c.final_answer.label("run_final_answer"),
    _RUNS.c.quality_score.label("run_quality_score"),
    _RUNS.c.error.label("run_error"),
    _RUNS.c.state_json.label("run_state_json"),
)
#: An item with its run (found by its unique key or its line: no index named).
_WITH_RUNS = (
    select(*_ITEM_COLUMNS, *_RUN_COLUMNS)
    .select_from(_ITEMS.outerjoin(_RUNS, _RUNS.c.id == _ITEMS.c.run_id))
    .with_hint(_RUNS, f"INDEXED BY {RUNS_BY_ID}", dialect_name="sqlite")
)
#: A page of a job's items with their runs, walked by id (SQLite told the index, as
#: :mod:`.exports` does: its statistics may date from before any run existed).
_PAGE = (
    _WITH_RUNS.with_hint(_ITEMS, f"INDEXED BY {ITEMS_BY_ID}", dialect_name="sqlite")
    .where(_ITEMS.c.job_id == bindparam("job"), _ITEMS.c.id > bindparam("after"))
    .order_by(_ITEMS.c.id)
    .limit(bindparam("limit"))
)
_LOGS_OF = (
    select(_LOGS)
    .where(_LOGS.c.run_id.in_(bindparam("runs", expanding=True)))
    .order_by(_LOGS.c.run_id, _LOGS.c.iteration, _LOGS.c.id)
)
_REPLANS_OF = (
    select(_REPLANS)
    .where(_REPLANS.c.run_id.in_(bindparam("runs", expanding=True)))
    .order_by(_REPLANS.c.run_id, _REPLANS.c.iteration)
)
_CALLS_OF = (
    select(_CALLS)
    .where(_CALLS.c.run_id.in_(bindparam("runs", expanding=True)))
    .order_by(_CALLS.c.run_id, _CALLS.c.iteration, _CALLS.c.id)
)
#: The job's items with a score and a MOS (what a rank error is counted among).
_RANKED = and_(
    _ITEMS.c.job_id == bindparam("job"),
    _ITEMS.c.status == "done",
    _ITEMS.c.mos.is_not(None),
    _RUNS.c.quality_score.is_not(None),
)
_RANKED_PAGE = (
    select(_ITEMS.c.id, _RUNS.c.quality_score, _ITEMS.c.mos)
    .select_from(_ITEMS.join(_RUNS, _RUNS.c.id == _ITEMS.c.run_id))
    .with_hint(_ITEMS, f"INDEXED BY {ITEMS_BY_ID}", dialect_name="sqlite")
    .with_hint(_RUNS, f"INDEXED BY {RUNS_BY_ID}", dialect_name="sqlite")
    .where(_RANKED, _ITEMS.c.id > bindparam("after"))
    .order_by(_ITEMS.c.id)
    .limit(bindparam("limit"))
)


def _count(condition: Any) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


_RANK_COUNTS = (
    select(
        func.count(),
        _count(_RUNS.c.quality_score < bindparam("score")),
        _count(_RUNS.c.quality_score == bindparam("score")),
        _count(_ITEMS.c.mos < bindparam("mos")),
        _count(_ITEMS.c.mos == bindparam("mos")),
    )
    .select_from(_ITEMS.join(_RUNS, _RUNS.c.id == _ITEMS.c.run_id))
    .with_hint(_RUNS, f"INDEXED BY {RUNS_BY_ID}", dialect_name="sqlite")
    .where(_RANKED)
)


class ItemNotFound(LookupError):
    """No item of the job has this id (or line); ``close`` names a few near ids."""

    def __init__(self, job_id: str, wanted: str, close: Sequence[str]) -> None:
        super().__init__(wanted)
        self.job_id, self.wanted, self.close = job_id, wanted, list(close)

    def __str__(self) -> str:
        near = f"; close ids: {', '.join(repr(key) for key in self.close)}" if self.close else ""
        return f"job {self.job_id[:8]} has no item {self.wanted}{near}"


def _split(row: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Return a page row's item columns and its run's (None: no run)."""
    values = dict(row._mapping)
    run = {
        key[4:]: values.pop(key)
        for key in list(values)
        if key.startswith("run_") and key != "run_id"
    }
    ran = run.pop("ran")
    return values, ({"id": ran, **run} if ran is not None else None)


def _by_run(
    session: Session, statement: Any, run_ids: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Return the rows ``statement`` reads for these runs, per run, in order."""
    found: dict[str, list[dict[str, Any]]] = {}
    if not run_ids:
        return found
    for row in session.execute(statement, {"runs": run_ids}):
        found.setdefault(row.run_id, []).append(dict(row._mapping))
    return found


def close_item_ids(session: Session, job_id: str, wanted: str, limit: int = CLOSE_IDS) -> list[str]:
    """Return up to ``limit`` item ids of the job near ``wanted``: those sharing its first
    characters, ranked by likeness, else the job's first ids (never the whole job read)."""
    candidates: list[str] = []
    for size in (3, 1):
        prefix = wanted[:size]
        if not prefix:
            break
        candidates = list(
            session.scalars(
                select(_ITEMS.c.item_key)
                .where(
                    _ITEMS.c.job_id == job_id,
                    _ITEMS.c.item_key.startswith(prefix, autoescape=True),
                )
                .limit(500)
            )
        )
        if candidates:
            break
    if not candidates:
        candidates = list(
            session.scalars(
                select(_ITEMS.c.item_key)
                .where(_ITEMS.c.job_id == job_id)
                .order_by(_ITEMS.c.id)
                .limit(limit)
            )
        )
        return candidates
    likeness = {key: difflib.SequenceMatcher(None, wanted, key).ratio() for key in candidates}
    return sorted(candidates, key=lambda key: (-likeness[key], key))[:limit]


def _find(session: Session, job_id: str, item: str | None, line: int | None) -> Any:
    """Return the page row of the item named by its id or line, or raise :class:`ItemNotFound`."""
    if (item is None) == (line is None):
        raise ValueError("name the item by its id or by its line, not both")
    statement = _WITH_RUNS.where(_ITEMS.c.job_id == job_id)
    if item is not None:
        row = session.execute(statement.where(_ITEMS.c.item_key == item)).first()
        if row is None:
            raise ItemNotFound(job_id, repr(item), close_item_ids(session, job_id, item))
        return row
    row = session.execute(statement.where(_ITEMS.c.line == line).order_by(_ITEMS.c.id)).first()
    if row is None:
        raise ItemNotFound(job_id, f"on line {line}", [])
    return row


def item_rank(session: Session, job_id: str, score: float | None, mos: float | None) -> Rank | None:
    """Return where an item of this score and MOS stands among the job's ranked items (one
    aggregate statement); None without a score or a MOS."""
    from ..reports.trace import rank_from_counts

    if score is None or mos is None:
        return None
    counts = session.execute(_RANK_COUNTS, {"job": job_id, "score": score, "mos": mos}).one()
    return rank_from_counts(*(int(value) for value in counts))


def job_ranking(session: Session, job_id: str, page: int = 5000) -> Ranking:
    """Read the job's ranked items (score and MOS), a page at a time, into a
    :class:`~agentic_iqa.reports.trace.Ranking`."""
    from ..reports.trace import Ranking

    def triples() -> Iterator[tuple[int, float, float]]:
        after = _first_id(session, job_id)
        while rows := session.execute(
            _RANKED_PAGE, {"job": job_id, "after": after, "limit": page}
        ).all():
            after = rows[-1][0]
            yield from ((row[0], row[1], row[2]) for row in rows)

    return Ranking(triples())


def _first_id(session: Session, job_id: str) -> int:
    return int(session.scalar(select(Job.items_after).where(Job.id == job_id)) or 0)


class _Context:
    """What every trace of one job shares: its default query, prices, the builtin's name."""

    def __init__(self, session: Session, job_id: str, prices: PriceTable | None) -> None:
        from ..vlm.usage import PriceTable

        job = get_job(session, job_id)
        self.job_id = job.id
        self.default_query = job.default_query
        self.builtin = builtin_answerer(session, job)
        self.prices = prices if prices is not None else PriceTable.load()

    def build(
        self,
        row: Any,
        logs: Mapping[str, list[dict[str, Any]]],
        replans: Mapping[str, list[dict[str, Any]]],
        calls: Mapping[str, list[dict[str, Any]]],
        rank: Rank | None,
    ) -> dict[str, Any]:
        from ..reports.trace import build_trace

        item, run = _split(row)
        run_id = run["id"] if run is not None else ""
        return build_trace(
            item,
            run,
            tool_logs=logs.get(run_id, []),
            replans=replans.get(run_id, []),
            calls=calls.get(run_id, []),
            default_query=self.default_query,
            prices=self.prices,
            rank=rank,
            builtin=self.builtin,
        )


def item_trace(
    session: Session,
    job_id: str,
    *,
    item: str | None = None,
    line: int | None = None,
    prices: PriceTable | None = None,
) -> dict[str, Any]:
    """Return the trace of the job's item named by its id (``job_items.item_key``) or its
    manifest ``line`` (:class:`ItemNotFound`, with near ids, when none has it)."""
    context = _Context(session, job_id, prices)
    row = _find(session, context.job_id, item, line)
    runs = [row.run_id] if row.run_ran is not None else []
    rank = item_rank(session, context.job_id, row.run_quality_score, row.mos)
    return context.build(
        row,
        _by_run(session, _LOGS_OF, runs),
        _by_run(session, _REPLANS_OF, runs),
        _by_run(session, _CALLS_OF, runs),
        rank if row.status == "done" else None,
    )


def traces_of_items(
    session: Session,
    job_id: str,
    row_ids: Sequence[int],
    *,
    prices: PriceTable | None = None,
    ranking: Ranking | None = None,
) -> list[dict[str, Any]]:
    """Return the traces of chosen items of the job (their ``job_items.id``, as
    :meth:`~agentic_iqa.reports.trace.Ranking.by_disagreement` gives them), in the order
    given, in pages of :data:`TRACE_PAGE`: a report's worst, best or sampled items."""
    context = _Context(session, job_id, prices)
    ranking = ranking if ranking is not None else job_ranking(session, context.job_id)
    found: dict[int, dict[str, Any]] = {}
    wanted = list(dict.fromkeys(row_ids))
    for start in range(0, len(wanted), TRACE_PAGE):
        chosen = wanted[start : start + TRACE_PAGE]
        rows = session.execute(
            _WITH_RUNS.where(_ITEMS.c.job_id == context.job_id, _ITEMS.c.id.in_(chosen)).order_by(
                _ITEMS.c.id
            )
        ).all()
        found.update(_built(session, context, rows, ranking))
    return [found[row_id] for row_id in wanted if row_id in found]


def _built(
    session: Session, context: _Context, rows: Sequence[Any], ranking: Ranking
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (row id, trace) for a page of item rows: their runs' tool calls, replans and model
    calls read in three statements, each item ranked where it is done."""
    runs = [row.run_id for row in rows if row.run_ran is not None]
    logs = _by_run(session, _LOGS_OF, runs)
    replans = _by_run(session, _REPLANS_OF, runs)
    calls = _by_run(session, _CALLS_OF, runs)
    for row in rows:
        rank = ranking.rank(row.row_id) if row.status == "done" else None
        yield row.row_id, context.build(row, logs, replans, calls, rank)


def job_traces(
    session: Session,
    job_id: str,
    *,
    page: int = TRACE_PAGE,
    prices: PriceTable | None = None,
    ranking: Ranking | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield every item of the job as (row id, trace), in the job's order (its rows' ids), a
    page of ``page`` items at a time: four statements a page, after the job's ranking
    (:func:`job_ranking`, read first unless given)."""
    if page < 1:
        raise ValueError(f"page must be at least 1, got {page}")
    context = _Context(session, job_id, prices)
    ranking = ranking if ranking is not None else job_ranking(session, context.job_id)
    after = _first_id(session, context.job_id)
    while rows := session.execute(
        _PAGE, {"job": context.job_id, "after": after, "limit": page}
    ).all():
        after = rows[-1].row_id
        yield from _built(session, context, rows, ranking)
