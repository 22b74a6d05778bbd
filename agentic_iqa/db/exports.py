"""Read what comes out of a job: its rows for ``eval export``, its columns for a report, the
images it shares with a tool's fitting set, its VLM usage and cost.

Every reader of a job's items walks them by id, a page at a time: ``job_id = ? AND id > ?
ORDER BY id LIMIT n`` on the index ``ix_job_items_job_id_id`` (job_id, id), which serves the
order, so a page costs its own rows on SQLite and PostgreSQL alike (with only (job_id,
status) SQLite sorted the whole job for every page: quadratic).  The page's tool calls and
answering models are read for the same id range.  No ORM object is built and no run's
stored state is parsed where its columns say what is needed.

On SQLite every table is named with the index it is read by (``INDEXED BY``): its planner
trusts statistics taken when the table was small (``ANALYZE`` after a submit, before any run
existed) and then scans ``runs`` once for every item of a page; PostgreSQL refreshes its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Row, select, text
from sqlalchemy.orm import Session

from ..redact import redact
from .about import job_models
from .items import counts, items_run
from .jobs import get_job
from .models import (
    Job,
    JobItem,
    ToolLog,
)
from .queries import indexed_by
from .vlm_calls import unused_batch_answers, vlm_usage

if TYPE_CHECKING:
    import numpy as np

    from ..reports.columns import JobColumns
    from ..vlm.usage import PriceTable


#: Items per page of a report's columns, and of ``eval export``.
PAGE = 5000

#: The index every page of a job's items is read from (:class:`~.models.JobItem`).
ITEMS_BY_ID = "ix_job_items_job_id_id"


#: SQLite's names of the unique indexes the other rows of a page are found by.
_SQLITE_UNIQUE = {
    "runs": "sqlite_autoindex_runs_1",
    "tool_logs": "sqlite_autoindex_tool_logs_1",
    "vlm_calls": "sqlite_autoindex_vlm_calls_1",
    "item_keys": "sqlite_autoindex_job_items_1",
}


@cache
def _statements(dialect: str) -> dict[str, Any]:
    """Build the statements that read a job's items a page at a time, for one dialect: ``:job``, the
    page after ``:after`` (its ``:limit`` items, or up to ``:last``)."""
    items = indexed_by(dialect, "job_items", ITEMS_BY_ID)
    with_runs = (
        f"FROM {items} LEFT OUTER JOIN {indexed_by(dialect, 'runs', _SQLITE_UNIQUE['runs'])}"
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
        f"CASE WHEN {asked} THEN runs.final_answer END, runs.unread {with_runs} {page}"
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
            f"{indexed_by(dialect, 'tool_logs', _SQLITE_UNIQUE['tool_logs'])} "
            f"ON tool_logs.run_id = job_items.run_id WHERE {in_range}"
        ),
        "answerers": text(
            "SELECT DISTINCT job_items.id, vlm_calls.backend, vlm_calls.model FROM "
            f"{items} JOIN {indexed_by(dialect, 'vlm_calls', _SQLITE_UNIQUE['vlm_calls'])} "
            f"ON vlm_calls.run_id = job_items.run_id WHERE {in_range} "
            "AND vlm_calls.error IS NULL"
        ),
        "ran_images": text(
            f"SELECT job_items.id, job_items.image, job_items.image_digest FROM {items} "
            "WHERE job_items.job_id = :job AND job_items.id > :after "
            "AND job_items.status IN ('done', 'failed') AND job_items.image IS NOT NULL "
            "ORDER BY job_items.id LIMIT :limit"
        ),
        # SQLite's BINARY collation and PostgreSQL's "C" compare UTF-8 bytewise: code points,
        # the order Python sorts text in.
        "key_order": text(
            "SELECT job_items.id FROM "
            f"{indexed_by(dialect, 'job_items', _SQLITE_UNIQUE['item_keys'])}"
            f" WHERE job_items.job_id = :job ORDER BY {keys}"
        ),
    }


def _sql(session: Session, name: str) -> Any:
    """Return the page statement ``name`` in the session's dialect."""
    return _statements(session.get_bind().dialect.name)[name]


def _first_id(session: Session, job_id: str) -> int:
    """Return an id below every item id of the job (the walk starts after it)."""
    return int(session.scalar(select(Job.items_after).where(Job.id == job_id)) or 0)


def _in_page(session: Session, name: str, job_id: str, after: int, last: int) -> list[Row[Any]]:
    """Return the rows statement ``name`` reads for a page's items (its id range), all at once.

    ``logs``: the page's tool calls, each item's in the order of the table's key (iteration,
    object, distortion) as SQLite reads them, unsorted as the export always read them: an
    export's and a report's per-tool means are summed in that order, one statement for both,
    so the same means.  ``answerers``: the backend and model of its recorded VLM calls."""
    return list(
        session.execute(_sql(session, name), {"job": job_id, "after": after, "last": last}).all()
    )


