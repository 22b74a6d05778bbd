"""Showing a finished run to a person (rich) or a script (JSON).

A failed run shows its reason in both: the state's ``error`` (a plain message, or a planner
error stored as JSON) is reduced to one readable line and passed through :func:`redact`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .redact import redact
from .state import AgenticIQAState, state_to_json


def error_details(state: AgenticIQAState) -> dict[str, Any] | None:
    """The structured error, redacted, when the state holds one (a planner failure's JSON)."""
    error = redact(state.get("error"))
    if not error:
        return None
    try:
        parsed = json.loads(error)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) and isinstance(parsed.get("message"), str) \
        else None


def error_message(state: AgenticIQAState) -> str | None:
    """Why the run failed, as one redacted line; None when it did not fail.

    The plan step stores a planner failure as a JSON ``PlannerError``; its ``message`` is what a
    person can act on, the rest is for debugging.
    """
    details = error_details(state)
    return details["message"] if details else redact(state.get("error")) or None


def state_document(state: AgenticIQAState, *, vlm_usage: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:
    """The final state as JSON-able data, with the answer fields repeated at the top level,
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
    if vlm_usage is not None:
        document["vlm_usage"] = dict(vlm_usage)
    return document


def render_vlm_usage(usage: Mapping[str, Any], console: Console) -> None:
    """Per step whether its VLM answers came from the response cache; the run's calls,
    tokens and cost (nothing for a run that asked no remote model)."""
    from .vlm.usage import describe

    if not usage.get("calls") and not usage.get("cache_hits"):
        return
    steps = usage.get("steps") or {}
    if steps:
        console.print("[bold]VLM answers:[/] " + ", ".join(
            f"{step} " + _answers(entry["calls"], entry["cache_hits"])
            for step, entry in steps.items()), highlight=False)
    console.print(f"[bold]VLM usage:[/] {describe(usage)}", highlight=False)


def _answers(calls: int, hits: int) -> str:
    if not calls:
        return f"from cache ({hits})"
    text = f"{calls} call{'s' if calls != 1 else ''}"
    return text + (f" + {hits} from cache" if hits else "")


def render_state(state: AgenticIQAState, console: Console) -> None:
    console.print(f"[bold]Query:[/] {state['query']}", highlight=False)
    failure = error_message(state)
    if "plan" not in state:
        reason = failure or "no plan, and no reason was recorded"
        console.print(f"[bold red]Planning failed:[/] {escape(reason)}", highlight=False)
        return
    plan = state["plan"]
    flags = plan.plan
    console.print(
        f"[bold]Plan:[/] {plan.query_type}, scope {plan.query_scope}, distortions "
        f"{plan.distortion_source.lower()} {plan.distortions or ''}, {plan.reference_mode}"
        + (f", required tool {plan.required_tool}" if plan.required_tool else ""),
        highlight=False,
    )
    on = [name for name, value in flags.model_dump().items() if value]
    console.print(f"      subtasks: {', '.join(on) if on else 'none'}", highlight=False)
    evidence = state.get("executor_evidence")
    if evidence and evidence.distortion_analysis:
        console.print("[bold]Distortions:[/]")
        for key, items in evidence.distortion_analysis.items():
            for item in items:
                console.print(f"  {key}: {item.type} [cyan]{item.severity}[/] - "
                              f"{item.explanation}", highlight=False)
    if evidence and evidence.tool_logs:
        table = Table(title="Tools")
        for column in ("object", "distortion", "tool", "raw", "score 1-5", "ms", "note"):
            table.add_column(column)
        for entry in evidence.tool_logs:
            note = ("cache" if entry.cached else "") + (
                f" fallback from {entry.requested_tool}" if entry.fallback else "")
            if entry.error and not entry.fallback:
                note = f"failed: {entry.error}"
            score = "-" if math.isnan(entry.normalized_score) else f"{entry.normalized_score:.2f}"
            raw = "-" if math.isnan(entry.raw_score) else f"{entry.raw_score:.4g}"
            table.add_row(entry.object_name, entry.distortion, entry.tool_name, raw, score,
                          f"{entry.execution_time * 1000:.0f}", note.strip())
        console.print(table)
    for entry in state.get("replan_history", []):
        console.print(f"[yellow]Replan {entry.iteration}:[/] {entry.reason}", highlight=False)
    result = state.get("summarizer_result")
    if result is None:
        if failure:
            console.print(f"[bold red]Failed:[/] {escape(failure)}", highlight=False)
        return
    console.print(f"[bold green]Answer:[/] {result.final_answer}", highlight=False)
    if result.answer_unparseable:
        console.print(f"[bold yellow]No option could be read from the model's answers:[/] "
                      f"{escape(result.unparseable_reason or '')}", highlight=False)
    if result.quality_score is not None:
        distribution = ", ".join(f"{k} {v:.2f}" for k, v in (result.level_distribution or {}
                                                             ).items())
        console.print(f"[bold]Score:[/] {result.quality_score:.2f} / 5 ({distribution}; "
                      f"{result.probability_source})", highlight=False)
    console.print(f"[bold]Why:[/] {result.quality_reasoning}", highlight=False)
    timings = state.get("step_seconds", {})
    if timings:
        console.print("[bold]Time:[/] " + ", ".join(
            f"{step} {seconds * 1000:.0f} ms" for step, seconds in timings.items()),
            highlight=False)
