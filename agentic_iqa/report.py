"""Showing a finished run to a person (rich) or a script (JSON)."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from .state import AgenticIQAState, state_to_json


def state_document(state: AgenticIQAState) -> dict[str, Any]:
    """The final state as JSON-able data, with the answer fields repeated at the top level."""
    document: dict[str, Any] = json.loads(state_to_json(state))
    result = state.get("summarizer_result")
    document["final_answer"] = result.final_answer if result else None
    document["quality_reasoning"] = result.quality_reasoning if result else None
    document["quality_score"] = result.quality_score if result else None
    document["level_distribution"] = result.level_distribution if result else None
    return document


def render_state(state: AgenticIQAState, console: Console) -> None:
    console.print(f"[bold]Query:[/] {state['query']}", highlight=False)
    if "plan" not in state:
        console.print(f"[bold red]Planning failed:[/] {state.get('error')}", highlight=False)
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
        return
    console.print(f"[bold green]Answer:[/] {result.final_answer}", highlight=False)
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
