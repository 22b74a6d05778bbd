"""Assemble one item's trace: what was asked, planned, measured and answered, and why.

A trace is a plain JSON document (:data:`TRACE_KEYS`, version :data:`TRACE_VERSION`) built from
what the database stores of an item, its run, the run's tool calls, replans and model calls,
and where the item stands among the job's items (:class:`Ranking`).  The rows come in as
mappings (the database layer reads them: :mod:`agentic_iqa.db.traces`), so this module needs
no database, and ``eval show``, ``eval export --trace``, ``--format hf`` and the HTML report's
item pages all read the same document.

Every text that came from a manifest, a model or an error is redacted
(:func:`agentic_iqa.redact.redact`); nothing here is escaped for a terminal or a page, which is
the renderer's part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..redact import redact

if TYPE_CHECKING:
    import numpy as np

    from ..vlm.usage import PriceTable

#: Bumped when a key changes meaning or goes away (new keys may be added within a version).
TRACE_VERSION = 1

#: The trace's top-level keys, in order.
TRACE_KEYS: tuple[str, ...] = (
    "trace_version",
    "job_id",
    "item",
    "run",
    "plan",
    "distortions",
    "tools",
    "answer",
    "replans",
    "model_calls",
    "usage",
    "truth",
)

#: What a tool call on the whole image is called in a trace (``tool_logs.object_name``
#: says "Global").
WHOLE_IMAGE = "whole image"


@dataclass(frozen=True)
class Rank:
    """Where one item stands among the job's items that have both a score and a MOS.

    Ranks count from 1 (the lowest), ties share their mean rank; ``rank_error`` is the
    item's score percentile less its MOS percentile, in [-1, 1]: positive where the agent
    rates it higher than people do, 0 where they agree."""

    score_rank: float
    mos_rank: float
    ranked_items: int

    @property
    def rank_error(self) -> float:
        if self.ranked_items < 2:
            return 0.0
        return (self.score_rank - self.mos_rank) / (self.ranked_items - 1)


def rank_from_counts(
    items: int, score_below: int, score_equal: int, mos_below: int, mos_equal: int
) -> Rank | None:
    """Return an item's :class:`Rank` from counts among the ranked items (its own included in the
    ``_equal`` counts); None when no item is ranked."""
    if items < 1 or score_equal < 1 or mos_equal < 1:
        return None
    return Rank(
        score_rank=score_below + (score_equal + 1) / 2,
        mos_rank=mos_below + (mos_equal + 1) / 2,
        ranked_items=items,
    )


class Ranking:
    """Every ranked item's :class:`Rank`, for a stream of traces: built once from the job's
    (item row id, score, MOS) triples, some 24 bytes an item, looked up by row id."""

    def __init__(self, triples: Iterable[tuple[int, float, float]]) -> None:
        from itertools import chain

        import numpy as np
        from scipy.stats import rankdata

        rows = np.fromiter(chain.from_iterable(triples), dtype=float).reshape(-1, 3)
        order = np.argsort(rows[:, 0], kind="stable")
        self._ids: np.ndarray = rows[order, 0].astype(np.int64)
        self._score: np.ndarray = rankdata(rows[order, 1]) if rows.size else np.empty(0)
        self._mos: np.ndarray = rankdata(rows[order, 2]) if rows.size else np.empty(0)

    def __len__(self) -> int:
        return int(self._ids.size)

    def by_disagreement(self, count: int, *, worst: bool = True) -> list[int]:
        """Return the row ids of the ``count`` items whose score and MOS disagree most
        (``worst``) or least, by absolute rank error; ties by row id."""
        import numpy as np

        if count < 1 or not self._ids.size:
            return []
        error = np.abs(self._score - self._mos)
        order = np.lexsort((self._ids, -error if worst else error))
        return [int(row_id) for row_id in self._ids[order[:count]]]

    def rank_errors(self) -> tuple[np.ndarray, np.ndarray]:
        """Return every ranked item's row id (ascending) and its rank error, as arrays."""
        import numpy as np

        if len(self) < 2:
            return self._ids, np.zeros(self._ids.size)
        return self._ids, (self._score - self._mos) / (len(self) - 1)

    def rank(self, row_id: int) -> Rank | None:
        """Return the item's rank, or None when it has no score or no MOS."""
        import numpy as np

        at = int(np.searchsorted(self._ids, row_id))
        if at >= self._ids.size or self._ids[at] != row_id:
            return None
        return Rank(float(self._score[at]), float(self._mos[at]), len(self))


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _seconds(start: Any, end: Any) -> float | None:
    if isinstance(start, datetime) and isinstance(end, datetime):
        return (end - start).total_seconds()
    return None


