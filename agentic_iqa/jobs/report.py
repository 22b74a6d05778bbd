"""A job's report from its exported rows: what finished, what failed and why, how well it agrees.

Works on plain row dicts (the export format, see :mod:`agentic_iqa.jobs.export`) rather than on
the database, so the same report comes from a live job or from a CSV someone sent; values read
back from a CSV as text are accepted. The report is JSON-able (it can be stored with the job);
:func:`render_text` shows it in a terminal and :func:`render_html` writes one self-contained
page, figures included (inline SVG, :mod:`.figures`), that can be mailed around.
"""

from __future__ import annotations

import html
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .cells import number as _number
from .cells import text as _text
from .export import RAW_PREFIX, TOOL_PREFIX

if TYPE_CHECKING:
    from .figures import NamedFigure

# numpy and .metrics (scipy) are imported by the functions that compute: ``eval status``
# imports this module only for :func:`vlm_line`.

#: How many failure reasons the report lists (the rest are only counted).
TOP_FAILURES = 10
CONFIDENCE = 0.95
#: Why a job has no MCQ accuracy although its items are questions.
NOT_APPLICABLE = "not applicable (tools mode gives scores, not answers)"
WITHHELD = "answers withheld"


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def failure_reason(error: str | None) -> str:
    """An error message with its item-specific parts (quoted paths, numbers) blanked out.

    "image 'a.jpg' on line 7 not found" and "image 'b.jpg' on line 9 not found" are the same
    reason; the report counts reasons and keeps one full message as an example.
    """
    text = redact(_text(error))
    if text is None:
        return "(no error message)"
    first = text.splitlines()[0].strip()
    return _NUMBER.sub("N", _QUOTED.sub("'…'", first))[:200]


@dataclass
class _Pairs:
    """Scores and MOS collected in one pass over the rows (floats only, no rows kept)."""

    pred: list[float] = field(default_factory=list)
    mos: list[float] = field(default_factory=list)
    agent: list[float | None] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    raw_mos: list[float] = field(default_factory=list)