def _answered_by(rows: Iterable[Sequence[Any]], builtin: str | None) -> dict[int, str]:
    """Return who answered each item of a page that ran (from its ``answerers`` rows): the
    recorded VLM calls' backend/model and, where the builtin answers a role (it records no
    call), the builtin's own."""
    answered: dict[int, set[str]] = {}
    for item, backend, model in rows:
        answered.setdefault(item, set()).add(f"{backend}/{model}")
    return {
        item: ";".join(sorted(names | ({builtin} if builtin else set())))
        for item, names in answered.items()
    }


def builtin_answerer(session: Session, job: Job) -> str | None:
    """Return ``builtin/<its model>`` when the builtin backend answers a role of the job, else None.

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
    """Yield the job's items with their run's answer and the tool logs' per-tool means (normalized
    in ``tool_scores``, raw in ``raw_scores``), streamed a page of ``batch`` items at a time.

    ``answered_by`` names the recorded VLM calls' models, and ``builtin`` (the builtin's own,
    :func:`builtin_answerer`) for every item that ran.  A metric job's runs have no summary,
    severities nor crops, so their stored state is never parsed; another job's is, for its
    reasoning, level probabilities and severities, which only the state holds.
    """
    from ..reports.metrics import answer_letter  # numpy: only exports and reports need it

    metric = bool(session.scalar(select(Job.tools).where(Job.id == job_id)))
    statement = _sql(session, "export_metric" if metric else "export")
    after = _first_id(session, job_id)
    while True:
        page = session.execute(statement, {"job": job_id, "after": after, "limit": batch}).all()
        if not page:
            return
        last = page[-1].id
        logs: dict[int, list[Row[Any]]] = {}
        for log in _in_page(session, "logs", job_id, after, last):
            logs.setdefault(log[0], []).append(log)
        answered = (
            {}
            if metric
            else _answered_by(_in_page(session, "answerers", job_id, after, last), builtin)
        )
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
                "unread": None,
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
                if summary.get("answer_unparseable"):
                    row["unread"] = redact(summary.get("unparseable_reason"))
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
    exclude: frozenset[int] = frozenset(),
) -> JobColumns:
    """Read the job's items as a report reads them
    (:class:`~agentic_iqa.reports.columns.JobColumns`), from columns only: the items', their runs'
    answer and score, their tool calls' scores averaged per tool (as the export's), who answered,
    why no answer was read (``runs.unread``, tallied by kind); never a run's stored state, and an
    item's error, id or question only where the report uses it.
    ``identities``: each item's id and image digests and its id's rank, for ``eval compare``, and
    only the columns a comparison reads (no distortion nor question type; a metric job's tool
    scores, or another's quality score and answers:
    :class:`~agentic_iqa.reports.columns.ColumnsBuilder`'s ``breakdown`` and ``scores``); with
    ``baseline`` False (a job compared with the baseline) its id digests only, the baseline's ranks
    and images being those a comparison uses. Memory: the arrays (some 60 bytes an item) and one
    page.  ``exclude``: item ids (``job_items.id``) left out, as if the job did not have them
    (:func:`in_sample_items`)."""
    import numpy as np

    from ..reports.columns import ColumnsBuilder, Page

    job = get_job(session, job_id)
    builtin = builtin_answerer(session, job)
    metric, default_query = bool(job.metric_tools), job.default_query
    # A comparison judges a metric job by its tools' scores, another by its quality score and
    # answers (:func:`agentic_iqa.reports.in_sample.job_mode`): it reads only those.
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
        expected=sum(counts(session, job_id).values()) - len(exclude),
    )
    ids = np.empty(builder.expected if ranked else 0, dtype=np.int64)
    read = 0
    after = _first_id(session, job_id)
    while True:
        rows = session.execute(statement, {"job": job_id, "after": after, "limit": page}).all()
        if not rows:
            break
        page_end = rows[-1][0]
        if exclude:
            rows = [row for row in rows if row[0] not in exclude]
            if not rows:
                after = page_end
                continue
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
            unread,
        ) = zip(*rows, strict=True)
        last = page_end
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
        logs = _in_page(session, "logs", job_id, after, last)
        if exclude:
            logs = [log for log in logs if log[0] not in exclude]
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
        answered = (
            {}
            if metric
            else _answered_by(_in_page(session, "answerers", job_id, after, last), builtin)
        )
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
                unread=unread,
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
    """Return each item's (in ``item_ids``' order) rank among the job's item ids in code-point
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
        where = np.searchsorted(item_ids, found)
        # Only the items read are ranked (those ``--exclude-in-sample`` left out are not).
        inside = where < item_ids.size
        inside[inside] = item_ids[where[inside]] == found[inside]
        where = where[inside]
        ranks[where] = np.arange(rank, rank + where.size)
        rank += where.size
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
    """Count how many of the job's items that ran (done or failed) are images the builtin was fitted
    on, by the SHA-256 recorded when each was submitted (an image without one is read and
    hashed: :func:`~agentic_iqa.reports.in_sample.fitted_overlap`), of its ``items``; pending
    items are never read."""
    from ..reports.in_sample import fitted_overlap

    statement = _sql(session, "ran_images")

    def ran() -> Iterator[tuple[str, str | None]]:
        after = _first_id(session, job_id)
        while rows := session.execute(
            statement, {"job": job_id, "after": after, "limit": page}
        ).all():
            after = rows[-1].id
            yield from ((row.image, row.image_digest) for row in rows)

    return fitted_overlap(ran(), items, fitted, hashes)


