"""A job's report from its exported rows: what finished, what failed and why, how well it agrees.

Works on plain row dicts (the export format, see :mod:`agentic_iqa.jobs.export`) or on the same
items as columns (:class:`.columns.JobColumns`, which the database gives a page at a time, so a
job of a million items is reported in arrays, not dicts), never on the database itself: the
same report comes from a live job or from a CSV someone sent; values read back from a CSV as
text are accepted. The report is JSON-able (it can be stored with the job);
:func:`render_text` shows it in a terminal and :func:`render_html` writes one self-contained
page, figures included (inline SVG, :mod:`.figures`), that can be mailed around.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .cells import text as _text
from .errors import failure_reason as failure_reason
from .own_scores import ToolFacts, direction, sign

if TYPE_CHECKING:
    import numpy as np

    from .columns import JobColumns
    from .figures import NamedFigure
    from .metrics import McqTally

# numpy and .metrics (scipy) are imported by the functions that compute: ``eval status``
# imports this module only for :func:`vlm_line`.

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
    them (:func:`agentic_iqa.db.reads.report_columns`; the same report, without a dict per
    item).  The agent's correlation uses done items with a quality score and a MOS (its fused
    [1, 5] score: it has no other).  Each tool's uses the items where it has a score and a MOS
    (whatever the run's outcome, since the tool ran), on its own score (``raw:`` columns),
    sign-corrected as :data:`.own_scores.CONVENTION` says, as papers and pyiqa quote a metric;
    its [1, 5] score's correlations are beside it (``normalized``), with a warning where the
    mapping is not monotone over the job's raw scores (``mapping``), and the agent's SRCC on the
    same items.  MCQ accuracy counts every question run, a failed item or one without a letter
    as wrong (:class:`.metrics.McqTally`).  ``metric_job``: no agent ran, so the per-tool table
    is the whole story and ``agent`` is None.  ``breakdown``: the same per distortion type and
    level where the items' ``meta`` gives them (:mod:`.breakdown`).  ``logistic`` False: no
    logistic fit behind a PLCC (``plcc_logistic`` None; seconds a line at 50,000 items), for
    figures that show none (a job's headline).
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
        "bootstrap": {"resamples": bootstrap, "seed": seed, "confidence": CONFIDENCE},
        "breakdown": _breakdown(columns, facts, metric_job),
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


def is_question(query: Any) -> bool:
    """Whether an item's query is a multiple-choice question (its options lettered in)."""
    from ..query import options_in

    text = _text(query)
    return bool(text and options_in(text))


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


def _tally(mcq: np.ndarray) -> McqTally:
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

    tally = _tally(columns.mcq)
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


def mcq_line(mcq: Mapping[str, Any]) -> str:
    """The MCQ accuracy in one line (over every question run, failures wrong), or why there
    is none."""
    if mcq.get("reason"):
        return f"MCQ accuracy: {mcq['reason']}"
    wrong = [
        f"{mcq['failed']} failed" if mcq.get("failed") else "",
        f"{mcq['no_answer']} without an answer" if mcq.get("no_answer") else "",
    ]
    counted = f"; {' and '.join(w for w in wrong if w)}, counted wrong" if any(wrong) else ""
    interval = f" {CONFIDENCE:.0%} CI {_ci(mcq['accuracy_ci'])}" if mcq.get("accuracy_ci") else ""
    answered = (
        f"; answered only: {_fmt(mcq.get('answered_accuracy'))} "
        f"({mcq['correct']}/{mcq.get('answered', 0)})"
    )
    not_run = f"; {mcq['not_run']} not run" if mcq.get("not_run") else ""
    kept_back = (
        f"; {mcq['withheld']} more without a correct answer ({WITHHELD})"
        if mcq.get("withheld")
        else ""
    )
    return (
        f"MCQ accuracy: {_fmt(mcq['accuracy'])}{interval} ({mcq['correct']}/{mcq['n']} "
        f"correct{counted}{answered}{not_run}{kept_back})"
    )


