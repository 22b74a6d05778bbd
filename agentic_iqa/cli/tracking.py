"""Log a job to experiment trackers from the command line (``--mlflow URI``, ``--wandb PROJECT``).

``eval report`` logs the report it computed; ``eval submit`` logs each job it waited for (run
here, or with ``--wait``) when the job ends, and says for a job handed to the workers that
``eval report JOB --mlflow URI`` logs it once it has ended.  The files logged beside the figures
are the report as text and as HTML (with its figures) and the per-item table as CSV, streamed
from the database as ``eval export`` writes it, every text cell redacted.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import err, fail

MlflowOption = Annotated[
    str | None,
    typer.Option(
        "--mlflow",
        metavar="URI",
        help="log the job to this MLflow tracking store too (sqlite:///mlflow.db, "
        "http://host:5000): metrics, params, the report and the per-item CSV; a job "
        "logged again updates its run (needs agentic-iqa[mlflow])",
    ),
]
WandbOption = Annotated[
    str | None,
    typer.Option(
        "--wandb",
        metavar="PROJECT",
        help="log the job to this Weights & Biases project too (ENTITY/PROJECT; "
        "WANDB_MODE=offline writes it locally), as --mlflow does (needs agentic-iqa[wandb])",
    ),
]


def check_trackers(mlflow: str | None, wandb: str | None) -> None:
    """Exit 2 before any work when a tracker asked for cannot log: its library is missing, or
    its URI or project cannot be one."""
    from ..trackers import TrackerError, check_target, require

    for name, target in (("mlflow", mlflow), ("wandb", wandb)):
        if target is None:
            continue
        try:
            check_target(name, target)
            require(name)
        except TrackerError as exc:
            fail(str(exc), code=2)


def _redacted_rows(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Yield ``rows`` with every text cell redacted (a signed image URL, an echoed key)."""
    from ..redact import redact

    for row in rows:
        yield {
            name: redact(value) if isinstance(value, str) else value for name, value in row.items()
        }


def write_artifacts(
    document: Mapping[str, Any],
    columns: Any,
    drawn: Sequence[Any],
    table: tuple[list[str], Iterator[dict[str, Any]]],
    folder: Path,
) -> list[Path]:
    """Write the report (``report.txt``, ``report.html``) and the per-item ``table`` (its
    columns and rows, as ``eval export`` gets them) as ``items.csv`` into ``folder``,
    redacted; return their paths."""
    from ..redact import redact
    from ..reports.export import write_rows
    from ..reports.report_html import render_html
    from ..reports.report_text import render_text

    text = folder / "report.txt"
    text.write_text(redact(render_text(document)) + "\n", encoding="utf-8")
    page = render_html(document, columns, folder / "report.html", figures=drawn)
    page.write_text(redact(page.read_text(encoding="utf-8")), encoding="utf-8")
    items = folder / "items.csv"
    names, rows = table
    write_rows(_redacted_rows(rows), items, "csv", names)
    return [text, page, items]


def log_job(
    job_id: str,
    document: Mapping[str, Any],
    columns: Any,
    drawn: Sequence[Any],
    table: tuple[list[str], Iterator[dict[str, Any]]],
    *,
    mlflow: str | None,
    wandb: str | None,
) -> None:
    """Log the report ``document`` of ``job_id`` (its ``columns`` and ``drawn`` figures make
    the HTML page, ``table`` the per-item CSV) to each tracker given, saying where on stderr;
    a tracker that refuses is one line and exit 1."""
    from ..redact import redact
    from ..trackers import TrackerError, TrackerMissing, log_report

    # What `eval report --json` prints, read back: the trackers get exactly its values.
    printed = json.loads(redact(json.dumps(document, default=str)))
    with tempfile.TemporaryDirectory(prefix="agentic-iqa-track-") as tmp:
        artifacts = write_artifacts(printed, columns, drawn, table, Path(tmp))
        for name, target in (("mlflow", mlflow), ("wandb", wandb)):
            if target is None:
                continue
            try:
                logged = log_report(name, target, printed, artifacts)
            except TrackerMissing as exc:
                fail(str(exc), code=2)
            except TrackerError as exc:
                fail(f"job {job_id[:8]} was not logged: {exc}")
            verb = "updated" if logged.updated else "logged"
            err.print(
                f"{verb} job {job_id[:8]} in {'MLflow' if name == 'mlflow' else 'W&B'}: "
                f"{logged.where}",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )


def later(job_id: str, *, mlflow: str | None, wandb: str | None) -> None:
    """Say, for a job handed to the workers without ``--wait``, how to log it once it ends."""
    if mlflow is None and wandb is None:
        return
    from ..redact import redact

    flags = " ".join(
        f"--{name} {target}" for name, target in (("mlflow", mlflow), ("wandb", wandb)) if target
    )
    err.print(
        f"not logged yet (the workers run it): when it ends, `agentic-iqa eval report "
        f"{job_id[:8]} {redact(flags)}` logs it (or submit with --wait)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
