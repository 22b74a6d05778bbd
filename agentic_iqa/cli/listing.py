"""``eval list``: the jobs in the database, one line per job (per tool of a metric job), with
the figure that sums each up (SRCC/PLCC against MOS, a tool's on its own score sign-corrected,
or accuracy over every question), so a sweep's or a week's jobs are found again by what they
ran on, not by an id copied from a terminal.

A listing reads each job's own row and nothing of its items: its counts are kept as items move
and its figures are stored when it ends (:mod:`agentic_iqa.runtime.headline`), so twenty jobs of
a million items list as fast as twenty of ten.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from .common import err, fail, open_engine, out, redact_url, unconsumed_queues

if TYPE_CHECKING:
    from ..runtime.consumers import Unconsumed


def job_headlines(
    engine: Any, job_id: str, *, bootstrap: int = 0, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return a job's description (:func:`~agentic_iqa.db.about.job_about`) and its figures, one
    per line: the agent's, or each tool's of a metric job
    (:func:`~agentic_iqa.reports.sweeps.headlines`), from its report, for ``eval compare
    --group``; ``bootstrap`` resamples give them intervals (a paper table's)."""
    from ..runtime import headline

    return headline.compute(engine, job_id, bootstrap=bootstrap, seed=seed)


def _figures(
    engine: Any, job: Any, counts: dict[str, int]
) -> tuple[list[dict[str, Any]], float | None]:
    """Return a job's figures and VLM cost as ``eval list`` shows them: stored when it ended
    (computed here, once, when they are not, or were computed on other items); none for a job still
    running, whose report would read every item it has."""
    from ..runtime import headline

    if job.status == "running":
        return headline.placeholder(job.metric_tools), None
    document = headline.stored(job, counts) or headline.store(engine, job.id)
    if document is None:
        return headline.placeholder(job.metric_tools), None
    return list(document["figures"]), document.get("cost_usd")


def _listed(
    about: dict[str, Any], dataset: str | None, model: str | None, tool: str | None = None
) -> bool:
    """Return whether a job's row (one of its tools, for a metric job) passes ``eval list``'s
    ``--dataset`` and ``--model`` filters."""
    from ..datasets import DatasetFormatError, get_dataset
    from ..reports.sweeps import dataset_label, model_label

    if dataset is not None:
        try:
            wanted = get_dataset(dataset).info.name
        except DatasetFormatError:
            wanted = dataset
        own = (about.get("dataset") or {}).get("name")
        if wanted.lower() not in {str(own).lower(), dataset_label(about).lower()}:
            return False
    if model is not None:
        label = model_label(about, tool)
        names = (
            {label, tool}
            if tool is not None
            else {
                label,
                label.split("/", 1)[-1],
                *str(about.get("model") or "").split(", "),
                *str(about.get("backend") or "").split(", "),
            }
        )
        if model.lower() not in {name.lower() for name in names}:
            return False
    return True


def list_jobs(
    group: Annotated[str | None, typer.Option("--group", help="only this sweep's jobs")] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset", "--data", help="only jobs on this dataset (or manifest file name)"
        ),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option("--status", help="only jobs in this state: running, done or cancelled"),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="only jobs answered by this model (gpt-4o, openai/gpt-4o, builtin) "
            "or, for metric jobs, these tools (tools/PIQE)",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="at most this many, newest first")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The jobs, newest first, a row per job and per tool of a metric job: id, name, group,
    dataset, mode, model (a metric job's row: its tool), state, items (done/failed/total),
    SRCC/PLCC against MOS (a tool's on its own score, sign-corrected) or MCQ accuracy over every
    question, VLM cost, when submitted.  ``--limit`` counts jobs."""
    from ..db.about import job_about
    from ..db.engine import read_scope
    from ..db.items import counts as item_counts
    from ..db.jobs import get_job, job_ids
    from ..db.models import JOB_STATUSES
    from ..reports.sweeps import aligned, dataset_label, figure_text, model_label
    from ..runtime.progress import listed_state
    from ..vlm.usage import format_cost

    if status is not None and status not in JOB_STATUSES:
        fail(f"unknown --status {status!r}: {', '.join(JOB_STATUSES)}", code=2)
    engine = open_engine()
    filtered = dataset is not None or model is not None
    with read_scope(engine) as session:
        ids = job_ids(session, group=group, status=status, limit=None if filtered else limit)
    listed: list[dict[str, Any]] = []
    jobs = 0
    for job_id in ids:
        if jobs >= limit:
            break
        with read_scope(engine) as session:
            job = get_job(session, job_id)
            about = job_about(session, job)
            counts = item_counts(session, job_id)
            # As `eval status` shows it: not "running" once its run here stopped or its
            # process died.
            state = listed_state(session, job, counts)
        figures, cost = _figures(engine, job, counts)
        shown = [figure for figure in figures if _listed(about, dataset, model, figure.get("tool"))]
        if not shown:
            continue
        jobs += 1
        listed += [
            {
                "id": job_id,
                "name": about["name"],
                "group": about.get("group"),
                "dataset": dataset_label(about),
                "subset": (about.get("spec") or {}).get("subset"),
                "mode": about.get("mode"),
                "model": model_label(about, figure.get("tool")),
                "tool": figure.get("tool"),
                "status": state,
                "items": {
                    "done": counts.get("done", 0),
                    "failed": counts.get("failed", 0),
                    "total": sum(counts.values()),
                },
                "figure": figure,
                "cost_usd": cost,
                "created_at": about.get("created_at"),
            }
            for figure in shown
        ]
    # A running job's queue that no worker consumes is named on stderr, after the rows (whose
    # form, --json's included, stays as it is); nothing running: not asked.
    running = any(row["status"] in ("running", "submitting") for row in listed)
    unconsumed = unconsumed_queues() if running else []
    if as_json:
        from ..redact import redact

        print(redact(json.dumps(listed, indent=2, default=str)))
        _name_unconsumed(unconsumed)
        return
    if not listed:
        err.print(
            f"no job matches in the database {redact_url(engine)}"
            if group or dataset or status or model
            else f"no job in the database {redact_url(engine)} yet: submit one with "
            "`agentic-iqa eval submit`",
            highlight=False,
            soft_wrap=True,
        )
        return
    from ..redact import redact

    lines = [
        [
            str(value)
            for value in (
                row["id"][:8],
                row["name"],
                row["group"] or "-",
                row["dataset"] + (f" ({row['subset']})" if row["subset"] else ""),
                row["mode"],
                row["model"],
                row["status"],
                f"{row['items']['done']}/{row['items']['failed']}/{row['items']['total']}",
                figure_text(row["figure"]),
                "-" if row["status"] not in ("done", "cancelled") else format_cost(row["cost_usd"]),
                (row["created_at"] or "-")[:16].replace("T", " "),
            )
        ]
        for row in listed
    ]
    header = [
        "id",
        "name",
        "group",
        "dataset",
        "mode",
        "model",
        "status",
        "done/failed/total",
        "SRCC/PLCC or accuracy",
        "cost",
        "created (UTC)",
    ]
    for line in aligned(header, lines):
        out.print(escape(redact(line) or ""), highlight=False, soft_wrap=True)
    _name_unconsumed(unconsumed)


def _name_unconsumed(queues: list[Unconsumed]) -> None:
    for queue in queues:
        err.print(f"[yellow]{escape(queue.describe())}[/]", highlight=False, soft_wrap=True)
