"""Show and export what a dataset job gave (``agentic-iqa eval status/export/report/calibrate``).

Its progress and state, its rows as CSV, JSONL or Parquet, its report (correlations with
confidence intervals, figures, an HTML page), and a tool's mapping fitted to its opinion
scores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.markup import escape

from ..reports.item_pages import ITEMS_ON_PAGE
from .common import (
    err,
    explain_not_found,
    fail,
    open_engine,
    out,
    resolve_job,
    save_figures,
    save_page,
    unconsumed_queues,
)
from .jobflags import ProgressEveryOption
from .progress import (
    DEFAULT_EVERY,
    describe_pace,
    follow_job,
)
from .tracking import MlflowOption, WandbOption


def read_vlm_summary(engine: Any, job_id: str) -> dict[str, Any]:
    from ..db.engine import read_scope
    from ..db.exports import vlm_summary

    with read_scope(engine) as session:
        return vlm_summary(session, job_id)


def status(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="follow until the job ends")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    progress_every: ProgressEveryOption = DEFAULT_EVERY,
) -> None:
    """Counts by state, throughput and ETA (or how many items are stalled)."""
    from ..db.jobs import JobNotFound
    from ..runtime.progress import progress

    engine = open_engine()
    try:
        current = progress(engine, resolve_job(engine, job))
    except JobNotFound as exc:
        fail(explain_not_found(engine, exc))
    if watch and current.status == "running":
        follow_job(engine, current.job_id, progress_every)
        current = progress(engine, current.job_id)
    document: dict[str, Any] = {
        "job_id": current.job_id,
        "name": current.name,
        "status": "interrupted" if current.interrupted else current.status,
        "interrupted": current.interrupted,
        "total": current.total,
        "finished": current.finished,
        "counts": current.counts,
        "items_per_second": current.throughput,
        "eta_seconds": current.eta_seconds,
        "stalled": current.stalled,
        "kind": "metric" if current.tools else "agent",
        "tools": list(current.tools) if current.tools else None,
        "error": current.error,
        "waiting": current.waiting,
        "orphaned": current.orphaned,
        "vlm": read_vlm_summary(engine, current.job_id),
        "batch": _batch_document(current.batch),
        "cannot_see": current.cannot_see,
        "warnings": current.warnings,
    }
    # A running job whose next steps sit in a queue no worker consumes says so.
    unconsumed = unconsumed_queues() if current.status in ("running", "submitting") else []
    document["unconsumed_queues"] = [queue.to_json() for queue in unconsumed]
    if as_json:
        print(json.dumps(document, indent=2))
        return
    from ..reports.report_text import vlm_line

    out.print(
        f"job {current.job_id} ({escape(current.name)}): {current.state}",
        highlight=False,
        soft_wrap=True,
    )
    if current.error:
        out.print(f"  [red]{escape(current.error)}[/]", highlight=False, soft_wrap=True)
    if current.orphaned:
        out.print(
            f"  [yellow]the process that ran it here is gone (no item has moved for a "
            f"lease): `agentic-iqa eval resume {current.job_id[:8]}` continues it[/]",
            highlight=False,
            soft_wrap=True,
        )
    if current.waiting:
        out.print(
            f"  [yellow]waiting: {escape(current.waiting)}[/]", highlight=False, soft_wrap=True
        )
    for queue in unconsumed:
        out.print(f"  [yellow]{escape(queue.describe())}[/]", highlight=False, soft_wrap=True)
    for warning in document["warnings"]:
        out.print(f"  [yellow]warning: {escape(warning)}[/]", highlight=False, soft_wrap=True)
    if current.tools:
        out.print(
            f"  metric job (no agent): {', '.join(current.tools)}", highlight=False, soft_wrap=True
        )
    out.print(
        "  " + ", ".join(f"{k} {v}" for k, v in sorted(current.counts.items())),
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"  {current.finished}/{current.total} finished, {describe_pace(current)}",
        highlight=False,
        soft_wrap=True,
    )
    out.print(f"  VLM: {vlm_line(document['vlm'])}", highlight=False, soft_wrap=True)
    for line in _batch_lines(current.batch):
        out.print(f"  {escape(line)}", highlight=False, soft_wrap=True)


def _batch_document(batch: Any) -> dict[str, Any] | None:
    """Return a batch job's rounds for ``eval status --json``."""
    if batch is None:
        return None
    return {
        "round": batch.round,
        "requests": batch.requests,
        "open": [
            {
                "round": view.round,
                "role": view.role,
                "backend": view.backend,
                "model": view.model,
                "id": view.provider_id,
                "status": view.status,
                "requests": view.requests,
                "counts": view.counts,
                "expires_at": view.expires_at.isoformat() if view.expires_at else None,
                "error": view.error,
            }
            for view in batch.open
        ],
    }


