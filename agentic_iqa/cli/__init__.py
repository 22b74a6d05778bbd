"""The ``agentic-iqa`` command line: one module per group of commands, assembled here.

``agentic_iqa.cli:app`` is the console entry point.  Each module imports only typer, rich and
light modules of this project at start-up (tests/test_cli_startup.py); commands import what they
use in their bodies.
"""

from __future__ import annotations

import typer

from .assess import assess
from .common import _redacted_logging
from .compare import compare
from .eval import calibrate, eval_app
from .faults import FaultCatchingGroup
from .listing import list_jobs
from .models import models
from .runs import runs_app
from .system import check, db_app, worker
from .tools import tools_app

app = typer.Typer(
    cls=FaultCatchingGroup,
    callback=_redacted_logging,
    help="Agentic image-quality assessment: plan, measure with real IQA tools, explain.",
    no_args_is_help=True,
)
app.add_typer(tools_app, name="tools")
app.command("assess")(assess)
app.command("check")(check)
app.command("models")(models)
app.command("worker")(worker)
app.add_typer(db_app, name="db")
app.add_typer(eval_app, name="eval")
eval_app.command("calibrate")(calibrate)
eval_app.command("compare")(compare)
eval_app.command("list")(list_jobs)
# The old name, kept so scripts keep working.
app.command("calibrate", help="Same as `agentic-iqa eval calibrate`.")(calibrate)
app.add_typer(runs_app, name="runs")


def main() -> None:  # pragma: no cover - console entry point
    app()


__all__ = ["app", "main"]
