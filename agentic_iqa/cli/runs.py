"""``agentic-iqa runs ...``: look at stored runs (``assess`` runs and jobs' items alike).

``runs list`` shows the recent runs (or a job's items' runs), ``runs show`` everything stored
about one: plan, every step with its worker, queue and times, every tool call with raw and
normalized score, replans, the answer and why.  Runs are named by a unique prefix of their id
(the 8 characters ``assess`` and ``runs list`` print), or as a job's item.  Everything printed
is redacted (:func:`agentic_iqa.redact.redact`).

Like the rest of the CLI this module imports only typer and rich at start-up; the database
layer loads inside the commands (tests/cli/test_startup.py).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import PurePath
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from .common import (
    explain_not_found,
    fail,
    open_engine,
    redact_url,
)

runs_app = typer.Typer(
    help="Stored runs: list the recent ones, show one in full.", no_args_is_help=True
)


def _text(value: Any) -> str:
    """Return a cell or value as redacted plain text ("-" for nothing), safe from rich markup."""
    from ..redact import redact

    if value is None or value == "":
        return "-"
    return escape(redact(str(value)) or "")


def _when(iso: str | None, *, day: str | None = None) -> str:
    """Return "2026-11-26 05:34:44 UTC", or only the time of day when it falls on ``day``."""
    if iso is None:
        return "-"
    moment = datetime.fromisoformat(iso)
    if day is not None and moment.date().isoformat() == day:
        return moment.strftime("%H:%M:%S.%f")[:-3]
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _answer(row: dict[str, Any]) -> str:
    answer = row.get("final_answer")
    score = row.get("quality_score")
    if answer is None:
        return (
            f"failed: {row['error']}" if row.get("status") == "failed" and row.get("error") else "-"
        )
    return f"{answer} ({score:.2f})" if score is not None else str(answer)


@runs_app.command("list")
def list_runs(
    job: Annotated[
        str | None,
        typer.Option(
            "--job",
            help="the runs of this job's items, in manifest order (a job id or a unique "
            "prefix of one)",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="at most this many")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """The recent runs, newest first: short id, created, status, query, image, answer."""
    from ..db.engine import read_scope
    from ..db.jobs import JobNotFound, resolve_job_id
    from ..db.queries import AmbiguousId
    from ..db.runs import recent_runs
    from ..redact import redact
    from .render import output_console

    engine = open_engine()
    try:
        with read_scope(engine) as session:
            job_id = resolve_job_id(session, job) if job is not None else None
            rows = recent_runs(session, limit=limit, job_id=job_id)
    except (JobNotFound, AmbiguousId) as exc:
        fail(explain_not_found(engine, exc))
    if as_json:
        print(redact(json.dumps(rows, indent=2)))
        return
    console = output_console()
    if not rows:
        where = f"job {job_id[:8]} has no item with a run" if job_id else "no run is stored"
        console.print(f"{where} ({_text(redact_url(engine))})", highlight=False)
        return
    from rich.table import Table

    table = Table(title=f"Runs of job {job_id[:8]}" if job_id else "Recent runs")
    columns = (["item", "line"] if job_id else []) + [
        "run",
        "created",
        "status",
        "query",
        "image",
        "answer",
    ]
    for column in columns:
        table.add_column(column)
    for row in rows:
        cells = [_text(row["item_id"]), str(row["line"])] if job_id else []
        cells += [
            row["id"][:8],
            _when(row["created_at"])[:16],
            row["status"],
            _text(row["query"]),
            _text(PurePath(row["image"]).name),
            _text(_answer(row)),
        ]
        table.add_row(*cells)
    console.print(table)
    more = "" if len(rows) < limit else f" (the first {limit}: --limit N shows more)"
    console.print(
        f"{len(rows)} run(s){more}; `agentic-iqa runs show ID` shows one in full", highlight=False
    )


@runs_app.command("show")
def show(
    run: Annotated[
        str | None,
        typer.Argument(
            help="run id, or a unique prefix of one (the 8 characters `runs list` shows)"
        ),
    ] = None,
    job: Annotated[
        str | None,
        typer.Option(
            "--job", help="with --item: the job (id or unique prefix; default: the latest)"
        ),
    ] = None,
    item: Annotated[
        str | None,
        typer.Option("--item", help="a job's item: its id, line number or image file name"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Everything stored about one run: plan, steps (worker, queue, times), tool calls, replans,
    answer and reasoning."""
    from ..db.engine import read_scope
    from ..db.items import item_run_id
    from ..db.jobs import JobNotFound, resolve_job_id
    from ..db.queries import AmbiguousId
    from ..db.runs import RunNotFound, resolve_run_id, run_details
    from ..redact import redact

    if (run is None) == (item is None):
        fail(
            "name one run: `runs show RUN` (an id or a unique prefix), or "
            "`runs show --job JOB --item ITEM`"
        )
    if job is not None and item is None:
        fail("--job goes with --item (a run id names its run on its own)")
    engine = open_engine()
    try:
        with read_scope(engine) as session:
            if run is not None:
                run_id = resolve_run_id(session, run)
            else:
                job_id = resolve_job_id(session, job)
                run_id = item_run_id(session, job_id, item or "")
            details = run_details(session, run_id)
    except (RunNotFound, JobNotFound, AmbiguousId, LookupError) as exc:
        fail(explain_not_found(engine, exc))
    if as_json:
        print(redact(json.dumps(details, indent=2, default=str)))
        return
    render_run(details)