def _batch_lines(batch: Any) -> list[str]:
    """Return the round, each open batch's state, counts and expiry, the requests waiting."""
    if batch is None:
        return []
    requests = batch.requests
    lines = [
        f"batch: round {batch.round}; requests: "
        + (
            ", ".join(
                f"{requests[state]} {state}"
                for state in ("answered", "submitted", "pending", "failed")
                if requests.get(state)
            )
            or "none yet"
        )
    ]
    for view in batch.open:
        counts = ", ".join(
            f"{count} {name}" for name, count in view.counts.items() if count and name != "total"
        )
        expires = f", expires {view.expires_at:%Y-%m-%d %H:%M} UTC" if view.expires_at else ""
        lines.append(
            f"  round {view.round} {view.backend}/{view.model} "
            f"{view.provider_id or '(being sent)'}: {view.status}, {view.requests} "
            f"requests{f' ({counts})' if counts else ''}{expires}"
        )
    return lines


def export_rows(engine: Any, job_id: str) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """Return columns and streamed rows, one per item, with a ``tool:<NAME>`` (normalized) and a
    ``raw:<NAME>`` column per tool; a metric job has columns for each of its tools, even one
    that scored nothing.  ``query`` is the query the item was asked: its own, or the job's.
    ``answered_by`` is who answered: the recorded VLM calls, and the builtin backend's own
    model for an item that ran on it (it records no calls; a job stored before configurations
    were kept that recorded no call at all ran on it, the rule of ``eval report``'s header)."""
    from ..db.engine import read_scope
    from ..db.exports import PAGE, builtin_answerer, tool_names
    from ..db.exports import export_rows as stored_export_rows
    from ..db.jobs import get_job
    from ..reports.export import export_columns, raw_column, tool_column

    with read_scope(engine) as session:
        job = get_job(session, job_id)
        # A metric job's runs run its tools and no other: no need to read every call's name.
        tools = sorted({*(job.metric_tools or tool_names(session, job_id))})
        default_query = job.default_query
        builtin = builtin_answerer(session, job)
    columns = export_columns(tools, raw=True)
    tool_columns = [(name, tool_column(name), raw_column(name)) for name in tools]

    def rows() -> Iterator[dict[str, Any]]:
        with read_scope(engine) as session:
            for row in stored_export_rows(session, job_id, PAGE, builtin=builtin):
                scores, raw = row.pop("tool_scores"), row.pop("raw_scores")
                # The query the item was (or would be) asked: its own, else the job's default.
                row["query"] = row["query"] or default_query
                for name, normalized_column, raw_name in tool_columns:
                    row[normalized_column] = scores.get(name)
                    row[raw_name] = raw.get(name)
                yield row

    return columns, rows()


def export(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="csv, jsonl, parquet, or hf (a Hugging Face `datasets` folder, with each "
            "item's trace; the `hf` extra)",
        ),
    ] = "csv",
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="file to write, or a store's URL (s3://bucket/key.csv); - for "
            "standard output (default: job-<id>.<format> in this folder, "
            "and its name is printed)",
        ),
    ] = None,
    trace: Annotated[
        bool,
        typer.Option(
            "--trace",
            help="jsonl: each row carries the item's whole trace (plan, distortions, tool "
            "calls, answer, replans, model calls) under `trace`, as `eval show --json` gives it",
        ),
    ] = False,
    embed_images: Annotated[
        bool,
        typer.Option(
            "--embed-images",
            help="hf: the images' bytes in the dataset (image_file, reference_file), not only "
            "their paths",
        ),
    ] = False,
) -> None:
    """One row per item: answer, score, reasoning, level probabilities, the model that
    answered, per-tool normalized and raw scores, severities, errors; with ``--trace`` (jsonl)
    or as a Hugging Face dataset (``--format hf``), each item's whole trace too."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display

    from ..db.jobs import JobNotFound
    from ..jobs.spec import place
    from ..reports.export import ExportFormat, write_rows
    from .faults import disk_full

    if fmt not in {"csv", "jsonl", "parquet", "hf"}:
        fail(f"unknown format {fmt!r}: use csv, jsonl, parquet or hf")
    if trace and fmt not in {"jsonl", "hf"}:
        fail("--trace goes with --format jsonl (a dataset, --format hf, has it always)", code=2)
    if embed_images and fmt != "hf":
        fail("--embed-images goes with --format hf", code=2)
    engine = open_engine()
    job_id = resolve_job(engine, job)
    if fmt == "hf":
        _export_hf(engine, job_id, output, embed_images)
        return
    chosen = cast(ExportFormat, fmt)
    try:
        columns, rows = export_rows(engine, job_id)
    except JobNotFound as exc:
        fail(str(exc))
    if trace:
        columns = [*columns, "trace"]
        rows = _with_traces(engine, job_id, rows)
    if output == "-":
        try:
            write_rows(rows, "-", chosen, columns)
        except ValueError as exc:
            fail(str(exc), code=2)
        return
    path = place(output) or Path(f"job-{job_id[:8]}.{fmt}")
    try:
        count = write_rows(rows, path, chosen, columns)
    except StorageError as exc:
        fail(f"cannot write {display(str(path))}: {exc}")
    except OSError as exc:  # the results database is read, so the full disk is the file's
        if not disk_full(exc):
            raise
        fail(
            f"the disk holding {Path(path).resolve()} is full (nothing was written): free "
            "some space there, or write elsewhere with -o",
            code=2,
        )
    shown = display(path) if isinstance(path, str) else str(path.resolve())
    note = "" if output else " (no -o given: the default name; -o - writes to standard output)"
    err.print(f"wrote {count} rows to {shown}{note}", highlight=False, soft_wrap=True)


def traced_rows(
    engine: Any, job_id: str, rows: Iterator[dict[str, Any]]
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Pair each exported row with its item's trace (:func:`agentic_iqa.db.traces.job_traces`),
    both streamed in the job's order, a page at a time; matched by item id, so an item stored
    between the two reads (a job still being submitted) gets an empty trace, not another's."""
    from ..db.engine import read_scope
    from ..db.traces import job_traces
    from ..redact import redact

    with read_scope(engine) as session:
        traces = (trace for _, trace in job_traces(session, job_id))
        pending: dict[str, Any] | None = next(traces, None)
        for row in rows:
            wanted = redact(row["item_id"])
            while pending is not None and pending["item"]["id"] != wanted:
                pending = next(traces, None)
            if pending is None:
                yield row, {}
                continue
            yield row, pending
            pending = next(traces, None)