def build_report(rows: Iterable[Mapping[str, Any]], *, bootstrap: int = 1000,
                 seed: int = 0, metric_job: bool = False) -> dict[str, Any]:
    """Counts, failures by reason, agent and per-tool correlation with MOS, and MCQ accuracy.

    The agent's correlation uses done items with a quality score and a MOS; each tool's uses
    the items where it has a score and a MOS (whatever the run's outcome, since the tool ran),
    with the agent's SRCC on those same items beside it for a fair comparison. MCQ accuracy is
    over done items whose true answer is known.  Each tool also gets SRCC and PLCC of its raw
    scores (``raw:`` columns), the figures papers quote.  ``metric_job``: no agent ran, so the
    per-tool table is the whole story and ``agent`` is None.  ``breakdown``: the same per
    distortion type and level where the items' ``meta`` gives them (:mod:`.breakdown`).
    """
    import numpy as np

    from .breakdown import DistortionScores
    from .metrics import correlation_report, mcq_accuracy

    statuses: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    examples: dict[str, tuple[str | None, str | None]] = {}
    agent = _Pairs()
    tools: dict[str, _Pairs] = {}
    tool_scores: dict[str, list[float]] = {}
    tool_usage: Counter[str] = Counter()
    answers: list[str | None] = []
    truths: list[str | None] = []
    question_types: list[str] = []
    unanswered = fallbacks = items_with_fallbacks = mos_known = questions = withheld = 0
    scores: list[float] = []
    answered_by: Counter[str] = Counter()
    distortions = DistortionScores()
    for row in rows:
        status = _text(row.get("status")) or "unknown"
        statuses[status] += 1
        done = status == "done"
        if row.get("answered_by"):
            answered_by[str(row["answered_by"])] += 1
        if status == "failed":
            reason = failure_reason(row.get("error"))
            failures[reason] += 1
            examples.setdefault(reason, (_text(row.get("item_id")),
                                         redact(_text(row.get("error")))))
        mos = _number(row.get("mos"))
        score = _number(row.get("quality_score")) if done else None
        mos_known += mos is not None
        if score is not None:
            scores.append(score)
            if mos is not None:
                agent.pred.append(score)
                agent.mos.append(mos)
        truth = _text(row.get("answer_truth"))
        if truth is not None or is_question(row.get("query")):
            questions += 1
            withheld += truth is None
        if truth is not None:
            if done:
                answers.append(_text(row.get("final_answer")))
                truths.append(truth)
                question_types.append(_text(row.get("question_type")) or "")
            else:
                unanswered += 1
        count = int(_number(row.get("fallbacks")) or 0)
        fallbacks += count
        items_with_fallbacks += count > 0
        tool_usage.update(name for name in (_text(row.get("tools")) or "").split(";")
                          if name.strip())
        for key, value in row.items():
            if key.startswith(RAW_PREFIX):
                raw_score = _number(value)
                if raw_score is not None and mos is not None:
                    pairs = tools.setdefault(key[len(RAW_PREFIX):], _Pairs())
                    pairs.raw.append(raw_score)
                    pairs.raw_mos.append(mos)
                continue
            if not key.startswith(TOOL_PREFIX):
                continue
            name = key[len(TOOL_PREFIX):]
            pairs = tools.setdefault(name, _Pairs())
            tool_scores.setdefault(name, [])
            tool_score = _number(value)
            if tool_score is None:
                continue
            tool_scores[name].append(tool_score)
            if mos is not None:
                pairs.pred.append(tool_score)
                pairs.mos.append(mos)
                pairs.agent.append(score)
        distortions.add(row, mos, None if metric_job else score)
    total = sum(statuses.values())
    accuracy, answered = mcq_accuracy(answers, truths)
    agent_report = correlation_report(agent.pred, agent.mos, bootstrap=bootstrap, seed=seed)
    if not mos_known:
        agent_report["reason"] = "no item has a MOS: nothing to correlate with"
    return {
        "kind": "metric" if metric_job else "agent",
        "counts": {"total": total, "done": statuses.get("done", 0),
                   "failed": statuses.get("failed", 0), "by_status": dict(sorted(
                       statuses.items()))},
        "failures": {
            "total": statuses.get("failed", 0), "distinct_reasons": len(failures),
            "top": [{"reason": reason, "count": count, "example_item": examples[reason][0],
                     "example_error": examples[reason][1]}
                    for reason, count in failures.most_common(TOP_FAILURES)],
        },
        "items_with_mos": mos_known,
        "quality_score_mean": float(np.mean(scores)) if scores else None,
        "agent": None if metric_job else agent_report,
        "tools": [_tool_entry(name, tools[name], tool_scores.get(name, []), bootstrap, seed)
                  for name in sorted(tools)],
        "mcq": _mcq_entry(accuracy, answered, unanswered, questions, withheld,
                          _accuracy_by_type(answers, truths, question_types), metric_job),
        "tool_usage": dict(sorted(tool_usage.items())),
        "fallbacks": {"total": fallbacks, "items": items_with_fallbacks},
        "answered_by": dict(answered_by.most_common()),
        "bootstrap": {"resamples": bootstrap, "seed": seed, "confidence": CONFIDENCE},
        "breakdown": distortions.report(sorted(tools) if metric_job else ["agent"]),
    }


def is_question(query: Any) -> bool:
    """Whether an item's query is a multiple-choice question (its options lettered in)."""
    from ..query import options_in

    text = _text(query)
    return bool(text and options_in(text))


def _mcq_entry(accuracy: float | None, answered: int, unanswered: int, questions: int,
               withheld: int, by_type: list[dict[str, Any]], metric_job: bool
               ) -> dict[str, Any] | None:
    """MCQ accuracy; or, where the items are questions that no accuracy can be measured on,
    why (``reason``): a metric job gives scores, not answers; a split without its answers
    (Q-Bench's test) has nothing to be right against.  None when no item is a question."""
    if not questions and not unanswered:
        return None
    entry: dict[str, Any] = {"accuracy": accuracy, "n": answered,
                             "correct": round(accuracy * answered) if accuracy is not None
                             else 0, "not_answered": unanswered, "by_type": by_type,
                             "questions": questions, "withheld": withheld, "reason": None}
    if metric_job:
        entry.update(accuracy=None, n=0, correct=0, not_answered=0, by_type=[],
                     reason=NOT_APPLICABLE)
    elif withheld == questions:
        entry["reason"] = (f"{WITHHELD} (none of the {questions} questions gives its correct "
                           "answer, e.g. Q-Bench's test split): accuracy cannot be measured")
    return entry


