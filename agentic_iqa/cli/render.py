"""Showing a finished run to a person (rich) or a script (JSON).

A failed run shows its reason in both: the state's ``error`` (a plain message, or a planner
error stored as JSON) is reduced to one readable line and passed through :func:`redact`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..evidence import WHOLE_IMAGE, object_label, scored_on, stand_in_label, stand_ins
from ..redact import redact
from ..state import (
    AgenticIQAState,
    DistortionAnalysis,
    PlannerOutput,
    ToolExecutionLog,
    state_to_json,
)


def error_details(state: AgenticIQAState) -> dict[str, Any] | None:
    """Return the structured error, redacted, when the state holds one (a planner failure's
    JSON)."""
    error = redact(state.get("error"))
    if not error:
        return None
    try:
        parsed = json.loads(error)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) and isinstance(parsed.get("message"), str) else None


def error_message(state: AgenticIQAState) -> str | None:
    """Return why the run failed, as one redacted line; None when it did not fail.

    The plan step stores a planner failure as a JSON ``PlannerError``; its ``message`` is what a
    person can act on, the rest is for debugging.
    """
    details = error_details(state)
    return details["message"] if details else redact(state.get("error")) or None


def state_document(
    state: AgenticIQAState, *, vlm_usage: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return the final state as JSON-able data, with the answer fields repeated at the top level,
    and the run's VLM calls, tokens and cost under ``vlm_usage`` when given."""
    document: dict[str, Any] = json.loads(state_to_json(state))
    document["error"] = error_message(state)
    document["error_details"] = error_details(state)
    result = state.get("summarizer_result")
    document["final_answer"] = result.final_answer if result else None
    document["quality_reasoning"] = result.quality_reasoning if result else None
    document["quality_score"] = result.quality_score if result else None
    document["level_distribution"] = result.level_distribution if result else None
    document["answer_unparseable"] = result.answer_unparseable if result else None
    document["answered_in_follow_up"] = result.answered_in_follow_up if result else None
    # Which tool stood in for which, and why (the answer's reasoning says it too).
    document["stand_ins"] = [
        {key: entry[key] for key in ("tool", "in_place_of", "reason", "distortions")}
        for entry in stand_ins(
            document["executor_evidence"]["tool_logs"] if document.get("executor_evidence") else ()
        )
    ]
    if vlm_usage is not None:
        document["vlm_usage"] = dict(vlm_usage)
    return document


def render_vlm_usage(usage: Mapping[str, Any], console: Console) -> None:
    """Per step whether its VLM answers came from the response cache; the run's calls,
    tokens and cost (nothing for a run that asked no remote model)."""
    from ..vlm.usage import describe

    if not usage.get("calls") and not usage.get("cache_hits"):
        return
    steps = usage.get("steps") or {}
    if steps:
        console.print(
            "[bold]VLM answers:[/] "
            + ", ".join(
                f"{step} " + _answers(entry["calls"], entry["cache_hits"])
                for step, entry in steps.items()
            ),
            highlight=False,
        )
    console.print(f"[bold]VLM usage:[/] {describe(usage)}", highlight=False)


def _answers(calls: int, hits: int) -> str:
    if not calls:
        return f"from cache ({hits})"
    text = f"{calls} call{'s' if calls != 1 else ''}"
    return text + (f" + {hits} from cache" if hits else "")


def output_console(*, stderr: bool = False) -> Console:
    """Return a console for what a person reads: on a terminal, wrapped to the terminal's width;
    otherwise (a pipe, a file) never wrapped, so lines are whole sentences for ``grep`` and
    editors, and tables keep their natural width."""
    from .common import SafeConsole

    console = SafeConsole(stderr=stderr)
    if console.is_terminal:
        return console
    return SafeConsole(stderr=stderr, soft_wrap=True, width=_UNWRAPPED_WIDTH)


#: Width of a console that is not a terminal: wide enough that no table is squeezed.
_UNWRAPPED_WIDTH = 4096


def describe_distortions(plan: PlannerOutput) -> str:
    """Return "distortions: Blurs, Noise (explicit)", per object when the plan names objects, or
    "distortions inferred from the image" when the query named none."""
    source = plan.distortion_source.lower()
    if not plan.distortions:
        return (
            "distortions inferred from the image"
            if source == "inferred"
            else "no distortions named"
        )
    groups = []
    for key, kinds in plan.distortions.items():
        names = ", ".join(kinds) or "none"
        groups.append(
            names if list(plan.distortions) == ["Global"] else f"{object_label(key)}: {names}"
        )
    return f"distortions: {'; '.join(groups)} ({source})"


def plan_line(plan: PlannerOutput) -> str:
    """Return the plan in one line: query type, scope, distortions, reference mode, required
    tool."""
    scope = (
        object_label(plan.query_scope)
        if isinstance(plan.query_scope, str)
        else ", ".join(plan.query_scope)
    )
    return (
        f"{plan.query_type}, scope {scope}, {describe_distortions(plan)}, "
        f"{plan.reference_mode}"
        + (f", required tool {plan.required_tool}" if plan.required_tool else "")
    )


def distortion_line(key: str, item: DistortionAnalysis) -> str:
    """Return "Blurs: severe - edges are smeared (...)": each distortion and its severity once.

    An explanation that starts by restating them ("Blurs: severe; edges ...", as the builtin
    backend writes it) loses that prefix, and one that qualifies the severity ("Blurs: slight
    reading, usual in clean photos; ...") its restated type; any other is kept whole.
    """
    explanation = item.explanation.strip()
    restated = re.match(
        rf"\s*{re.escape(item.type)}\s*:\s*([^;.]{{0,40}});\s*", explanation, re.IGNORECASE
    )
    if restated:
        said, severity = restated.group(1).strip().casefold(), item.severity.casefold()
        qualified = said.startswith(severity) and said != severity
        explanation = explanation[restated.start(1) if qualified else restated.end() :]
    where = "" if object_label(key) == WHOLE_IMAGE else f" on {key}"
    return f"{item.type}{where}: {item.severity}" + (f" - {explanation}" if explanation else "")