def object_label(object_name: str | None) -> str | None:
    """Return what a tool call scored, as a trace names it: "whole image" for "Global"."""
    return WHOLE_IMAGE if object_name == "Global" else object_name


def _meta(meta_json: str | None) -> dict[str, Any] | None:
    if not meta_json:
        return None
    try:
        value = json.loads(meta_json)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _plan(plan: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not plan:
        return None
    return {
        "query_type": plan.get("query_type"),
        "query_scope": plan.get("query_scope"),
        "distortion_source": plan.get("distortion_source"),
        "distortions": plan.get("distortions"),
        "reference_mode": plan.get("reference_mode"),
        "required_tool": plan.get("required_tool"),
        "excluded_tools": list(plan.get("excluded_tools") or []),
        "uncatalogued_tools": list(plan.get("uncatalogued_tools") or []),
        "answer_mode": plan.get("answer_mode"),
        "flags": dict(plan.get("plan") or {}),
    }


def _distortions(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    analysis = evidence.get("distortion_analysis") or {}
    return [
        {
            "object": object_label(name),
            "type": entry.get("type"),
            "severity": entry.get("severity"),
            "explanation": redact(entry.get("explanation")),
        }
        for name, entries in analysis.items()
        for entry in entries or []
        if isinstance(entry, Mapping)
    ]


def _tools(logs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "iteration": log["iteration"],
            "object": object_label(log["object_name"]),
            "distortion": log["distortion"],
            "tool": log["tool_name"],
            "requested_tool": log["requested_tool"],
            "raw_score": log["raw_score"],
            "score": log["normalized_score"],
            "fallback": bool(log["fallback"]),
            "cached": bool(log["cached"]),
            "time_s": log["execution_time"],
            "error": redact(log["error"]),
        }
        for log in logs
    ]


def _answer(run: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any] | None:
    if run.get("final_answer") is None and not summary:
        return None
    return {
        "final_answer": redact(run.get("final_answer") or summary.get("final_answer")),
        "quality_score": run.get("quality_score"),
        "reasoning": redact(summary.get("quality_reasoning")),
        "level_distribution": summary.get("level_distribution"),
        "probability_source": summary.get("probability_source"),
        "answered_in_follow_up": bool(summary.get("answered_in_follow_up", False)),
        "answer_unparseable": bool(summary.get("answer_unparseable", False)),
        "unparseable_reason": redact(summary.get("unparseable_reason")),
        "notes": [redact(str(note)) for note in summary.get("notes") or []],
    }


def call_cost(call: Mapping[str, Any], prices: PriceTable | None) -> float | None:
    """Return what one model call cost in USD: 0 for a cache hit, None when its tokens or its
    price are unknown."""
    if call["cache_hit"]:
        return 0.0
    if prices is None or call["input_tokens"] is None or call["output_tokens"] is None:
        return None
    return prices.cost(
        call["backend"],
        call["model"],
        call["endpoint"],
        call["input_tokens"],
        call["output_tokens"],
        call["cached_tokens"] or 0,
        batch=call["batch"] is not None,
    )


def _calls(calls: Sequence[Mapping[str, Any]], prices: PriceTable | None) -> list[dict[str, Any]]:
    return [
        {
            "step": call["step"],
            "iteration": call["iteration"],
            "attempt": call["attempt"],
            "role": call["role"],
            "task": call["task"],
            "backend": call["backend"],
            "model": call["model"],
            "input_tokens": call["input_tokens"],
            "output_tokens": call["output_tokens"],
            "cached_tokens": call["cached_tokens"],
            "cost_usd": call_cost(call, prices),
            "cached": bool(call["cache_hit"]),
            "latency_s": call["latency_s"],
            "batch": call["batch"],
            "error": redact(call["error"]),
        }
        for call in calls
    ]


def _usage(calls: Sequence[Mapping[str, Any]], builtin: str | None) -> dict[str, Any]:
    real = [call for call in calls if not call["cached"]]
    costs = [call["cost_usd"] for call in real]
    return {
        "calls": len(real),
        "cache_hits": len(calls) - len(real),
        "input_tokens": sum(call["input_tokens"] or 0 for call in real),
        "output_tokens": sum(call["output_tokens"] or 0 for call in real),
        "cached_tokens": sum(call["cached_tokens"] or 0 for call in real),
        "cost_usd": None if any(cost is None for cost in costs) else sum(costs, 0.0),
        "models": sorted({f"{c['backend']}/{c['model']}" for c in calls} | _also(builtin)),
    }


def _also(builtin: str | None) -> set[str]:
    return {builtin} if builtin else set()


def _truth(
    item: Mapping[str, Any], answer: dict[str, Any] | None, rank: Rank | None
) -> dict[str, Any]:
    from .metrics import answer_letter

    if item.get("answer_truth"):
        given = answer_letter(answer["final_answer"]) if answer else None
        return {
            "kind": "mcq",
            "truth": item["answer_truth"],
            "answer_letter": given,
            "correct": None if answer is None else given == item["answer_truth"],
        }
    if item.get("mos") is not None:
        return {
            "kind": "mos",
            "truth": item["mos"],
            "score_rank": rank.score_rank if rank else None,
            "mos_rank": rank.mos_rank if rank else None,
            "ranked_items": rank.ranked_items if rank else None,
            "rank_error": rank.rank_error if rank else None,
        }
    return {"kind": None, "truth": None}


def build_trace(
    item: Mapping[str, Any],
    run: Mapping[str, Any] | None,
    *,
    tool_logs: Sequence[Mapping[str, Any]] = (),
    replans: Sequence[Mapping[str, Any]] = (),
    calls: Sequence[Mapping[str, Any]] = (),
    default_query: str | None = None,
    prices: PriceTable | None = None,
    rank: Rank | None = None,
    builtin: str | None = None,
) -> dict[str, Any]:
    """Return one item's trace (keys :data:`TRACE_KEYS`).

    ``item``: its ``job_items`` columns (``job_id``, ``item_key``, ``line``, ``image``,
    ``reference``, ``query``, ``status``, ``error``, ``mos``, ``answer_truth``,
    ``meta_json``); ``run``: its run's (``id``, ``status``, ``backend``, ``iteration_count``,
    ``created_at``, ``started_at``, ``finished_at``, ``final_answer``, ``quality_score``,
    ``error``, ``state_json``), None for an item that never ran; ``tool_logs``, ``replans``
    and ``calls``: the run's ``tool_logs``, ``replan_history`` and ``vlm_calls`` rows in
    order; ``prices`` prices each call; ``rank``: the item among the job's
    (:class:`Ranking`); ``builtin``: the builtin's model where it answered a role (it
    records no call)."""
    state: dict[str, Any] = {}
    if run is not None and run.get("state_json"):
        try:
            state = json.loads(run["state_json"])
        except ValueError:
            state = {}
    evidence = state.get("executor_evidence") or {}
    summary = state.get("summarizer_result") or {}
    answer = _answer(run, summary) if run is not None else None
    model_calls = _calls(calls, prices)
    ran = run is not None and run.get("status") in ("succeeded", "failed", "running")
    return {
        "trace_version": TRACE_VERSION,
        "job_id": item.get("job_id"),
        "item": {
            "id": redact(item["item_key"]),
            "line": item["line"],
            "image": redact(item.get("image")),
            "reference": redact(item.get("reference")),
            "query": redact(item.get("query") or default_query),
            "status": item["status"],
            "error": redact(item.get("error")),
            "mos": item.get("mos"),
            "answer_truth": item.get("answer_truth"),
            "meta": _meta(item.get("meta_json")),
        },
        "run": (
            {
                "id": run["id"],
                "status": run["status"],
                "backend": run.get("backend"),
                "iterations": run.get("iteration_count") or 0,
                "created_at": _iso(run.get("created_at")),
                "started_at": _iso(run.get("started_at")),
                "finished_at": _iso(run.get("finished_at")),
                "duration_s": _seconds(
                    run.get("started_at") or run.get("created_at"), run.get("finished_at")
                ),
                "error": redact(run.get("error")),
                "metric_tools": state.get("metric_tools"),
                "mode": state.get("mode", "agent"),
                "notes": [redact(str(note)) for note in evidence.get("notes") or []],
            }
            if run is not None
            else None
        ),
        "plan": _plan(state.get("plan")),
        "distortions": _distortions(evidence),
        "tools": _tools(tool_logs),
        "answer": answer,
        "replans": [
            {
                "iteration": row["iteration"],
                "reason": redact(row["reason"]),
                "failure": redact(row["failure"]),
                "created_at": _iso(row.get("created_at")),
            }
            for row in replans
        ],
        "model_calls": model_calls,
        "usage": _usage(model_calls, builtin if ran else None),
        "truth": _truth(item, answer, rank),
    }