def mcq_line(mcq: Mapping[str, Any]) -> str:
    """The MCQ accuracy in one line, or why there is none."""
    if mcq.get("reason"):
        return f"MCQ accuracy: {mcq['reason']}"
    unanswered = f", {mcq['not_answered']} not answered" if mcq["not_answered"] else ""
    kept_back = (f"; {mcq['withheld']} more without a correct answer ({WITHHELD})"
                 if mcq.get("withheld") else "")
    return (f"MCQ accuracy: {_fmt(mcq['accuracy'])} ({mcq['correct']}/{mcq['n']} "
            f"correct{unanswered}{kept_back})")


def _accuracy_by_type(answers: list[str | None], truths: list[str | None],
                      question_types: list[str]) -> list[dict[str, Any]]:
    """MCQ accuracy per question type (Q-Bench's yes-or-no, what, how...), where the items say
    their type; empty when none does."""
    from .metrics import mcq_accuracy

    if not any(question_types):
        return []
    entries = []
    for kind in sorted(set(question_types)):
        picked = [i for i, t in enumerate(question_types) if t == kind]
        accuracy, n = mcq_accuracy([answers[i] for i in picked], [truths[i] for i in picked])
        entries.append({"type": kind or "(none)", "accuracy": accuracy, "n": n,
                        "correct": round(accuracy * n) if accuracy is not None else 0})
    return entries


def _tool_entry(name: str, pairs: _Pairs, scores: list[float], bootstrap: int,
                seed: int) -> dict[str, Any]:
    import numpy as np

    from .metrics import correlation_report, plcc, srcc

    entry: dict[str, Any] = {"tool": name, "scored": len(scores),
                             "mean_score": float(np.mean(scores)) if scores else None}
    entry.update(correlation_report(pairs.pred, pairs.mos, bootstrap=bootstrap, seed=seed))
    both = [(a, m) for a, m in zip(pairs.agent, pairs.mos, strict=True) if a is not None]
    agent_value = None
    if len(both) >= 3:
        value = srcc([a for a, _ in both], [m for _, m in both])
        agent_value = value if math.isfinite(value) else None
    entry["agent_srcc_same_items"] = agent_value
    entry["agent_n_same_items"] = len(both)
    raw_ok = len(pairs.raw) >= 3 and np.ptp(pairs.raw) > 0 and np.ptp(pairs.raw_mos) > 0
    entry["srcc_raw"] = _finite(srcc(pairs.raw, pairs.raw_mos)) if raw_ok else None
    entry["plcc_raw"] = _finite(plcc(pairs.raw, pairs.raw_mos)) if raw_ok else None
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
    rows = [("job", job.get("id") or "-"), ("name", job.get("name") or "-"),
            ("submitted", _job_date(job.get("created_at")))]
    if job.get("finished_at"):
        rows.append(("finished", _job_date(job.get("finished_at"))))
    rows += [("status", job.get("status") or "-"), ("query", query),
             ("backend", job.get("backend") or "-"), ("model", job.get("model") or "-")]
    if job.get("group"):
        rows.append(("group", job["group"]))
    if job.get("dataset") and job.get("scored_against"):
        rows.append(("truth", f"scored against {job['scored_against']}"))
    if "configuration" in job:
        rows += [("config", line) for line in configuration_lines(job["configuration"])]
    if job.get("answered_by"):
        rows.append(("answered", ", ".join(f"{name} ({n} items)" for name, n in
                                           job["answered_by"].items())))
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
        text = (f"{backend['backend']}" + (f" {backend['model']}" if backend.get("model")
                                           else "") + where
                + f" (temperature {backend.get('temperature')}, max_tokens "
                  f"{backend.get('max_tokens')}, images <= {backend.get('max_image_side')} px)")
        groups.setdefault(text, []).append(role)
    lines += [f"{'/'.join(roles)}: {text}" for text, roles in groups.items()]
    tools = config.get("tools") or {}
    lines.append(f"tools: device {tools.get('device')}, fallbacks "
                 f"{', '.join(tools.get('fallback_chain') or []) or 'none'}, catalogue "
                 f"entries of {len(tools.get('catalog') or {})} tools pinned"
                 + (f"; metric tools {', '.join(config['metric_tools'])}"
                    if config.get("metric_tools") else ""))
    lines.append(f"agentic-iqa {config.get('version')}, prompts {config.get('prompts')}, "
                 f"max replans {config.get('max_replan_iterations')}, VLM response cache "
                 f"{'on' if config.get('vlm_cache') else 'off'}")
    return lines