def asked_for(object_name: str, requested_for: list[str] | None) -> str:
    """Return which of the query's objects a tool call was made for: its ``requested_for`` (a
    whole-image score standing in for them), else what it is filed under ("whole image", a
    region; a call logged before ``requested_for`` existed, under the object it was for)."""
    if requested_for:
        return ", ".join(requested_for)
    return object_label(object_name)


def tool_time(entry: ToolExecutionLog) -> tuple[float, float]:
    """Return (seconds the tool itself took, seconds of one-time model loading in that call)."""
    load = entry.load_time or 0.0
    return max(entry.execution_time - load, 0.0), load


def render_state(state: AgenticIQAState, console: Console) -> None:
    console.print(f"[bold]Query:[/] {escape(state['query'])}", highlight=False)
    failure = error_message(state)
    if "plan" not in state:
        reason = failure or "no plan, and no reason was recorded"
        console.print(f"[bold red]Planning failed:[/] {escape(reason)}", highlight=False)
        return
    plan = state["plan"]
    flags = plan.plan
    console.print(f"[bold]Plan:[/] {escape(plan_line(plan))}", highlight=False)
    on = [name for name, value in flags.model_dump().items() if value]
    console.print(f"      subtasks: {', '.join(on) if on else 'none'}", highlight=False)
    evidence = state.get("executor_evidence")
    if evidence and evidence.distortion_analysis:
        console.print("[bold]Distortions:[/]")
        for key, items in evidence.distortion_analysis.items():
            for item in items:
                console.print(f"  {escape(distortion_line(key, item))}", highlight=False)
    if evidence and evidence.tool_logs:
        table = Table(title="Tools")
        for column in ("scored on", "for", "distortion", "tool", "raw", "score 1-5", "ms", "note"):
            table.add_column(column)
        for entry in evidence.tool_logs:
            compute, load = tool_time(entry)
            notes = ["cache"] if entry.cached else []
            if entry.fallback and entry.requested_tool:
                notes.append(stand_in_label(entry.requested_tool, entry.error))
            if load:
                notes.append(f"+{load:.1f} s one-time model load")
            if entry.error and not entry.fallback:
                notes = [f"failed: {entry.error}"]
            score = "-" if math.isnan(entry.normalized_score) else f"{entry.normalized_score:.2f}"
            raw = "-" if math.isnan(entry.raw_score) else f"{entry.raw_score:.4g}"
            table.add_row(
                escape(scored_on(entry.region)),
                escape(asked_for(entry.object_name, entry.requested_for)),
                escape(entry.distortion),
                escape(entry.tool_name),
                raw,
                score,
                f"{compute * 1000:.0f}",
                escape("; ".join(notes)),
            )
        console.print(table)
    for note in evidence.notes if evidence else []:
        console.print(f"[yellow]Note:[/] {escape(note)}", highlight=False)
    for replan in state.get("replan_history", []):
        failed = (
            f" (failed: {replan.failure}; answered with the previous plan's evidence)"
            if replan.failure
            else ""
        )
        console.print(
            f"[yellow]Replan {replan.iteration}:[/] {escape(replan.reason + failed)}",
            highlight=False,
        )
    result = state.get("summarizer_result")
    if result is None:
        if failure:
            console.print(f"[bold red]Failed:[/] {escape(failure)}", highlight=False)
        return
    console.print(f"[bold green]Answer:[/] {escape(result.final_answer)}", highlight=False)
    if result.answered_in_follow_up:
        console.print(
            "[yellow]Read from the follow-up:[/] the model's reply named no option readably; "
            "asked once more which it chose, it named this one",
            highlight=False,
        )
    if result.answer_unparseable:
        console.print(
            f"[bold yellow]No option could be read from the model's answers:[/] "
            f"{escape(result.unparseable_reason or '')}",
            highlight=False,
        )
    if result.quality_score is not None:
        distribution = ", ".join(
            f"{k} {v:.2f}" for k, v in (result.level_distribution or {}).items()
        )
        console.print(
            f"[bold]Score:[/] {result.quality_score:.2f} / 5 ({distribution}; "
            f"{result.probability_source})",
            highlight=False,
        )
    console.print(f"[bold]Why:[/] {escape(result.quality_reasoning)}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]Note:[/] {escape(note)}", highlight=False)
    timings = state.get("step_seconds", {})
    if timings:
        console.print("[bold]Time:[/] " + ", ".join(_step_times(state, timings)), highlight=False)


def _step_times(state: AgenticIQAState, timings: Mapping[str, float]) -> list[str]:
    """Return "step#i 12 ms" per step; the last tool step says how much was one-time model loading
    (the state's tool logs are that step's)."""
    evidence = state.get("executor_evidence")
    load = (
        sum(tool_time(entry)[1] for entry in evidence.tool_logs)
        if evidence and evidence.tool_logs
        else 0.0
    )
    tool_steps = [step for step in timings if step.startswith("tool_execution")]
    parts = []
    for step, seconds in timings.items():
        text = f"{step} {seconds * 1000:.0f} ms"
        if load and tool_steps and step == tool_steps[-1]:
            text += f" (of which {load * 1000:.0f} ms one-time model load)"
        parts.append(text)
    return parts
