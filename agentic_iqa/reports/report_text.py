"""Render a job's report as text for a terminal, and the lines its pages share with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..redact import redact
from .report import CONFIDENCE, WITHHELD


def format_value(value: Any, digits: int = 3) -> str:
    """Return a value as a table shows it: "-" for None, a float to ``digits`` places."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_ci(interval: list[float] | None) -> str:
    """Return an interval as "[low, high]" to three places, "-" without one."""
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-"


def describe_fit(entry: Mapping[str, Any]) -> str:
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


def cannot_see_warnings(job: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    """The job's warning that its model may not be receiving the images, where enough of its
    done items had a reply saying it cannot see the image (:mod:`.unread`), naming the model
    the job was configured with."""
    from .unread import answering_model, cannot_see_warning

    unread = report.get("unread") or {}
    model = answering_model(job.get("configuration")) or (
        f"{job['backend']}/{job['model']}" if job.get("backend") and job.get("model") else None
    )
    done = int((report.get("counts") or {}).get("done") or 0)
    warning = cannot_see_warning(int(unread.get("cannot_see") or 0), done, model)
    return [warning] if warning else []


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
                    f"  {name.upper():<14} {format_value(agent[name])}  "
                    f"{CONFIDENCE:.0%} CI {format_ci(agent[f'{name}_ci'])}"
                )
            lines.append(
                f"  {'PLCC logistic':<14} {format_value(agent['plcc_logistic'])}  "
                f"(monotone {describe_fit(agent)}"
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
                f"  {entry['type']:<24} {format_value(entry['accuracy'])} "
                f"({entry['correct']}/{entry['n']}; answered only "
                f"{format_value(entry.get('answered_accuracy'))}, "
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
        agent = f" {format_value(tool['agent_srcc_same_items']):>10}" if agent_column else ""
        flag = _flag(tool)
        lines.append(
            f"  {tool['tool']:<{width}} {_short_direction(tool):>6} {tool['scored']:>6} "
            f"{tool['n']:>5} {format_value(tool['srcc']):>7} {format_ci(tool['srcc_ci']):>16} "
            f"{format_value(tool['plcc']):>7} {format_value(tool['plcc_logistic']):>8} "
            f"{format_value(tool['krcc']):>7}{agent} "
            f"{format_value(normalized.get('srcc')) + flag:>10} "
            f"{format_value(normalized.get('plcc')) + flag:>10}"
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
    interval = (
        f" {CONFIDENCE:.0%} CI {format_ci(mcq['accuracy_ci'])}" if mcq.get("accuracy_ci") else ""
    )
    answered = (
        f"; answered only: {format_value(mcq.get('answered_accuracy'))} "
        f"({mcq['correct']}/{mcq.get('answered', 0)})"
    )
    not_run = f"; {mcq['not_run']} not run" if mcq.get("not_run") else ""
    kept_back = (
        f"; {mcq['withheld']} more without a correct answer ({WITHHELD})"
        if mcq.get("withheld")
        else ""
    )
    return (
        f"MCQ accuracy: {format_value(mcq['accuracy'])}{interval} ({mcq['correct']}/{mcq['n']} "
        f"correct{counted}{answered}{not_run}{kept_back})"
    )