def provenance_warnings(job: Mapping[str, Any], answered_by: Mapping[str, int]) -> list[str]:
    """What a reader must know about who answered: items answered by more than one
    backend/model, or by one the job was not submitted with."""
    warnings = []
    seen = {name for key in answered_by for name in key.split(";") if name}
    if len(answered_by) > 1:
        warnings.append("items were answered by different backends or models (" + ", ".join(
            f"{name}: {n} items" for name, n in answered_by.items()) + "): do not read one "
            "figure over them")
    config = job.get("configuration") or {}
    configured = {f"{role['backend']}/{role['model']}" for role in
                  (config.get("roles") or {}).values()}
    stray = sorted(seen - configured) if config.get("roles") else []
    if stray:
        warnings.append(f"answered by {', '.join(stray)}, which the job was not submitted "
                        f"with ({', '.join(sorted(configured))})")
    if config.get("builtin_model_ignored"):
        warnings.append("the job was submitted with a model name but no backend (--model "
                        "without --backend, before agentic-iqa asked for one): the builtin "
                        "backend answered those roles, and no model did")
    return warnings


#: What a report's scores came from, by the job's mode (``eval submit --mode``).
_SCORED = {"agent": "Agent", "vlm": "VLM", "tools": "Tools"}


def scored_label(report: Mapping[str, Any]) -> str:
    """"Agent", "VLM" or "Tools": what was scored (the job's mode), so that the VLM asked
    alone is never headed as the agent."""
    job = report.get("job") or {}
    mode = job.get("mode") or ("tools" if report.get("kind") == "metric" else "agent")
    return _SCORED.get(str(mode), str(mode))


def render_text(report: Mapping[str, Any]) -> str:
    """The report as plain text for a terminal."""
    counts = report["counts"]
    by_status = ", ".join(f"{status} {n}" for status, n in counts["by_status"].items())
    lines = [f"{label.capitalize() + ':':<11} {value}"
             for label, value in job_lines(report["job"])] if report.get("job") else []
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
                lines.append(f"  {name.upper():<14} {_fmt(agent[name])}  "
                             f"{CONFIDENCE:.0%} CI {_ci(agent[f'{name}_ci'])}")
            lines.append(f"  {'PLCC logistic':<14} {_fmt(agent['plcc_logistic'])}  "
                         f"(monotone {_fit_name(agent)}"
                         + (f"; {agent['logistic_note']})" if agent["logistic_note"] else ")"))
    if report["tools"] and agent is not None:
        lines.append("Tools vs MOS:")
        lines.append(f"  {'tool':<16} {'scored':>6} {'n':>5} {'SRCC':>7} {'PLCC':>7} "
                     f"{'PLCC-log':>8} {'KRCC':>7} {'agent SRCC':>10}  fit")
        for tool in report["tools"]:
            lines.append(
                f"  {tool['tool']:<16} {tool['scored']:>6} {tool['n']:>5} "
                f"{_fmt(tool['srcc']):>7} {_fmt(tool['plcc']):>7} "
                f"{_fmt(tool['plcc_logistic']):>8} {_fmt(tool['krcc']):>7} "
                f"{_fmt(tool['agent_srcc_same_items']):>10}  "
                f"{_FIT_SHORT.get(tool.get('logistic_fit') or '', '-')}")
    from .breakdown import text_lines

    lines.extend(text_lines(report.get("breakdown"), {"agent": scored_label(report)}))
    mcq = report.get("mcq")
    if mcq:
        lines.append(mcq_line(mcq))
        for entry in mcq.get("by_type") or ():
            lines.append(f"  {entry['type']:<24} {_fmt(entry['accuracy'])} "
                         f"({entry['correct']}/{entry['n']})")
    failures = report["failures"]
    if failures["total"]:
        lines.append(f"Failures: {failures['total']} ({failures['distinct_reasons']} reasons)")
        for entry in failures["top"]:
            lines.append(f"  {entry['count']:>5}  {entry['reason']}")
    if report["tool_usage"]:
        lines.append("Tools used: " + ", ".join(f"{name} {n}" for name, n in
                                                report["tool_usage"].items()))
    fallbacks = report["fallbacks"]
    if fallbacks["total"]:
        lines.append(f"Tool fallbacks: {fallbacks['total']} on {fallbacks['items']} item(s)")
    if report.get("vlm"):
        lines.append(f"VLM: {vlm_line(report['vlm'])}")
    return "\n".join(lines) + "\n"


