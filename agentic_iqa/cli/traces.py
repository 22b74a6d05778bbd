"""``agentic-iqa eval show JOB ITEM``: one item's trace in the terminal, or as JSON.

The trace (:mod:`agentic_iqa.reports.trace`) says what was asked, the plan, the distortions
found, each tool's raw and [1, 5] score, the answer and its reasoning, each replan and why, the
model calls with their tokens and cost, and how the answer stands against the truth.  Every
value printed is escaped for rich and redacted; the terminal never sees a control character
(:class:`~agentic_iqa.cli.common.SafeConsole`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from .common import explain_not_found, fail, open_engine, resolve_job


def _text(value: Any) -> str:
    """Return a value as redacted text safe from rich markup ("-" for nothing)."""
    from ..redact import redact

    if value is None or value == "":
        return "-"
    return escape(redact(str(value)) or "")


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def read_trace(engine: Any, job_id: str, item: str | None, line: int | None) -> dict[str, Any]:
    """Return the trace of a job's item by id or line; one clear error line (exit 1) when the
    job has no such item, naming a few near ids."""
    from ..db.engine import read_scope
    from ..db.jobs import JobNotFound
    from ..db.traces import ItemNotFound, item_trace

    try:
        with read_scope(engine) as session:
            return item_trace(session, job_id, item=item, line=line)
    except (JobNotFound, ItemNotFound) as exc:
        fail(explain_not_found(engine, exc))


def show(
    job: Annotated[str, typer.Argument(help="job id or a unique prefix of one")],
    item: Annotated[
        str | None, typer.Argument(help="the item's id (its manifest `id`, else its image)")
    ] = None,
    line: Annotated[
        int | None, typer.Option("--line", min=1, help="the item on this manifest line instead")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the trace as a JSON document")] = False,
) -> None:
    """One item in full: its plan, distortions, tool scores (raw and 1-5), answer and
    reasoning, replans and why, model calls (tokens, cost), and its error against the truth."""
    from ..redact import redact

    if (item is None) == (line is None):
        fail("name one item: `eval show JOB ITEM` (its id) or `eval show JOB --line N`", code=2)
    engine = open_engine()
    job_id = resolve_job(engine, job)
    trace = read_trace(engine, job_id, item, line)
    if as_json:
        print(redact(json.dumps(trace, indent=2, default=str)))
        return
    from .render import output_console

    render_trace(trace, output_console())


def render_trace(trace: dict[str, Any], console: Console) -> None:
    """Print a trace for a person: the item, the plan, distortions, tools, the answer, replans,
    model calls and the verdict against the truth, as rich panels and tables."""
    from rich.panel import Panel
    from rich.table import Table

    item, run, answer = trace["item"], trace["run"], trace["answer"]
    head = [
        f"[bold]image[/]      {_text(item['image'])}",
        *([f"[bold]reference[/]  {_text(item['reference'])}"] if item.get("reference") else []),
        f"[bold]query[/]      {_text(item['query'])}",
        f"[bold]line[/]       {item['line']}",
        f"[bold]status[/]     {_text(item['status'])}",
        f"[bold]truth[/]      {_truth_line(trace['truth'])}",
    ]
    if run is not None:
        head.append(
            f"[bold]run[/]        {_text(run['id'])} ({_text(run['status'])}, "
            f"{run['iterations'] + 1} iteration(s), {_seconds(run['duration_s'])})"
        )
    why = item.get("error") or (run or {}).get("error")
    if why:
        head.append(f"[bold red]failed[/]     {_text(why)}")
    console.print(
        Panel(
            "\n".join(head),
            title=f"item {_text(item['id'])} of job {trace['job_id'][:8]}",
            expand=False,
        ),
        highlight=False,
    )
    plan = trace["plan"]
    if plan is not None:
        flags = [name for name, on in plan["flags"].items() if on]
        lines = [
            f"query type {_text(plan['query_type'])}, scope {_text(plan['query_scope'])}, "
            f"{_text(plan['reference_mode'])}, distortions {_text(plan['distortions'])} "
            f"({_text(plan['distortion_source'])})",
            f"required tool {_text(plan['required_tool'])}; answer mode "
            f"{_text(plan['answer_mode'])}; subtasks {_text(', '.join(flags) or 'none')}",
        ]
        if plan["uncatalogued_tools"]:
            lines.append(f"uncatalogued tools: {_text(', '.join(plan['uncatalogued_tools']))}")
        if plan["excluded_tools"]:
            lines.append(f"excluded tools: {_text(', '.join(plan['excluded_tools']))}")
        console.print(Panel("\n".join(lines), title="Plan", expand=False), highlight=False)
    if trace["distortions"]:
        table = Table(title="Distortions")
        for column in ("object", "distortion", "severity", "explanation"):
            table.add_column(column)
        for entry in trace["distortions"]:
            table.add_row(
                *(_text(entry[key]) for key in ("object", "type", "severity", "explanation"))
            )
        console.print(table)
    if trace["tools"]:
        table = Table(title="Tools")
        for column in ("iter", "object", "distortion", "tool", "raw", "score 1-5", "ms", "note"):
            table.add_column(column)
        for tool in trace["tools"]:
            notes = [
                *(["cached"] if tool["cached"] else []),
                *(
                    [f"stood in for {tool['requested_tool']}"]
                    if tool["fallback"] and tool["requested_tool"]
                    else []
                ),
                *([f"failed: {tool['error']}"] if tool["error"] else []),
            ]
            table.add_row(
                str(tool["iteration"]),
                _text(tool["object"]),
                _text(tool["distortion"]),
                _text(tool["tool"]),
                _number(tool["raw_score"], ".4g"),
                _number(tool["score"], ".3f"),
                _number(tool["time_s"] * 1000 if tool["time_s"] is not None else None, ".0f"),
                _text("; ".join(notes)) if notes else "",
            )
        console.print(table)
    for replan in trace["replans"]:
        failed = f" (failed: {replan['failure']})" if replan["failure"] else ""
        console.print(
            f"[yellow]Replan {replan['iteration']}:[/] {_text(replan['reason'] + failed)}",
            highlight=False,
        )
    if answer is not None:
        lines = [f"[bold]answer[/]  {_text(answer['final_answer'])}"]
        if answer["quality_score"] is not None:
            levels = ", ".join(
                f"{_text(level)} {p:.2f}"
                for level, p in (answer["level_distribution"] or {}).items()
            )
            lines.append(
                f"[bold]score[/]   {answer['quality_score']:.3f} / 5 ({levels}; "
                f"{_text(answer['probability_source'])})"
            )
        lines.append(f"[bold]why[/]     {_text(answer['reasoning'])}")
        if answer["answered_in_follow_up"]:
            lines.append("read from the model's answer to a follow-up question")
        if answer["answer_unparseable"]:
            lines.append(f"[yellow]unparseable:[/] {_text(answer['unparseable_reason'])}")
        lines += [f"[yellow]note:[/] {_text(note)}" for note in answer["notes"]]
        console.print(Panel("\n".join(lines), title="Answer", expand=False), highlight=False)
    if trace["model_calls"]:
        table = Table(title="Model calls")
        for column in (
            "step",
            "iter",
            "role",
            "task",
            "model",
            "in",
            "out",
            "cached in",
            "cost",
            "s",
            "note",
        ):
            table.add_column(column)
        for call in trace["model_calls"]:
            note = "cache hit" if call["cached"] else ""
            if call["error"]:
                note = f"failed: {call['error']}"
            table.add_row(
                _text(call["step"]),
                str(call["iteration"]),
                _text(call["role"]),
                _text(call["task"]),
                _text(f"{call['backend']}/{call['model']}"),
                _number(call["input_tokens"], "d"),
                _number(call["output_tokens"], "d"),
                _number(call["cached_tokens"], "d"),
                _cost(call["cost_usd"]),
                _number(call["latency_s"], ".2f"),
                _text(note) if note else "",
            )
        console.print(table)
    usage = trace["usage"]
    console.print(
        f"[bold]Model usage:[/] {usage['calls']} call(s), {usage['cache_hits']} cache hit(s), "
        f"{usage['input_tokens']} input tokens ({usage['cached_tokens']} cached), "
        f"{usage['output_tokens']} output tokens, cost {_cost(usage['cost_usd'])}"
        f"{'; ' + _text(', '.join(usage['models'])) if usage['models'] else ''}",
        highlight=False,
    )


def _cost(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _truth_line(truth: dict[str, Any]) -> str:
    """Return the verdict against the truth in words: right or wrong, or the rank error."""
    if truth["kind"] == "mcq":
        verdict = {True: "right", False: "wrong", None: "not answered"}[truth["correct"]]
        return f"answer {_text(truth['truth'])}: {verdict} (gave {_text(truth['answer_letter'])})"
    if truth["kind"] == "mos":
        if truth["rank_error"] is None:
            return f"MOS {truth['truth']:g} (no score to rank)"
        return (
            f"MOS {truth['truth']:g}; rank {truth['score_rank']:g} by score, "
            f"{truth['mos_rank']:g} by MOS of {truth['ranked_items']}: rank error "
            f"{truth['rank_error']:+.3f}"
        )
    return "-"