def _accuracy_by_type(columns: JobColumns) -> list[dict[str, Any]]:
    """MCQ accuracy per question type (Q-Bench's yes-or-no, what, how...), counted as the
    overall one is, where the items say their type; empty when none does."""
    names = columns.question_types
    if not any(names):
        return []
    entries = []
    for kind in sorted(names):
        picked = columns.mcq[columns.question_type == names.index(kind)]
        entries.append({"type": kind or "(none)", **_tally_fields(_tally(picked))})
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
    entry["srcc_raw"] = _finite(srcc(raw_pairs, raw_mos)) if raw_ok else None
    entry["plcc_raw"] = _finite(plcc(raw_pairs, raw_mos)) if raw_ok else None
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


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# -- text -----------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ci(interval: list[float] | None) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-"


def _fit_name(entry: Mapping[str, Any]) -> str:
    """Which monotone fit is behind an entry's PLCC logistic ("5-parameter logistic", ...)."""
    from .metrics import fit_label

    return fit_label(entry.get("logistic_fit"))


#: Short names of the fits, for narrow table columns.
_FIT_SHORT = {"logistic5": "5PL", "logistic4": "4PL", "logistic3": "3PL", "linear": "linear"}


def _job_date(iso: str | None) -> str:
    return "-" if not iso else iso[:19].replace("T", " ") + " UTC"