def _metric_lines(report: Mapping[str, Any]) -> list[str]:
    """A metric job's table: each tool against MOS, normalized (higher is better) and raw."""
    lines = ["Tools vs MOS (normalized scores, higher is better; raw: the tool's own scale):",
             f"  {'tool':<16} {'scored':>6} {'n':>5} {'SRCC':>7} {'95% CI':>16} {'PLCC':>7} "
             f"{'PLCC-log':>8} {'KRCC':>7} {'SRCC raw':>8} {'PLCC raw':>8}  fit"]
    for tool in report["tools"]:
        lines.append(
            f"  {tool['tool']:<16} {tool['scored']:>6} {tool['n']:>5} {_fmt(tool['srcc']):>7} "
            f"{_ci(tool['srcc_ci']):>16} {_fmt(tool['plcc']):>7} "
            f"{_fmt(tool['plcc_logistic']):>8} {_fmt(tool['krcc']):>7} "
            f"{_fmt(tool.get('srcc_raw')):>8} {_fmt(tool.get('plcc_raw')):>8}  "
            f"{_FIT_SHORT.get(tool.get('logistic_fit') or '', '-')}")
    lines.append("  fit: the monotone curve behind PLCC-log (5PL/4PL/3PL: 5-, 4- or 3-parameter "
                 "logistic; linear: too few points or no logistic fitted)")
    return lines


def vlm_line(vlm: Mapping[str, Any]) -> str:
    """Calls, cache hits, tokens, cost and cost per item, in one line."""
    from ..vlm.usage import describe

    return describe(vlm)