def in_sample_items(
    session: Session,
    job_id: str,
    fitted: Mapping[str, str],
    hashes: dict[str, str | None] | None = None,
    *,
    page: int = PAGE,
) -> tuple[frozenset[int], int]:
    """Return the ids (``job_items.id``) of the job's items that ran and are images the builtin
    was fitted on, as :func:`in_sample_overlap` finds them, and how many images could not be
    read to tell: what ``--exclude-in-sample`` leaves out of the figures."""
    from ..reports.in_sample import image_sha256

    hashes = {} if hashes is None else hashes
    statement = _sql(session, "ran_images")
    found: set[int] = set()
    unreadable = 0
    after = _first_id(session, job_id)
    while rows := session.execute(statement, {"job": job_id, "after": after, "limit": page}).all():
        after = rows[-1].id
        for row in rows:
            if row.image not in hashes:
                hashes[row.image] = image_sha256(row.image, row.image_digest)
            digest = hashes[row.image]
            unreadable += digest is None
            if digest is not None and digest in fitted:
                found.add(int(row.id))
    return frozenset(found), unreadable


def report_for_job(
    session: Session, job_id: str, *, bootstrap: int = 0, seed: int = 0, logistic: bool = True
) -> dict[str, Any]:
    """Build the job's report (:func:`agentic_iqa.reports.report.build_report`) from its columns,
    read a page at a time (:func:`report_columns`): what ``eval report`` computes, and what a job's
    stored headline is made of (``bootstrap`` 0: no intervals, seconds for a million items;
    ``logistic`` False: no logistic fit, which a headline does not show)."""
    from ..reports.report import build_report

    metric = bool(session.scalar(select(Job.tools).where(Job.id == job_id)))
    return build_report(
        report_columns(session, job_id),
        bootstrap=bootstrap,
        seed=seed,
        metric_job=metric,
        logistic=logistic,
    )


def tool_names(session: Session, job_id: str) -> list[str]:
    """Return every tool that scored an item of the job (the export's per-tool columns)."""
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
    """Say what an item's tool scores measured ("whole image", "left half (crop)"), from its
    logged calls.  The table has no column for the crop, so the stored state's calls say it; in
    a state written since crops exist, every call off "Global" scored a region's crop (calls for
    objects are filed under "Global"), and before that every call scored the whole image."""
    from ..evidence import scored_on

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
    """Return the distortions' severities a run's stored state holds, as ``type=severity``."""
    analysis = (state.get("executor_evidence") or {}).get("distortion_analysis") or {}
    parts = [f"{item['type']}={item['severity']}" for items in analysis.values() for item in items]
    return ";".join(parts) or None


def _question_type(meta_json: str | None) -> str | None:
    """Return the item's question type as its dataset or manifest gives it (Q-Bench's ``type``)."""
    if not meta_json:
        return None
    value = json.loads(meta_json).get("question_type")
    return str(value) if value not in (None, "") else None


def vlm_summary(session: Session, job_id: str, prices: PriceTable | None = None) -> dict[str, Any]:
    """Sum the job's VLM calls, cache hits, tokens, cost and cost per item (by SQL sums)."""
    from ..agents.followup import FOLLOW_UP_TASK
    from ..vlm.usage import PriceTable, summarize

    job = get_job(session, job_id)
    # A metric job asks no model: nothing to sum over its million runs.
    usage = [] if job.metric_tools else vlm_usage(session, job_id=job_id)
    unused = unused_batch_answers(session, job) if job.config_json else []
    summary = summarize(
        [*usage, *unused], prices or PriceTable.load(), items=items_run(session, job_id)
    )
    summary["unused_batch_answers"] = sum(entry.calls for entry in unused)
    # The follow-up questions (a reply naming no option, asked about once): their share of it.
    asked = [] if job.metric_tools else vlm_usage(session, job_id=job_id, task=FOLLOW_UP_TASK)
    follow_ups = summarize(asked, prices or PriceTable.load())
    summary["follow_ups"] = {"calls": follow_ups["calls"], "cost_usd": follow_ups["cost_usd"]}
    return summary
