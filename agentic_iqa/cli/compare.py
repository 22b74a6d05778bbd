"""``agentic-iqa eval compare``: jobs side by side on the items they share, the first the
baseline (the table itself is :mod:`agentic_iqa.jobs.compare`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .common import _engine, _fail, _job_id, err, out
from .eval import _vlm_summary, export_rows


def compare(
    jobs: Annotated[list[str], typer.Argument(
        help="two or more job ids or unique prefixes; the first is the baseline")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="write an HTML page here")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0,
                                           help="resamples per interval (0: none)")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="of the resampling")] = 0,
) -> None:
    """SRCC, PLCC, KRCC against MOS (or MCQ accuracy) per job and per tool of a metric job,
    each with its difference from the baseline on the items both scored (paired bootstrap
    interval), wall time and cost per item, and a warning where the builtin backend is judged
    on images it was fitted on."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..db.reads import JobNotFound
    from ..jobs.compare import build_comparison, render_html, render_text

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
    if html is not None:
        render_html(document, html)
        err.print(f"wrote {html}", highlight=False, soft_wrap=True)
    if as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_text(document)), highlight=False, soft_wrap=True)
