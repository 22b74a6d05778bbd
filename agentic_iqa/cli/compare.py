"""``agentic-iqa eval compare``: jobs side by side on the items they share, the first the
baseline (the table itself is :mod:`agentic_iqa.jobs.compare`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from .common import _engine, _fail, _job_id, _safe_url, _write_figures, _write_page, out
from .eval import _vlm_summary, export_rows


def compare(
    jobs: Annotated[list[str] | None, typer.Argument(
        help="two or more job ids or unique prefixes; the first is the baseline")] = None,
    group: Annotated[str | None, typer.Option(
        "--group", help="a sweep's jobs (`eval submit --group`) in one table: a row per "
                        "model, a column per dataset, SRCC/PLCC or accuracy in each cell")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    html: Annotated[str | None, typer.Option(
        "--html", help="write an HTML page here (a path, or a store's URL)")] = None,
    figures: Annotated[str | None, typer.Option(
        "--figures", help="write the paired-difference figure here as SVG and PDF (a folder, "
                          "made if missing)")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0,
                                           help="resamples per interval (0: none)")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="of the resampling")] = 0,
) -> None:
    """SRCC, PLCC, KRCC against MOS (or MCQ accuracy) per job and per tool of a metric job,
    each with its difference from the baseline on the items both scored (paired bootstrap
    interval), wall time and cost per item, and a warning where the builtin backend is judged
    on images it was fitted on.  ``--figures DIR``: the differences as a figure (SVG, PDF), the
    one the HTML page shows."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..db.reads import JobNotFound
    from ..jobs.compare import build_comparison, render_html, render_text
    from ..jobs.figures import comparison_figures

    if group is not None:
        if jobs:
            _fail("give jobs or --group, not both", code=2)
        _compare_group(group, as_json)
        return
    jobs = jobs or []
    if len(jobs) < 2:
        _fail("give at least two jobs to compare (the first is the baseline)", code=2)
    engine = _engine()
    ids = [_job_id(engine, reference) for reference in jobs]
    if len(set(ids)) < len(ids):
        _fail("a job is given more than once: "
              + ", ".join(sorted({i[:8] for i in ids if ids.count(i) > 1})), code=2)
    described = []
    try:
        for job_id in ids:
            with read_scope(engine) as session:
                about = reads.job_summary(session, job_id)
            _columns, rows = export_rows(engine, job_id)
            described.append(({**about, "vlm": _vlm_summary(engine, job_id)}, list(rows)))
    except JobNotFound as exc:
        _fail(str(exc))
    document = build_comparison(described, bootstrap=bootstrap, seed=seed)
    drawn = comparison_figures(document) if html is not None or figures is not None else []
    if figures is not None:
        _write_figures(drawn, figures, "no line has a difference from the baseline")
    if html is not None:
        _write_page(lambda local: render_html(document, local, figures=drawn), html)
    if as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_text(document)), highlight=False, soft_wrap=True)


def _compare_group(group: str, as_json: bool) -> None:
    """``eval compare --group NAME``: the sweep's jobs in one table (JSON with ``--json``)."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..jobs.sweeps import group_table, render_group_text
    from .listing import job_headline

    engine = _engine()
    with read_scope(engine) as session:
        ids = reads.job_ids(session, group=group)
    if not ids:
        _fail(f"no job in group {group!r} in the database {_safe_url(engine)}: `agentic-iqa "
              "eval list` shows the jobs and their groups")
    document = group_table(group, [job_headline(engine, job_id) for job_id in reversed(ids)])
    if as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_group_text(document)), highlight=False, soft_wrap=True)