def render_run(details: dict[str, Any], console: Console | None = None) -> None:
    """Print a stored run for a person: header, plan, steps, tools, replans, answer."""
    from rich.table import Table

    from ..evidence import scored_on
    from .render import asked_for, output_console

    console = console or output_console()

    def line(text: str) -> None:
        console.print(text, highlight=False)

    created = details["created_at"]
    day = created[:10] if created else None
    line(f"[bold]Run {details['id']}[/]: {details['status']}")
    line(f"  query      {_text(details['query'])}")
    line(f"  image      {_text(details['image'])}")
    if details.get("reference"):
        line(f"  reference  {_text(details['reference'])}")
    if details.get("job_id"):
        item = details.get("job_item") or {}
        line(
            f"  job        {details['job_id'][:8]}, item {_text(item.get('item_id'))} "
            f"(line {item.get('line', '-')}, {item.get('status', '-')})"
        )
    timing = f"  created    {_when(created)}"
    if details.get("finished_at"):
        iterations = details.get("iterations") or 0
        timing += (
            f", finished {_when(details['finished_at'], day=day)} "
            f"({format_duration(details.get('duration_s'))}; {iterations + 1} iteration"
            f"{'s' if iterations else ''})"
        )
    if details.get("resends"):
        timing += f"; re-sent {details['resends']} time(s)"
    line(timing)
    if details.get("metric_tools"):
        line(f"  metric run: {_text(', '.join(details['metric_tools']))} (no agent)")
    _render_plan(details, line)
    steps = details.get("steps") or []
    if steps:
        table = Table(title="Steps")
        for column in (
            "step",
            "iteration",
            "status",
            "worker",
            "queue",
            "attempts",
            "started",
            "finished",
            "duration",
        ):
            table.add_column(column)
        for step in steps:
            status = step["status"] + (f": {step['error']}" if step.get("error") else "")
            table.add_row(
                step["step"],
                str(step["iteration"]),
                _text(status),
                _text(step["worker"]),
                _text(step["queue"]),
                str(step["attempts"]),
                _when(step["started_at"], day=day),
                _when(step["finished_at"], day=day),
                format_duration(step["duration_s"]),
            )
        console.print(table)
    logs = details.get("tool_logs") or []
    if logs:
        table = Table(title="Tools")
        for column in (
            "iteration",
            "scored on",
            "for",
            "distortion",
            "tool",
            "raw",
            "score 1-5",
            "ms",
            "note",
        ):
            table.add_column(column)
        for log in logs:
            table.add_row(
                str(log["iteration"]),
                _text(scored_on(log.get("region"))),
                _text(asked_for(log["object"], log.get("requested_for"))),
                _text(log["distortion"]),
                _text(log["tool"]),
                _number(log["raw_score"], "4g"),
                _number(log["normalized_score"], ".2f"),
                *_tool_time(log),
            )
        console.print(table)
    for note in details.get("notes") or []:
        line(f"[yellow]Note:[/] {_text(note)}")
    for replan in details.get("replans") or []:
        failed = (
            f" (failed: {replan['failure']}; answered with the previous plan's evidence)"
            if replan.get("failure")
            else ""
        )
        line(f"[yellow]Replan {replan['iteration']}:[/] {_text(replan['reason'] + failed)}")
    _render_answer(details, line)


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _tool_time(log: dict[str, Any]) -> tuple[str, str]:
    """Return the ms column (the tool's own time) and the note (cache, fallback, load, failure)."""
    load = log.get("load_time_s") or 0.0
    compute = max(log["execution_time_s"] - load, 0.0)
    notes = ["cache"] if log.get("cached") else []
    if log.get("fallback") and log.get("requested_tool"):
        from ..evidence import stand_in_label

        notes.append(stand_in_label(log["requested_tool"], log.get("error")))
    if load:
        notes.append(f"+{load:.1f} s one-time model load")
    if log.get("error") and not log.get("fallback"):
        notes = [f"failed: {log['error']}"]
    return f"{compute * 1000:.0f}", _text("; ".join(notes)) if notes else ""


def _render_plan(details: dict[str, Any], line: Any) -> None:
    from ..state import DistortionAnalysis, PlannerOutput
    from .render import distortion_line, plan_line

    if details.get("plan") is None:
        return
    plan = PlannerOutput.model_validate(details["plan"])
    line(f"[bold]Plan:[/] {_text(plan_line(plan))}")
    on = [name for name, value in plan.plan.model_dump().items() if value]
    line(f"      subtasks: {', '.join(on) if on else 'none'}")
    if details.get("distortions"):
        line("[bold]Distortions:[/]")
        for entry in details["distortions"]:
            analysis = DistortionAnalysis.model_validate(
                {key: entry[key] for key in ("type", "severity", "explanation")}
            )
            line(f"  {_text(distortion_line(entry['object'], analysis))}")


def _render_answer(details: dict[str, Any], line: Any) -> None:
    from ..vlm.usage import describe

    if details.get("final_answer") is not None:
        line(f"[bold green]Answer:[/] {_text(details['final_answer'])}")
        if details.get("quality_score") is not None:
            distribution = ", ".join(
                f"{level} {p:.2f}" for level, p in (details.get("level_distribution") or {}).items()
            )
            line(
                f"[bold]Score:[/] {details['quality_score']:.2f} / 5 ({distribution}; "
                f"{_text(details.get('probability_source'))})"
            )
        line(f"[bold]Why:[/] {_text(details.get('quality_reasoning'))}")
        for note in details.get("answer_notes") or []:
            line(f"[yellow]Note:[/] {_text(note)}")
    if details.get("error"):
        line(f"[bold red]Error:[/] {_text(details['error'])}")
    usage = details.get("vlm_usage") or {}
    if usage.get("calls") or usage.get("cache_hits"):
        line(f"[bold]VLM usage:[/] {_text(describe(usage))}")
