"""``agentic-iqa eval compare``: jobs side by side on the items they share, the first the
baseline (the table itself is :mod:`agentic_iqa.reports.compare`), or a sweep's table; either as
a table for a paper (``--format latex|markdown|csv``, :mod:`agentic_iqa.reports.tables`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.markup import escape

from .common import fail, open_engine, out, redact_url, resolve_job, save_figures, save_page
from .results import read_vlm_summary

if TYPE_CHECKING:
    from ..reports.tables import PaperTable, TableFormat


def compare(
    jobs: Annotated[
        list[str] | None,
        typer.Argument(help="two or more job ids or unique prefixes; the first is the baseline"),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="a sweep's jobs (`eval submit --group`) in one table: a row per "
            "model or tool, a column per dataset, SRCC/PLCC or accuracy in each "
            "cell",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="a table for a paper: latex, markdown or csv (SRCC, PLCC, KRCC with "
            "intervals, best in bold, a caption)",
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="write the --format table here (a path, or a store's URL) "
            "instead of standard output",
        ),
    ] = None,
    html: Annotated[
        str | None,
        typer.Option("--html", help="write an HTML page here (a path, or a store's URL)"),
    ] = None,
    figures: Annotated[
        str | None,
        typer.Option(
            "--figures",
            help="write the figures here as SVG and PDF (a folder, made if missing): "
            "the paired differences, or a group's bars",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="JOB=NAME: call a job NAME in the page and figures instead of its "
            "name or id (repeatable; JOB: an id or unique prefix)",
        ),
    ] = None,
    bootstrap: Annotated[
        int, typer.Option("--bootstrap", min=0, help="resamples per interval (0: none)")
    ] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="of the resampling")] = 0,
    exclude_in_sample: Annotated[
        bool,
        typer.Option(
            "--exclude-in-sample",
            help="leave the items whose image the builtin backend was fitted on out of every "
            "job's figures (said per job in the output)",
        ),
    ] = False,
) -> None:
    """SRCC, PLCC, KRCC against MOS (or MCQ accuracy) per job and per tool of a metric job,
    each with its difference from the baseline on the items both scored (paired bootstrap
    interval), wall time and cost per item, and a warning where the builtin backend is judged
    on images it was fitted on.  ``--figures DIR``: the differences as a figure (SVG, PDF), the
    one the HTML page shows; lines are named by ``--label`` or the job's name.  A tool is
    scored on its own score, sign-corrected so that higher is better; MCQ accuracy counts
    failed and unanswered questions as wrong."""
    from ..db.about import job_summary
    from ..db.engine import read_scope
    from ..db.exports import in_sample_items, in_sample_overlap, report_columns
    from ..db.jobs import JobNotFound
    from ..reports.compare import build_comparison
    from ..reports.compare_html import render_html
    from ..reports.compare_text import render_text
    from ..reports.figures import comparison_figures
    from ..reports.in_sample import excluded_warning, fitted_images, uses_builtin
    from ..reports.names import line_names
    from ..reports.tables import TABLE_FORMATS

    if fmt is not None and fmt not in TABLE_FORMATS:
        fail(f"unknown --format {fmt!r}: use {', '.join(TABLE_FORMATS)}", code=2)
    if output is not None and fmt is None:
        fail("-o writes a --format table: give --format latex, markdown or csv", code=2)
    if fmt is not None and as_json:
        fail("give --json or --format, not both", code=2)
    if group is not None and exclude_in_sample:
        fail("--exclude-in-sample applies to jobs compared, not to a --group table", code=2)
    if group is not None:
        if jobs:
            fail("give jobs or --group, not both", code=2)
        if label:
            fail(
                "--label names the jobs of a comparison; a group's rows are its models and tools",
                code=2,
            )
        _compare_group(
            group,
            as_json,
            html=html,
            folder=figures,
            fmt=fmt,
            output=output,
            bootstrap=bootstrap,
            seed=seed,
        )
        return
    jobs = jobs or []
    if len(jobs) < 2:
        fail("give at least two jobs to compare (the first is the baseline)", code=2)
    engine = open_engine()
    ids = [resolve_job(engine, reference) for reference in jobs]
    if len(set(ids)) < len(ids):
        fail(
            "a job is given more than once: "
            + ", ".join(sorted({i[:8] for i in ids if ids.count(i) > 1})),
            code=2,
        )
    described = []
    hashes: dict[str, str | None] = {}
    left_out: list[tuple[dict[str, Any], int]] = []
    try:
        for index, job_id in enumerate(ids):
            with read_scope(engine) as session:
                about = job_summary(session, job_id)
                # Every job loses the same images, so the comparison stays on shared items.
                excluded, unreadable = (
                    in_sample_items(session, job_id, fitted_images(), hashes)
                    if exclude_in_sample
                    else (frozenset(), 0)
                )
                # Columns with each item's id digest: arrays, not a dict per item; the
                # baseline's with its ids' order and image digests (its shared items are
                # resampled in that order, by image).
                columns = report_columns(
                    session, job_id, identities=True, baseline=index == 0, exclude=excluded
                )
                if exclude_in_sample:
                    left_out.append((about, len(excluded)))
                    columns.fitted_overlap = {
                        "items": 0,
                        "of": columns.size,
                        "unreadable": unreadable,
                    }
                elif uses_builtin(about):  # by the digests stored at submit; pending never
                    columns.fitted_overlap = in_sample_overlap(
                        session, job_id, columns.size, fitted_images(), hashes
                    )
            described.append(({**about, "vlm": read_vlm_summary(engine, job_id)}, columns))
    except JobNotFound as exc:
        fail(str(exc))
    document = line_names(
        build_comparison(described, bootstrap=bootstrap, seed=seed),
        _labels(engine, label or [], ids),
    )
    if exclude_in_sample:
        document["warnings"] = [
            *(excluded_warning(about, count) for about, count in left_out),
            *document["warnings"],
        ]
        document["in_sample_excluded"] = {str(about["id"]): count for about, count in left_out}
    drawn = comparison_figures(document) if html is not None or figures is not None else []
    if figures is not None:
        save_figures(drawn, figures, "no line has a difference from the baseline")
    if html is not None:
        save_page(lambda local: render_html(document, local, figures=drawn), html)
    if fmt is not None:
        from ..reports.tables import from_comparison

        _write_table(from_comparison(document), fmt, output)
    elif as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_text(document)), highlight=False, soft_wrap=True)


def _labels(engine: Any, given: list[str], ids: list[str]) -> dict[str, str]:
    """Return ``--label JOB=NAME`` as job id -> name; a JOB not among those compared, or no name, is
    one line and exit 2."""
    labels: dict[str, str] = {}
    for entry in given:
        reference, sep, name = entry.partition("=")
        if not sep or not reference.strip() or not name.strip():
            fail(f"--label {entry!r}: give JOB=NAME", code=2)
        job_id = resolve_job(engine, reference.strip())
        if job_id not in ids:
            fail(f"--label {entry!r}: job {job_id[:8]} is not one of those compared", code=2)
        labels[job_id] = name.strip()
    return labels


def _write_table(table: PaperTable, fmt: str, output: str | None) -> None:
    """Print the paper table in ``fmt`` on standard output, or written to ``output`` (a path or a
    store's URL), "wrote ..." on stderr."""
    from ..reports.tables import render

    text = render(table, cast("TableFormat", fmt))
    if output is None:
        print(text, end="")
        return
    save_page(lambda local: Path(local).write_text(text, encoding="utf-8", newline=""), output)


def _compare_group(
    group: str,
    as_json: bool,
    *,
    html: str | None = None,
    folder: str | None = None,
    fmt: str | None = None,
    output: str | None = None,
    bootstrap: int = 0,
    seed: int = 0,
) -> None:
    """Show the sweep's jobs in one table (``eval compare --group NAME``), a row per model or tool
    (JSON with ``--json``, a page with ``--html``, its bars as SVG and PDF in ``folder``
    (``--figures``), a paper table with ``--format``: only that one draws the bootstrap
    intervals)."""
    from ..db.engine import read_scope
    from ..db.jobs import job_ids
    from ..reports.figures import group_figures
    from ..reports.sweeps import group_table, render_group_html, render_group_text
    from .listing import job_headlines

    engine = open_engine()
    with read_scope(engine) as session:
        ids = job_ids(session, group=group)
    if not ids:
        fail(
            f"no job in group {group!r} in the database {redact_url(engine)}: `agentic-iqa "
            "eval list` shows the jobs and their groups"
        )
    resamples = bootstrap if fmt is not None else 0
    cells = []
    for job_id in reversed(ids):
        about, figures = job_headlines(engine, job_id, bootstrap=resamples, seed=seed)
        cells += [(about, figure) for figure in figures]
    document = group_table(group, cells)
    drawn = group_figures(document) if html is not None or folder is not None else []
    if folder is not None:
        save_figures(drawn, folder, "no job of the group has a correlation or an accuracy")
    if html is not None:
        save_page(lambda local: render_group_html(document, local, figures=drawn), html)
    if fmt is not None:
        from ..reports.report import CONFIDENCE
        from ..reports.tables import from_group

        _write_table(
            from_group(document, {"resamples": resamples, "seed": seed, "confidence": CONFIDENCE}),
            fmt,
            output,
        )
    elif as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_group_text(document)), highlight=False, soft_wrap=True)