# -- HTML -----------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td.text, th.text { text-align: left; }
tr.agent td { font-weight: bold; background: #f8f8ff; }
.note { color: #666; font-size: 0.9em; }
.scroll { max-width: 100%; overflow-x: auto; }
td.text, p, li, h1, figcaption { overflow-wrap: anywhere; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
"""


def _cell(value: Any, digits: int = 3, *, text: bool = False) -> str:
    css = ' class="text"' if text else ""
    return f"<td{css}>{html.escape(_fmt(value, digits))}</td>"


def _header(*names: str) -> str:
    first, *rest = names
    cells = f'<th class="text">{html.escape(first)}</th>' + "".join(
        f"<th>{html.escape(name)}</th>" for name in rest)
    return f"<tr>{cells}</tr>"


def _correlation_rows(label: str, entry: Mapping[str, Any], css: str = "") -> str:
    return (f'<tr class="{css}">{_cell(label, text=True)}{_cell(entry["n"])}'
            f'{_cell(entry["srcc"])}{_cell(_ci(entry["srcc_ci"]), text=True)}'
            f'{_cell(entry["plcc"])}{_cell(_ci(entry["plcc_ci"]), text=True)}'
            f'{_cell(entry["plcc_logistic"])}{_cell(_fit_name(entry), text=True)}'
            f'{_cell(entry["krcc"])}{_cell(_ci(entry["krcc_ci"]), text=True)}</tr>')


def _interval_note(report: Mapping[str, Any]) -> str:
    settings = report["bootstrap"]
    return (f"{settings['confidence']:.0%} intervals: percentile bootstrap over "
            f"{settings['resamples']} resamples of the pairs (seed {settings['seed']}); "
            "PLCC logistic: PLCC after a monotone fit of scores to MOS: the 5-parameter "
            "logistic, bounded so that it rises (or falls) with the scores everywhere, or, "
            "when that fit fails or there are fewer than 10 points, a 4- or 3-parameter "
            "logistic (at least 8 or 6 points), else a straight line (the fit column).")


def _vlm_html(vlm: Mapping[str, Any]) -> str:
    from ..vlm.usage import format_cost

    unpriced = (f'<p class="note">No price for {html.escape(", ".join(vlm["unpriced_models"]))}'
                " in the price table: cost unknown.</p>" if vlm.get("unpriced_models") else "")
    return ("<h2>VLM usage</h2><table id=\"vlm\">"
            + _header("calls", "cache hits", "input tokens", "cached input tokens",
                      "output tokens", "cost (USD)", "cost per item")
            + f"<tr>{_cell(vlm['calls'])}{_cell(vlm['cache_hits'])}{_cell(vlm['input_tokens'])}"
            f"{_cell(vlm['cached_tokens'])}{_cell(vlm['output_tokens'])}"
            f"{_cell(format_cost(vlm['cost_usd']), text=True)}"
            f"{_cell(format_cost(vlm.get('cost_per_item_usd')), text=True)}</tr></table>"
            + unpriced)


def report_title(report: Mapping[str, Any]) -> str:
    """"Evaluation job report: NAME (1a2b3c4d)", or the generic title without a ``job``."""
    job = report.get("job")
    if not job:
        return "Evaluation job report"
    return f"Evaluation job report: {redact(str(job.get('name')))} ({str(job.get('id'))[:8]})"


def render_html(report: Mapping[str, Any], rows: Iterable[Mapping[str, Any]],
                path: str | os.PathLike[str], *, title: str | None = None,
                figures: Sequence[NamedFigure] | None = None) -> Path:
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
    drawn = {named.name: named for named in (
        figures if figures is not None
        else report_figures(report, rows, scored=scored_label(report)))}
    counts = report["counts"]
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    if report.get("job"):
        parts.append('<table id="job">' + "".join(
            f'<tr><th class="text">{html.escape(label)}</th>{_cell(value, text=True)}</tr>'
            for label, value in job_lines(report["job"])) + "</table>")
    parts += ["<h2>Items</h2><table>", _header("status", "items")]
    for status, n in counts["by_status"].items():
        parts.append(f"<tr>{_cell(status, text=True)}{_cell(n)}</tr>")
    parts.append(f"<tr>{_cell('total', text=True)}{_cell(counts['total'])}</tr></table>")

    agent = report.get("agent")
    parts.append("<h2>Agreement with human opinion (MOS)</h2>")
    if agent is None:
        parts.append('<p class="note">A metric job: no agent ran. Each tool\'s normalized '
                     'score (higher is better) per item against MOS; raw: its own scale.</p>')
        parts.append('<table id="correlations">')
        parts.append(_header("tool", "n", "SRCC", "95% CI", "PLCC", "95% CI", "PLCC logistic",
                             "fit", "KRCC", "95% CI"))
        for tool in report["tools"]:
            parts.append(_correlation_rows(tool["tool"], tool, "tool"))
        parts.append("</table>")
        parts.append(f'<p class="note">{_interval_note(report)}</p>')
        parts.append('<table id="raw">' + _header("tool", "scored", "SRCC raw", "PLCC raw"))
        for tool in report["tools"]:
            parts.append(f'<tr>{_cell(tool["tool"], text=True)}{_cell(tool["scored"])}'
                         f'{_cell(tool.get("srcc_raw"))}{_cell(tool.get("plcc_raw"))}</tr>')
        parts.append("</table>")
        parts += [html_figure(named) for name, named in drawn.items()
                  if name.startswith("scatter-tool-")]
    else:
        if agent["reason"]:
            parts.append(f'<p class="note">{html.escape(agent["reason"])}</p>')
        parts.append('<table id="correlations">')
        parts.append(_header("scores", "n", "SRCC", "95% CI", "PLCC", "95% CI",
                             "PLCC logistic", "fit", "KRCC", "95% CI"))
        parts.append(_correlation_rows(scored_label(report).lower(), agent, "agent"))
        parts.append("</table>")
        if agent.get("logistic_note"):
            parts.append(f'<p class="note">{html.escape(agent["logistic_note"])}</p>')
        parts.append(f'<p class="note">{_interval_note(report)}</p>')
        if "scatter-agent" in drawn:
            parts.append(html_figure(drawn["scatter-agent"]))
        else:
            parts.append('<p class="note">No done item has both a predicted score and a '
                         'MOS.</p>')

    if report["tools"] and agent is not None:
        parts.append("<h2>Per tool</h2><p class=\"note\">Each tool's mean normalized score "
                     "per item against MOS, on the items where the tool gave a score; the "
                     "agent's SRCC on the same items is beside it.</p>")
        parts.append('<table id="tools">')
        parts.append(_header("tool", "scored", "n with MOS", "SRCC", "95% CI", "PLCC",
                             "PLCC logistic", "fit", "KRCC", "agent SRCC, same items"))
        for tool in report["tools"]:
            parts.append(
                f'<tr class="tool">{_cell(tool["tool"], text=True)}{_cell(tool["scored"])}'
                f'{_cell(tool["n"])}{_cell(tool["srcc"])}{_cell(_ci(tool["srcc_ci"]), text=True)}'
                f'{_cell(tool["plcc"])}{_cell(tool["plcc_logistic"])}'
                f'{_cell(_fit_name(tool), text=True)}{_cell(tool["krcc"])}'
                f'{_cell(tool["agent_srcc_same_items"])}</tr>')
        parts.append("</table>")

    if report.get("breakdown"):
        parts.append("<h2>By distortion</h2>" + html_tables(
            report["breakdown"], {"agent": scored_label(report).lower()}))
        parts += [html_figure(named) for name, named in drawn.items()
                  if name.startswith("breakdown-")]
    mcq = report.get("mcq")
    if mcq and mcq.get("reason"):
        parts.append(f'<h2>Multiple choice</h2><p class="note" id="mcq">'
                     f"{html.escape(mcq_line(mcq))}</p>")
    elif mcq:
        parts.append("<h2>Multiple choice</h2><table>")
        parts.append(_header("accuracy", "correct", "answered", "not answered"))
        parts.append(f"<tr>{_cell(mcq['accuracy'])}{_cell(mcq['correct'])}{_cell(mcq['n'])}"
                     f"{_cell(mcq['not_answered'])}</tr></table>")
        if mcq.get("withheld"):
            parts.append(f'<p class="note">{mcq["withheld"]} question(s) without a correct '
                         f"answer ({WITHHELD}) are not counted.</p>")
        if mcq.get("by_type"):
            parts.append('<table id="mcq-types">' + _header("question type", "accuracy",
                                                            "correct", "answered"))
            parts.extend(f"<tr>{_cell(e['type'], text=True)}{_cell(e['accuracy'])}"
                         f"{_cell(e['correct'])}{_cell(e['n'])}</tr>" for e in mcq["by_type"])
            parts.append("</table>")

    failures = report["failures"]
    if failures["total"]:
        parts.append(f"<h2>Failures</h2><p class=\"note\">{failures['total']} failed item(s), "
                     f"{failures['distinct_reasons']} distinct reason(s); the most common:</p>")
        parts.append('<table id="failures">')
        parts.append(_header("reason", "items", "example item", "example error"))
        for entry in failures["top"]:
            parts.append(f"<tr>{_cell(entry['reason'], text=True)}{_cell(entry['count'])}"
                         f"{_cell(entry['example_item'], text=True)}"
                         f"{_cell(entry['example_error'], text=True)}</tr>")
        parts.append("</table>")
    if report.get("vlm"):
        parts.append(_vlm_html(report["vlm"]))
    parts.append("</body></html>\n")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # --html out/report.html on a fresh machine
    target.write_text("\n".join(parts), encoding="utf-8")
    return target
