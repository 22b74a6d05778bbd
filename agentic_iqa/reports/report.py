"""Build a job's report from its rows: what finished, what failed and why, how well it agrees.

Works on plain row dicts (the export format, see :mod:`agentic_iqa.reports.export`) or on the same
items as columns (:class:`.columns.JobColumns`, which the database gives a page at a time, so a
job of a million items is reported in arrays, not dicts), never on the database itself: the
same report comes from a live job or from a CSV someone sent; values read back from a CSV as
text are accepted. The report is JSON-able (it can be stored with the job);
:func:`.report_text.render_text` shows it in a terminal and :func:`.report_html.render_html`
writes one self-contained page, figures included, that can be mailed around.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .cells import finite_or_none
from .own_scores import ToolFacts, direction, sign

if TYPE_CHECKING:
    import numpy as np

    from .columns import JobColumns
    from .metrics import McqTally

# numpy and .metrics (scipy) are imported by the functions that compute: ``eval status``
# imports the report's text only for :func:`.report_text.vlm_line`.

#: How many failure reasons the report lists (the rest are only counted).
TOP_FAILURES = 10
CONFIDENCE = 0.95
#: Why a job has no MCQ accuracy although its items are questions.
NOT_APPLICABLE = "not applicable (tools mode gives scores, not answers)"
WITHHELD = "answers withheld"


def build_report(
    rows: Iterable[Mapping[str, Any]] | JobColumns,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    metric_job: bool = False,
    logistic: bool = True,
) -> dict[str, Any]:
    """Counts, failures by reason, agent and per-tool correlation with MOS, and MCQ accuracy.

    ``rows``: exported rows, or a job's :class:`.columns.JobColumns` as the database gives
    them (:func:`agentic_iqa.db.exports.report_columns`; the same report, without a dict per
    item).  The agent's correlation uses done items with a quality score and a MOS (its fused
    [1, 5] score: it has no other).  Each tool's uses the items where it has a score and a MOS
    (whatever the run's outcome, since the tool ran), on its own score (``raw:`` columns),
    sign-corrected as :data:`.own_scores.CONVENTION` says, as papers and pyiqa quote a metric;
    its [1, 5] score's correlations are beside it (``normalized``), with a warning where the
    mapping is not monotone over the job's raw scores (``mapping``), and the agent's SRCC on the
    same items.  MCQ accuracy counts every question run, a failed item or one without a letter
    as wrong (:class:`.metrics.McqTally`).  ``metric_job``: no agent ran, so the per-tool table
    is the whole story and ``agent`` is None.  ``unread``: done items whose answer could not be
    read, those whose model said it cannot see the image apart.  ``breakdown``: the same per
    distortion type and level where the items' ``meta`` gives them (:mod:`.breakdown`).
    ``logistic`` False: no logistic fit behind a PLCC (``plcc_logistic`` None; seconds a line at
    50,000 items), for figures that show none (a job's headline).
    """
    import numpy as np

    from .columns import JobColumns
    from .metrics import correlation_report
    from .own_scores import CONVENTION

    columns = rows if isinstance(rows, JobColumns) else JobColumns.from_rows(rows, identities=False)
    statuses = columns.statuses
    facts = _facts({}, columns.tools)
    scored = ~np.isnan(columns.score)
    agent_at = columns.positions(columns.score)
    agent_report = correlation_report(
        columns.score[agent_at],
        columns.mos[agent_at],
        bootstrap=bootstrap,
        seed=seed,
        logistic=logistic,
    )
    if not columns.with_mos:
        agent_report["reason"] = "no item has a MOS: nothing to correlate with"
    failures = columns.failures
    return {
        "kind": "metric" if metric_job else "agent",
        "counts": {
            "total": columns.size,
            "done": statuses.get("done", 0),
            "failed": statuses.get("failed", 0),
            "by_status": dict(sorted(statuses.items())),
        },
        "failures": {
            "total": statuses.get("failed", 0),
            "distinct_reasons": len(failures),
            "top": [
                {
                    "reason": reason,
                    "count": count,
                    "example_item": columns.examples[reason][0],
                    "example_error": columns.examples[reason][1],
                }
                for reason, count in failures.most_common(TOP_FAILURES)
            ],
        },
        "items_with_mos": columns.with_mos,
        "quality_score_mean": (float(np.mean(columns.score[scored])) if scored.any() else None),
        "agent": None if metric_job else agent_report,
        "tools": [
            _tool_entry(name, columns, facts[name], bootstrap, seed, logistic)
            for name in sorted(columns.tools)
        ],
        "convention": CONVENTION,
        "mcq": _mcq_entry(columns, metric_job, bootstrap, seed),
        "tool_usage": dict(sorted(columns.tool_usage.items())),
        "fallbacks": {"total": columns.fallbacks, "items": columns.items_with_fallbacks},
        "answered_by": dict(columns.answered_by.most_common()),
        "unread": _unread_entry(columns),
        "bootstrap": {"resamples": bootstrap, "seed": seed, "confidence": CONFIDENCE},
        "breakdown": _breakdown(columns, facts, metric_job),
    }


def _unread_entry(columns: JobColumns) -> dict[str, int]:
    """Done items whose answer could not be read: in all, those whose model said it cannot see
    the image (``cannot_see``; from :data:`.unread.CANNOT_SEE_WARN_AT` of them the job warns),
    the others (several letters, none, cut off), and the count the warning starts at."""
    from .unread import CANNOT_SEE, CANNOT_SEE_WARN_AT

    cannot_see = columns.unread.get(CANNOT_SEE, 0)
    total = sum(columns.unread.values())
    return {
        "total": total,
        "cannot_see": cannot_see,
        "other": total - cannot_see,
        "warn_at": CANNOT_SEE_WARN_AT,
    }


def _own_score(columns: JobColumns, name: str, facts: ToolFacts) -> np.ndarray:
    """A tool's score per item as its correlations take it: its raw score sign-corrected,
    else (no raw score in the rows) its [1, 5] score."""
    import numpy as np

    raw = columns.raw.get(name)
    normalized = columns.normalized.get(name)
    size = columns.size
    own = normalized.copy() if normalized is not None else np.full(size, np.nan)
    if raw is not None:
        has_raw = ~np.isnan(raw)
        own[has_raw] = sign(facts) * raw[has_raw]
    return own


def _breakdown(
    columns: JobColumns, facts: Mapping[str, ToolFacts], metric_job: bool
) -> dict[str, Any] | None:
    """The report's breakdown by distortion type and level (:func:`.breakdown.breakdown`) of
    the items with a MOS and a type or a level: the agent's score, or each tool's own score,
    sign-corrected, of a metric job."""
    import numpy as np

    from .breakdown import breakdown

    at = np.flatnonzero(~np.isnan(columns.mos) & ((columns.distortion >= 0) | (columns.level >= 0)))
    if not at.size:
        return None
    lines = sorted(columns.tools) if metric_job else ["agent"]
    scores = {
        name: (
            _own_score(columns, name, facts[name])[at]
            if name in facts
            else np.full(at.size, np.nan)
        )
        for name in lines
        if name != "agent"
    }
    if not metric_job:
        scores["agent"] = columns.score[at]
    names, levels = columns.distortion_names, columns.level_names
    return breakdown(
        [names[i] if i >= 0 else None for i in columns.distortion[at]],
        [levels[i] if i >= 0 else None for i in columns.level[at]],
        columns.mos[at],
        {name: scores[name] for name in lines},
        columns.distortion_order,
    )


def _facts(known: dict[str, ToolFacts], names: Iterable[str]) -> dict[str, ToolFacts]:
    """``known`` with the catalogue's facts of any name it lacks (looked up once per name)."""
    from .own_scores import tool_facts

    missing = [name for name in names if name not in known]
    if missing:
        known.update(tool_facts(missing))
    return known


def _tally_fields(tally: McqTally) -> dict[str, Any]:
    """The counts of a :class:`.metrics.McqTally` as a report's fields: ``accuracy`` over every
    question counted (``n``), ``answered_accuracy`` over those answered with a letter."""
    return {
        "accuracy": tally.accuracy,
        "n": tally.questions,
        "correct": tally.correct,
        "answered": tally.answered,
        "answered_accuracy": tally.answered_accuracy,
        "no_answer": tally.no_answer,
        "failed": tally.failed,
        "not_answered": tally.no_answer + tally.failed,
    }


def tally_answers(mcq: np.ndarray) -> McqTally:
    """The :class:`.metrics.McqTally` of items' MCQ outcomes (:data:`.columns.RIGHT` ...)."""
    import numpy as np

    from .columns import FAILED, NO_ANSWER, RIGHT, WRONG
    from .metrics import McqTally

    counts = np.bincount(mcq, minlength=5)
    return McqTally(
        correct=int(counts[RIGHT]),
        answered=int(counts[RIGHT] + counts[WRONG]),
        no_answer=int(counts[NO_ANSWER]),
        failed=int(counts[FAILED]),
    )


def _mcq_entry(
    columns: JobColumns, metric_job: bool, bootstrap: int, seed: int
) -> dict[str, Any] | None:
    """MCQ accuracy over every question run (``accuracy``, of ``n``; a failed item or one
    without a letter is wrong), answered-only accuracy and the counts beside it; or, where the
    items are questions that no accuracy can be measured on, why (``reason``): a metric job
    gives scores, not answers; a split without its answers (Q-Bench's test) has nothing to be
    right against.  None when no item is a question."""
    from .columns import NOT_COUNTED, RIGHT
    from .metrics import proportion_ci

    tally = tally_answers(columns.mcq)
    questions, withheld, not_run = columns.questions, columns.withheld, columns.not_run
    if not questions and not tally.questions and not not_run:
        return None
    entry: dict[str, Any] = {
        **_tally_fields(tally),
        "accuracy_ci": None,
        "not_run": not_run,
        "by_type": _accuracy_by_type(columns),
        "questions": questions,
        "withheld": withheld,
        "reason": None,
    }
    if tally.questions and bootstrap > 0:
        counted = columns.mcq[columns.mcq != NOT_COUNTED]
        interval = proportion_ci(counted == RIGHT, n=bootstrap, confidence=CONFIDENCE, seed=seed)
        entry["accuracy_ci"] = list(interval) if interval else None
    if metric_job:
        entry.update(
            accuracy=None,
            answered_accuracy=None,
            accuracy_ci=None,
            n=0,
            correct=0,
            answered=0,
            no_answer=0,
            failed=0,
            not_answered=0,
            not_run=0,
            by_type=[],
            reason=NOT_APPLICABLE,
        )
    elif withheld == questions and not tally.questions:
        entry["reason"] = (
            f"{WITHHELD} (none of the {questions} questions gives its correct "
            "answer, e.g. Q-Bench's test split): accuracy cannot be measured"
        )
    return entry


def _accuracy_by_type(columns: JobColumns) -> list[dict[str, Any]]:
    """MCQ accuracy per question type (Q-Bench's yes-or-no, what, how...), counted as the
    overall one is, where the items say their type; empty when none does."""
    names = columns.question_types
    if not any(names):
        return []
    entries = []
    for kind in sorted(names):
        picked = columns.mcq[columns.question_type == names.index(kind)]
        entries.append({"type": kind or "(none)", **_tally_fields(tally_answers(picked))})
    return entries


def _tool_entry(
    name: str,
    columns: JobColumns,
    facts: ToolFacts,
    bootstrap: int,
    seed: int,
    logistic: bool = True,
) -> dict[str, Any]:
    """A tool's correlations on its own score, sign-corrected (``basis`` "raw"; "normalized"
    where the rows carry no raw score, a CSV from before), the [1, 5] score's beside them
    (``normalized``), and whether the mapping is monotone over the job's raw scores."""
    import numpy as np

    from .metrics import correlation_report, plcc, srcc
    from .own_scores import mapping_check

    size = columns.size
    raw = columns.raw.get(name, np.full(size, np.nan))
    normalized = columns.normalized.get(name, np.full(size, np.nan))
    raw_all = raw[~np.isnan(raw)]
    scores = normalized[~np.isnan(normalized)]
    basis = "raw" if raw_all.size else "normalized"
    factor = sign(facts) if basis == "raw" else 1.0
    own = raw if basis == "raw" else normalized
    at = columns.positions(own)
    pred, mos, agent = own[at], columns.mos[at], columns.score[at]
    entry: dict[str, Any] = {
        "tool": name,
        "scored": int(scores.size or raw_all.size),
        "mean_score": float(np.mean(scores)) if scores.size else None,
        "basis": basis,
        "lower_is_better": facts.lower_is_better,
        "direction": direction(facts),
        "sign": factor,
    }
    entry.update(
        correlation_report(factor * pred, mos, bootstrap=bootstrap, seed=seed, logistic=logistic)
    )
    both = ~np.isnan(agent)
    agent_value = None
    if np.count_nonzero(both) >= 3:
        value = srcc(agent[both], mos[both])
        agent_value = value if math.isfinite(value) else None
    entry["agent_srcc_same_items"] = agent_value
    entry["agent_n_same_items"] = int(np.count_nonzero(both))
    raw_at = columns.positions(raw)
    raw_pairs, raw_mos = raw[raw_at], columns.mos[raw_at]
    raw_ok = raw_pairs.size >= 3 and np.ptp(raw_pairs) > 0 and np.ptp(raw_mos) > 0
    # The raw score's correlations with the tool's own sign, as pyiqa prints them.
    entry["srcc_raw"] = finite_or_none(srcc(raw_pairs, raw_mos)) if raw_ok else None
    entry["plcc_raw"] = finite_or_none(plcc(raw_pairs, raw_mos)) if raw_ok else None
    normalized_at = columns.positions(normalized)
    summary = correlation_report(
        normalized[normalized_at], columns.mos[normalized_at], bootstrap=0, logistic=logistic
    )
    entry["normalized"] = {
        key: summary[key]
        for key in ("n", "srcc", "plcc", "krcc", "plcc_logistic", "logistic_fit", "reason")
    }
    entry["mapping"] = mapping_check(name, facts, raw_all)
    return entry