def _with_traces(
    engine: Any, job_id: str, rows: Iterator[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    for row, trace in traced_rows(engine, job_id, rows):
        row["trace"] = trace
        yield row


def _export_hf(engine: Any, job_id: str, output: str | None, embed_images: bool) -> None:
    """Write the job as a Hugging Face ``datasets`` folder (:mod:`agentic_iqa.reports.hf`)."""
    from ..db.jobs import JobNotFound
    from ..jobs.spec import place
    from ..reports.hf import MissingExtra, write_hf

    if output == "-" or (output and "://" in output):
        fail("--format hf writes a folder: give -o FOLDER on this machine", code=2)
    try:
        import datasets  # noqa: F401  (the extra, checked before anything is read)
    except ImportError:
        fail(str(MissingExtra()), code=2)
    path = Path(place(output) or f"job-{job_id[:8]}-hf")
    try:
        columns, rows = export_rows(engine, job_id)
    except JobNotFound as exc:
        fail(str(exc))
    try:
        count = write_hf(
            traced_rows(engine, job_id, rows), path, columns, embed_images=embed_images
        )
    except FileExistsError as exc:
        fail(str(exc), code=2)
    note = "" if output else " (no -o given: the default name)"
    err.print(
        f"wrote {count} rows to {escape(str(path.resolve()))}{note}; read it with "
        "datasets.load_from_disk",
        highlight=False,
        soft_wrap=True,
    )


def report_document(
    engine: Any,
    job_id: str,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    exclude_in_sample: bool = False,
) -> tuple[dict[str, Any], Any]:
    """Return a job's report as ``eval report --json`` prints it (before redaction) and the
    columns it was computed from (the figures' points); exit 1 when there is no such job.
    ``exclude_in_sample``: every figure without the items whose image the builtin backend was
    fitted on (the report says how many it left out)."""
    from ..db.about import job_summary
    from ..db.engine import read_scope
    from ..db.exports import in_sample_items, in_sample_overlap, report_columns
    from ..db.jobs import JobNotFound
    from ..reports.in_sample import (
        excluded_warning,
        fitted_images,
        in_sample_warnings,
        uses_builtin,
    )
    from ..reports.report import build_report
    from ..reports.report_text import cannot_see_warnings, provenance_warnings

    try:
        with read_scope(engine) as session:
            about = job_summary(session, job_id)
            excluded, unreadable = (
                in_sample_items(session, job_id, fitted_images())
                if exclude_in_sample
                else (frozenset(), 0)
            )
            # Columns, a page at a time: arrays of floats, not a dict per item.
            columns = report_columns(session, job_id, exclude=excluded)
            if exclude_in_sample:  # what is left has none of them
                columns.fitted_overlap = {"items": 0, "of": columns.size, "unreadable": unreadable}
            elif uses_builtin(about):  # by the digests stored at submit; pending items never
                columns.fitted_overlap = in_sample_overlap(
                    session, job_id, columns.size, fitted_images()
                )
    except JobNotFound as exc:
        fail(str(exc))
    built = build_report(
        columns, bootstrap=bootstrap, seed=seed, metric_job=about.get("tools") is not None
    )
    about = {
        **about,
        "answered_by": built["answered_by"],
        "warnings": [
            *provenance_warnings(about, built["answered_by"]),
            *in_sample_warnings(about, columns),
            *([excluded_warning(about, len(excluded))] if exclude_in_sample else []),
            *cannot_see_warnings(about, built),
        ],
    }
    if exclude_in_sample:
        about["in_sample_excluded"] = len(excluded)
    document = {"job": about, **built}
    document["vlm"] = read_vlm_summary(engine, job_id)
    return document, columns


def report(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    html: Annotated[
        str | None,
        typer.Option("--html", help="write an HTML report here (a path, or a store's URL)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0)] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="of the resampling")] = 0,
    figures: Annotated[
        str | None,
        typer.Option(
            "--figures",
            help="write the report's figures here as SVG and PDF (a folder, made if "
            "missing, or a store's URL)",
        ),
    ] = None,
    exclude_in_sample: Annotated[
        bool,
        typer.Option(
            "--exclude-in-sample",
            help="compute every figure without the items whose image the builtin backend "
            "was fitted on (the report says how many it left out)",
        ),
    ] = False,
    items_on_page: Annotated[
        int,
        typer.Option(
            "--items-on-page",
            min=0,
            help="with --html: at most this many items shown one by one with their traces "
            "(the worst disagreements, the best, failures, a seeded sample; 0: none)",
        ),
    ] = ITEMS_ON_PAGE,
    mlflow: MlflowOption = None,
    wandb: WandbOption = None,
) -> None:
    """SRCC, PLCC (raw and logistic), KRCC with bootstrap CIs; MCQ accuracy; per-tool table;
    the same per distortion type and level where the items give them.  ``--figures DIR``: the
    scatter plots and the breakdown as SVG and PDF, the figures the HTML report shows.

    ``--html``: the page also shows items one by one (``--items-on-page``), each with its
    trace; ``eval show JOB ITEM`` gives any other.

    ``--mlflow URI`` / ``--wandb PROJECT``: log the report to an experiment tracker too (its
    figures as metrics, the job's spec as params, the report and the per-item CSV as
    artifacts); logging a job again updates its run (docs/jobs.md, "Experiment trackers")."""
    from ..reports.figures import report_figures
    from ..reports.report_html import render_html
    from ..reports.report_text import render_text, scored_label
    from .tracking import check_trackers, log_job

    check_trackers(mlflow, wandb)
    engine = open_engine()
    job_id = resolve_job(engine, job)
    document, columns = report_document(
        engine, job_id, bootstrap=bootstrap, seed=seed, exclude_in_sample=exclude_in_sample
    )
    tracked = mlflow is not None or wandb is not None
    drawn = (
        report_figures(document, columns, scored=scored_label(document))
        if html is not None or figures is not None or tracked
        else []
    )
    if figures is not None:
        save_figures(drawn, figures, "no item has both a score and a MOS")
    if html is not None:
        items = None
        if items_on_page:
            from ..db.engine import read_scope
            from ..db.item_outline import read_item_pages

            with read_scope(engine) as session:
                items = read_item_pages(session, job_id, limit=items_on_page, seed=seed)
        save_page(
            lambda local: render_html(document, columns, local, figures=drawn, items=items), html
        )
    if tracked:
        table = export_rows(engine, job_id)
        log_job(job_id, document, columns, drawn, table, mlflow=mlflow, wandb=wandb)
    if as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_text(document)), highlight=False, soft_wrap=True)


def calibrate(
    tool: Annotated[str, typer.Option("--tool", "-t", help="tool to recalibrate")],
    job: Annotated[
        str | None,
        typer.Argument(help="job id or a unique prefix of one, with MOS (default: the latest)"),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
    mos_range: Annotated[
        tuple[float, float] | None,
        typer.Option(
            "--mos-range",
            help="MOS scale LOW HIGH mapped onto 1-5 (default: the job's min and max MOS)",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Fit a tool's logistic to this job's MOS; write it as a metadata override."""
    from ..runtime.recalibration import calibrate_tool

    engine = open_engine()
    try:
        result = calibrate_tool(
            engine, resolve_job(engine, job), tool, output=output, mos_range=mos_range
        )
    except (KeyError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        import dataclasses

        print(json.dumps(dataclasses.asdict(result), indent=2, default=str))
        return
    out.print(result.summary(), highlight=False, soft_wrap=True)