def job_lines(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The job's header as (label, value) pairs: id, name, dates, query, backend, model."""
    query = job.get("query") or "-"
    if job.get("items_with_own_query"):
        query += f" ({job['items_with_own_query']} item(s) have their own query)"
    rows = [
        ("job", job.get("id") or "-"),
        ("name", job.get("name") or "-"),
        ("submitted", _job_date(job.get("created_at"))),
    ]
    if job.get("finished_at"):
        rows.append(("finished", _job_date(job.get("finished_at"))))
    rows += [
        ("status", job.get("status") or "-"),
        ("query", query),
        ("backend", job.get("backend") or "-"),
        ("model", job.get("model") or "-"),
    ]
    if job.get("group"):
        rows.append(("group", job["group"]))
    if (job.get("spec") or {}).get("subset"):
        rows.append(("rows", job["spec"]["subset"]))
    if job.get("dataset") and job.get("scored_against"):
        rows.append(("truth", f"scored against {job['scored_against']}"))
    if "configuration" in job:
        rows += [("config", line) for line in configuration_lines(job["configuration"])]
    if job.get("answered_by"):
        rows.append(
            ("answered", ", ".join(f"{name} ({n} items)" for name, n in job["answered_by"].items()))
        )
    rows += [("warning", text) for text in job.get("warnings") or ()]
    if job.get("error"):
        rows.append(("stopped", job["error"]))
    return [(label, redact(str(value)) or "-") for label, value in rows]


def configuration_lines(config: Mapping[str, Any] | None) -> list[str]:
    """A job's stored configuration (:mod:`agentic_iqa.runconfig`) in a few lines: roles with
    the same settings together."""
    if not config:
        return ["not stored (a job submitted before configurations were kept)"]
    lines = []
    groups: dict[str, list[str]] = {}
    for role, backend in (config.get("roles") or {}).items():
        where = f" at {backend['base_url']}" if backend.get("base_url") else ""
        text = (
            f"{backend['backend']}"
            + (f" {backend['model']}" if backend.get("model") else "")
            + where
            + f" (temperature {backend.get('temperature')}, max_tokens "
            f"{backend.get('max_tokens')}, images <= {backend.get('max_image_side')} px)"
        )
        groups.setdefault(text, []).append(role)
    lines += [f"{'/'.join(roles)}: {text}" for text, roles in groups.items()]
    tools = config.get("tools") or {}
    lines.append(
        f"tools: device {tools.get('device')}, fallbacks "
        f"{', '.join(tools.get('fallback_chain') or []) or 'none'}, catalogue "
        f"entries of {len(tools.get('catalog') or {})} tools pinned"
        + (
            f"; metric tools {', '.join(config['metric_tools'])}"
            if config.get("metric_tools")
            else ""
        )
    )
    lines.append(
        f"agentic-iqa {config.get('version')}, prompts {config.get('prompts')}, "
        f"max replans {config.get('max_replan_iterations')}, VLM response cache "
        f"{'on' if config.get('vlm_cache') else 'off'}"
    )
    return lines


def provenance_warnings(job: Mapping[str, Any], answered_by: Mapping[str, int]) -> list[str]:
    """What a reader must know about who answered: items answered by more than one
    backend/model, or by one the job was not submitted with."""
    warnings = []
    seen = {name for key in answered_by for name in key.split(";") if name}
    if len(answered_by) > 1:
        warnings.append(
            "items were answered by different backends or models ("
            + ", ".join(f"{name}: {n} items" for name, n in answered_by.items())
            + "): do not read one "
            "figure over them"
        )
    config = job.get("configuration") or {}
    configured = {
        f"{role['backend']}/{role['model']}" for role in (config.get("roles") or {}).values()
    }
    stray = sorted(seen - configured) if config.get("roles") else []
    if stray:
        warnings.append(
            f"answered by {', '.join(stray)}, which the job was not submitted "
            f"with ({', '.join(sorted(configured))})"
        )
    if config.get("builtin_model_ignored"):
        warnings.append(
            "the job was submitted with a model name but no backend (--model "
            "without --backend, before agentic-iqa asked for one): the builtin "
            "backend answered those roles, and no model did"
        )
    return warnings


#: What a report's scores came from, by the job's mode (``eval submit --mode``).
_SCORED = {"agent": "Agent", "vlm": "VLM", "tools": "Tools"}


def scored_label(report: Mapping[str, Any]) -> str:
    """ "Agent", "VLM" or "Tools": what was scored (the job's mode), so that the VLM asked
    alone is never headed as the agent."""
    job = report.get("job") or {}
    mode = job.get("mode") or ("tools" if report.get("kind") == "metric" else "agent")
    return _SCORED.get(str(mode), str(mode))


def render_text(report: Mapping[str, Any]) -> str:
    """The report as plain text for a terminal."""
    counts = report["counts"]
    by_status = ", ".join(f"{status} {n}" for status, n in counts["by_status"].items())
    lines = (
        [f"{label.capitalize() + ':':<11} {value}" for label, value in job_lines(report["job"])]
        if report.get("job")
        else []
    )
    lines.append(f"Items: {counts['total']} ({by_status or 'none'})")
    if report.get("quality_score_mean") is not None:
        lines.append(f"Mean quality score: {report['quality_score_mean']:.3f}")
    agent = report.get("agent")
    if agent is None:
        lines.append(f"Metric job (no agent), {report['items_with_mos']} items with MOS")
        lines.extend(_metric_lines(report))
    else:
        lines.append(f"{scored_label(report)} vs MOS (n={agent['n']}):")
        if agent["reason"]:
            lines.append(f"  {agent['reason']}")
        else:
            for name in ("srcc", "plcc", "krcc"):
                lines.append(
                    f"  {name.upper():<14} {_fmt(agent[name])}  "
                    f"{CONFIDENCE:.0%} CI {_ci(agent[f'{name}_ci'])}"
                )
            lines.append(
                f"  {'PLCC logistic':<14} {_fmt(agent['plcc_logistic'])}  "
                f"(monotone {_fit_name(agent)}"
                + (f"; {agent['logistic_note']})" if agent["logistic_note"] else ")")
            )
    if report["tools"] and agent is not None:
        lines.extend(_tool_lines(report, agent_column=True))
    from .breakdown import text_lines

    lines.extend(text_lines(report.get("breakdown"), {"agent": scored_label(report)}))
    mcq = report.get("mcq")
    if mcq:
        lines.append(mcq_line(mcq))
        for entry in mcq.get("by_type") or ():
            lines.append(
                f"  {entry['type']:<24} {_fmt(entry['accuracy'])} "
                f"({entry['correct']}/{entry['n']}; answered only "
                f"{_fmt(entry.get('answered_accuracy'))}, "
                f"{entry.get('not_answered', 0)} failed or without an answer)"
            )
    failures = report["failures"]
    if failures["total"]:
        lines.append(f"Failures: {failures['total']} ({failures['distinct_reasons']} reasons)")
        for entry in failures["top"]:
            lines.append(f"  {entry['count']:>5}  {entry['reason']}")
    if report["tool_usage"]:
        lines.append(
            "Tools used: " + ", ".join(f"{name} {n}" for name, n in report["tool_usage"].items())
        )
    fallbacks = report["fallbacks"]
    if fallbacks["total"]:
        lines.append(f"Tool fallbacks: {fallbacks['total']} on {fallbacks['items']} item(s)")
    if report.get("vlm"):
        lines.append(f"VLM: {vlm_line(report['vlm'])}")
    return "\n".join(lines) + "\n"


def _metric_lines(report: Mapping[str, Any]) -> list[str]:
    """A metric job's table: each tool against MOS on its own score, sign-corrected."""
    return _tool_lines(report, agent_column=False)


def _flag(tool: Mapping[str, Any]) -> str:
    """ "!" beside a [1,5] figure whose mapping is not monotone over the job's raw scores."""
    return "!" if (tool.get("mapping") or {}).get("monotone") is False else ""


def _short_direction(tool: Mapping[str, Any]) -> str:
    if tool.get("basis") == "normalized":
        return "[1,5]"
    directions: dict[object, str] = {True: "lower", False: "higher"}
    return directions.get(tool.get("lower_is_better"), "?")


def _tool_lines(report: Mapping[str, Any], *, agent_column: bool) -> list[str]:
    """Each tool against MOS: SRCC (with its interval), PLCC, PLCC logistic and KRCC on the
    tool's own score sign-corrected (the headline), then SRCC and PLCC of its [1,5] score,
    flagged "!" where that mapping is not monotone over the job's raw scores."""
    tools = report["tools"]
    width = max([16, *(len(str(tool["tool"])) for tool in tools)])
    agent_head = f" {'agent SRCC':>10}" if agent_column else ""
    lines = [
        "Tools vs MOS (SRCC, PLCC, KRCC on each tool's own score, sign-corrected so that "
        "higher is better; [1,5]: on the paper's mapping of it):",
        f"  {'tool':<{width}} {'better':>6} {'scored':>6} {'n':>5} {'SRCC':>7} "
        f"{'95% CI':>16} {'PLCC':>7} {'PLCC-log':>8} {'KRCC':>7}{agent_head} "
        f"{'SRCC [1,5]':>10} {'PLCC [1,5]':>10}  fit",
    ]
    for tool in tools:
        normalized = tool.get("normalized") or {}
        agent = f" {_fmt(tool['agent_srcc_same_items']):>10}" if agent_column else ""
        flag = _flag(tool)
        lines.append(
            f"  {tool['tool']:<{width}} {_short_direction(tool):>6} {tool['scored']:>6} "
            f"{tool['n']:>5} {_fmt(tool['srcc']):>7} {_ci(tool['srcc_ci']):>16} "
            f"{_fmt(tool['plcc']):>7} {_fmt(tool['plcc_logistic']):>8} "
            f"{_fmt(tool['krcc']):>7}{agent} "
            f"{_fmt(normalized.get('srcc')) + flag:>10} {_fmt(normalized.get('plcc')) + flag:>10}"
            f"  {_FIT_SHORT.get(tool.get('logistic_fit') or '', '-')}"
        )
    lines.append(
        "  better: the tool's direction (lower: its score is negated, so a raw SRCC "
        "of -0.54 reads 0.54); fit: the monotone curve behind PLCC-log (5PL/4PL/"
        "3PL: 5-, 4- or 3-parameter logistic; linear: too few points or no logistic "
        "fitted)"
    )
    if any(tool.get("basis") == "normalized" for tool in tools):
        lines.append(
            "  [1,5] in better: the rows carry no raw score for that tool; its "
            "figures are on its [1,5] score"
        )
    lines += [
        f"  ! {tool['mapping']['warning']}"
        for tool in tools
        if (tool.get("mapping") or {}).get("warning")
    ]
    return lines


def vlm_line(vlm: Mapping[str, Any]) -> str:
    """Calls, cache hits, tokens, cost and cost per item, in one line."""
    from ..vlm.usage import describe

    return describe(vlm)


# -- HTML -----------------------------------------------------------------------------------------

#: The pages' style.  Numbers and intervals never wrap (a line break inside "[0.451, 0.726]"
#: makes two numbers of one); text wraps, inside a word only where the word is longer than
#: the cell, and a text cell keeps a few words' width (a row label is never squeezed to a
#: letter a line); a table wider than the page scrolls in its own box.
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em;
       max-width: 1120px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
td { white-space: nowrap; }
th { background: #f2f2f2; }
td.text, th.text { text-align: left; white-space: normal; overflow-wrap: anywhere;
                   min-width: 5em; }
td.label { min-width: 11em; }
td.ci { white-space: nowrap; }
tr.agent td { font-weight: bold; background: #f8f8ff; }
.note { color: #666; font-size: 0.9em; }
.scroll { max-width: 100%; overflow-x: auto; }
p, li, h1, figcaption { overflow-wrap: anywhere; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
"""


def _cell(value: Any, digits: int = 3, *, text: bool = False) -> str:
    css = ' class="text"' if text else ""
    return f"<td{css}>{html.escape(_fmt(value, digits))}</td>"


def _ci_cell(interval: list[float] | None) -> str:
    """A confidence interval, kept on one line (``td.ci``)."""
    return f'<td class="ci">{html.escape(_ci(interval))}</td>'


def _label_cell(value: Any, title: str | None = None) -> str:
    """A row's name (``td.label``: a few words wide at least); ``title``: what it stands for,
    shown on hover (the job id behind a name)."""
    hover = f' title="{html.escape(redact(title) or "")}"' if title else ""
    return f'<td class="text label"{hover}>{html.escape(redact(_fmt(value)) or "")}</td>'


def _header(*names: str) -> str:
    first, *rest = names
    cells = f'<th class="text">{html.escape(first)}</th>' + "".join(
        f"<th>{html.escape(name)}</th>" for name in rest
    )
    return f"<tr>{cells}</tr>"


def _correlation_rows(label: str, entry: Mapping[str, Any], css: str = "") -> str:
    return (
        f'<tr class="{css}">{_cell(label, text=True)}{_cell(entry["n"])}'
        f"{_cell(entry['srcc'])}{_ci_cell(entry['srcc_ci'])}"
        f"{_cell(entry['plcc'])}{_ci_cell(entry['plcc_ci'])}"
        f"{_cell(entry['plcc_logistic'])}{_cell(_fit_name(entry), text=True)}"
        f"{_cell(entry['krcc'])}{_ci_cell(entry['krcc_ci'])}</tr>"
    )


def _direction_text(tool: Mapping[str, Any]) -> str:
    """ "lower is better, negated", "higher is better", or "[1,5] score" without a raw one."""
    if tool.get("basis") == "normalized":
        return "[1,5] score: no raw score in the rows"
    text = str(tool.get("direction") or "direction unknown")
    return f"{text}, negated" if tool.get("lower_is_better") else text


def _normalized_html(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tools' [1,5] figures (secondary), the raw score's with the tool's own sign, and a
    warning per tool whose mapping is not monotone over the job's raw scores."""
    parts = [
        '<table id="normalized">'
        + _header(
            "tool",
            "scored",
            "SRCC [1,5]",
            "PLCC [1,5]",
            "KRCC [1,5]",
            "[1,5] mapping monotone on this job's raw scores",
            "SRCC, tool's own sign",
            "PLCC, tool's own sign",
        )
    ]
    for tool in tools:
        normalized, mapping = tool.get("normalized") or {}, tool.get("mapping") or {}
        verdicts: dict[object, str] = {
            True: "yes",
            False: f"no: {mapping.get('items', 0)} item(s) ranked the wrong way",
        }
        monotone = verdicts.get(mapping.get("monotone"), "-")
        parts.append(
            f"<tr>{_cell(tool['tool'], text=True)}{_cell(tool['scored'])}"
            f"{_cell(normalized.get('srcc'))}{_cell(normalized.get('plcc'))}"
            f"{_cell(normalized.get('krcc'))}{_cell(monotone, text=True)}"
            f"{_cell(tool.get('srcc_raw'))}{_cell(tool.get('plcc_raw'))}</tr>"
        )
    parts.append("</table>")
    parts += [
        f'<p class="note warning">{html.escape(tool["mapping"]["warning"])}</p>'
        for tool in tools
        if (tool.get("mapping") or {}).get("warning")
    ]
    parts.append(
        '<p class="note">[1,5]: the same on the score mapped by the paper\'s logistic '
        "(Table 5), secondary; a mapping that is not monotone over the photos' raw "
        "scores ranks some of them the wrong way. Tool's own sign: the raw score's "
        "correlation as pyiqa prints it.</p>"
    )
    return "".join(parts)


def _interval_note(report: Mapping[str, Any]) -> str:
    settings = report["bootstrap"]
    return (
        f"{settings['confidence']:.0%} intervals: percentile bootstrap over "
        f"{settings['resamples']} resamples of the pairs (seed {settings['seed']}); "
        "PLCC logistic: PLCC after a monotone fit of scores to MOS: the 5-parameter "
        "logistic, bounded so that it rises (or falls) with the scores everywhere, or, "
        "when that fit fails or there are fewer than 10 points, a 4- or 3-parameter "
        "logistic (at least 8 or 6 points), else a straight line (the fit column)."
    )


def _vlm_html(vlm: Mapping[str, Any]) -> str:
    from ..vlm.usage import format_cost

    unpriced = (
        f'<p class="note">No price for {html.escape(", ".join(vlm["unpriced_models"]))}'
        " in the price table: cost unknown.</p>"
        if vlm.get("unpriced_models")
        else ""
    )
    return (
        '<h2>VLM usage</h2><table id="vlm">'
        + _header(
            "calls",
            "cache hits",
            "input tokens",
            "cached input tokens",
            "output tokens",
            "cost (USD)",
            "cost per item",
        )
        + f"<tr>{_cell(vlm['calls'])}{_cell(vlm['cache_hits'])}{_cell(vlm['input_tokens'])}"
        f"{_cell(vlm['cached_tokens'])}{_cell(vlm['output_tokens'])}"
        f"{_cell(format_cost(vlm['cost_usd']), text=True)}"
        f"{_cell(format_cost(vlm.get('cost_per_item_usd')), text=True)}</tr></table>" + unpriced
    )


def report_title(report: Mapping[str, Any]) -> str:
    """ "Evaluation job report: NAME (1a2b3c4d)", or the generic title without a ``job``."""
    job = report.get("job")
    if not job:
        return "Evaluation job report"
    return f"Evaluation job report: {redact(str(job.get('name')))} ({str(job.get('id'))[:8]})"


def render_html(
    report: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]] | JobColumns,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    figures: Sequence[NamedFigure] | None = None,
) -> Path:
    """Write one self-contained HTML page (inline CSS, figures as inline SVG) and return its
    path.

    ``rows`` supply the scatter plots' points (:func:`.figures.report_figures`, unless the
    ``figures`` are given: those ``eval report --figures`` writes); everything else comes
    from ``report``.  The title and the header name the job (``report["job"]``: id,
    name, dates, query, backend, model) when the report has one; every value is HTML-escaped.
    """
    from .breakdown import html_tables
    from .figures import html_figure, report_figures

    title = title or report_title(report)
    drawn = {
        named.name: named
        for named in (
            figures
            if figures is not None
            else report_figures(report, rows, scored=scored_label(report))
        )
    }
    counts = report["counts"]
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if report.get("job"):
        parts.append(
            '<table id="job">'
            + "".join(
                f'<tr><th class="text">{html.escape(label)}</th>{_cell(value, text=True)}</tr>'
                for label, value in job_lines(report["job"])
            )
            + "</table>"
        )
    parts += ["<h2>Items</h2><table>", _header("status", "items")]
    for status, n in counts["by_status"].items():
        parts.append(f"<tr>{_cell(status, text=True)}{_cell(n)}</tr>")
    parts.append(f"<tr>{_cell('total', text=True)}{_cell(counts['total'])}</tr></table>")

    agent = report.get("agent")
    parts.append("<h2>Agreement with human opinion (MOS)</h2>")
    if agent is None:
        parts.append(
            '<p class="note">A metric job: no agent ran. Each tool\'s own score per '
            "item against MOS, sign-corrected so that higher is better (a "
            "lower-is-better tool's score is negated).</p>"
        )
        parts.append('<table id="correlations">')
        parts.append(
            _header(
                "tool",
                "n",
                "SRCC",
                "95% CI",
                "PLCC",
                "95% CI",
                "PLCC logistic",
                "fit",
                "KRCC",
                "95% CI",
            )
        )
        for tool in report["tools"]:
            parts.append(
                _correlation_rows(f"{tool['tool']} ({_direction_text(tool)})", tool, "tool")
            )
        parts.append("</table>")
        parts.append(f'<p class="note">{_interval_note(report)}</p>')
        parts.append(_normalized_html(report["tools"]))
        parts += [
            html_figure(named) for name, named in drawn.items() if name.startswith("scatter-tool-")
        ]
    else:
        if agent["reason"]:
            parts.append(f'<p class="note">{html.escape(agent["reason"])}</p>')
        parts.append('<table id="correlations">')
        parts.append(
            _header(
                "scores",
                "n",
                "SRCC",
                "95% CI",
                "PLCC",
                "95% CI",
                "PLCC logistic",
                "fit",
                "KRCC",
                "95% CI",
            )
        )
        parts.append(_correlation_rows(scored_label(report).lower(), agent, "agent"))
        parts.append("</table>")
        if agent.get("logistic_note"):
            parts.append(f'<p class="note">{html.escape(agent["logistic_note"])}</p>')
        parts.append(f'<p class="note">{_interval_note(report)}</p>')
        if "scatter-agent" in drawn:
            parts.append(html_figure(drawn["scatter-agent"]))
        else:
            parts.append('<p class="note">No done item has both a predicted score and a MOS.</p>')

    if report["tools"] and agent is not None:
        parts.append(
            '<h2>Per tool</h2><p class="note">Each tool\'s own score (mean per '
            "item), sign-corrected so that higher is better, against MOS, on the items "
            "where the tool gave a score; the agent's SRCC on the same items is beside "
            "it.</p>"
        )
        parts.append('<table id="tools">')
        parts.append(
            _header(
                "tool",
                "better",
                "scored",
                "n with MOS",
                "SRCC",
                "95% CI",
                "PLCC",
                "PLCC logistic",
                "fit",
                "KRCC",
                "agent SRCC, same items",
            )
        )
        for tool in report["tools"]:
            parts.append(
                f'<tr class="tool">{_cell(tool["tool"], text=True)}'
                f"{_cell(_direction_text(tool), text=True)}{_cell(tool['scored'])}"
                f"{_cell(tool['n'])}{_cell(tool['srcc'])}{_ci_cell(tool['srcc_ci'])}"
                f"{_cell(tool['plcc'])}{_cell(tool['plcc_logistic'])}"
                f"{_cell(_fit_name(tool), text=True)}{_cell(tool['krcc'])}"
                f"{_cell(tool['agent_srcc_same_items'])}</tr>"
            )
        parts.append("</table>")
        parts.append(_normalized_html(report["tools"]))

    if report.get("breakdown"):
        parts.append(
            "<h2>By distortion</h2>"
            + html_tables(report["breakdown"], {"agent": scored_label(report).lower()})
        )
        parts += [
            html_figure(named) for name, named in drawn.items() if name.startswith("breakdown-")
        ]
    mcq = report.get("mcq")
    if mcq and mcq.get("reason"):
        parts.append(
            f'<h2>Multiple choice</h2><p class="note" id="mcq">{html.escape(mcq_line(mcq))}</p>'
        )
    elif mcq:
        parts.append('<h2>Multiple choice</h2><table id="mcq">')
        parts.append(
            _header(
                "accuracy",
                "95% CI",
                "correct",
                "questions",
                "failed",
                "no answer",
                "answered-only accuracy",
                "answered",
                "not run",
            )
        )
        parts.append(
            f"<tr>{_cell(mcq['accuracy'])}{_ci_cell(mcq.get('accuracy_ci'))}"
            f"{_cell(mcq['correct'])}{_cell(mcq['n'])}{_cell(mcq.get('failed'))}"
            f"{_cell(mcq.get('no_answer'))}{_cell(mcq.get('answered_accuracy'))}"
            f"{_cell(mcq.get('answered'))}{_cell(mcq.get('not_run'))}</tr></table>"
        )
        parts.append(
            '<p class="note">Accuracy is over every question run: an item that failed, '
            'or finished without a letter ("Unable to determine", an unparseable '
            "reply), counts as wrong, as lm-evaluation-harness and VLMEvalKit count "
            "it; answered-only accuracy leaves those out. Questions not run (queued, or "
            "the job cancelled first) are not counted.</p>"
        )
        if mcq.get("withheld"):
            parts.append(
                f'<p class="note">{mcq["withheld"]} question(s) without a correct '
                f"answer ({WITHHELD}) are not counted.</p>"
            )
        if mcq.get("by_type"):
            parts.append(
                '<table id="mcq-types">'
                + _header(
                    "question type",
                    "accuracy",
                    "correct",
                    "questions",
                    "failed or no answer",
                    "answered-only accuracy",
                )
            )
            parts.extend(
                f"<tr>{_cell(e['type'], text=True)}{_cell(e['accuracy'])}"
                f"{_cell(e['correct'])}{_cell(e['n'])}{_cell(e.get('not_answered'))}"
                f"{_cell(e.get('answered_accuracy'))}</tr>"
                for e in mcq["by_type"]
            )
            parts.append("</table>")

    failures = report["failures"]
    if failures["total"]:
        parts.append(
            f'<h2>Failures</h2><p class="note">{failures["total"]} failed item(s), '
            f"{failures['distinct_reasons']} distinct reason(s); the most common:</p>"
        )
        parts.append('<table id="failures">')
        parts.append(_header("reason", "items", "example item", "example error"))
        for entry in failures["top"]:
            parts.append(
                f"<tr>{_cell(entry['reason'], text=True)}{_cell(entry['count'])}"
                f"{_cell(entry['example_item'], text=True)}"
                f"{_cell(entry['example_error'], text=True)}</tr>"
            )
        parts.append("</table>")
    if report.get("vlm"):
        parts.append(_vlm_html(report["vlm"]))
    parts.append("</body></html>\n")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # --html out/report.html on a fresh machine
    target.write_text("\n".join(parts), encoding="utf-8")
    return target
