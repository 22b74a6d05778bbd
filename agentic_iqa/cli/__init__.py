"""Parse and run the ``agentic-iqa`` command line: one module per group of commands, assembled here.

- :mod:`.assess`: one image assessed; :mod:`.runs`: stored runs listed and shown.
- :mod:`.eval`: the ``eval`` group, and the commands that submit, resume and cancel a job;
  :mod:`.estimate` prices a job first, :mod:`.results` shows and exports what it gave,
  :mod:`.traces` shows one item's trace (``eval show``), :mod:`.listing` and
  :mod:`.compare` list jobs and put them side by side.
- :mod:`.local_run`: a job run in this process (Ctrl-C, SIGTERM, a full disk);
  :mod:`.progress`: a followed job's bar, lines, rate and ETA.
- :mod:`.tools` and :mod:`.tool_runs`: the IQA tools listed, fetched and run on images.
- :mod:`.system` (check, worker, db), :mod:`.flower` (the web monitor), :mod:`.models`;
  :mod:`.jobflags`: the flags a job takes; :mod:`.common`: consoles, one-line failures, the
  results database; :mod:`.render`: a run as text; :mod:`.faults`: infrastructure faults as
  one line; :mod:`.image_paths`: images named.

``agentic_iqa.cli:app`` is the console entry point.  Each module imports only typer, rich and
light modules of this project at start-up (tests/cli/test_startup.py); commands import what they
use in their bodies.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Any

import typer

from .assess import assess
from .common import redact_logging
from .compare import compare
from .eval import eval_app
from .faults import FaultCatchingGroup
from .flower import flower
from .listing import list_jobs
from .models import models
from .results import calibrate
from .runs import runs_app
from .system import check, db_app, worker
from .tools import tools_app

#: Help wraps here when stdout is not a terminal (and COLUMNS does not say otherwise).
PIPE_WIDTH = 100
_DOUBLE_BACKTICKS = re.compile(r"``(.+?)``")
_LIST_ITEM = re.compile(r"\s*([-*]|\d+\.)\s")


def readable(text: str | None) -> str | None:
    """Return a docstring as help: each paragraph one line, so that it wraps to the width it is
    shown at (typer's rich help keeps the source's line breaks; a list item or an indented line
    keeps its own), and code in reST's double backquotes in Markdown's single ones, as shown."""
    if not text:
        return text
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        lines = paragraph.splitlines()
        if lines and lines[0].startswith("\b"):  # click's "do not rewrap" mark
            paragraphs.append(paragraph)
            continue
        joined = [lines[0].strip()] if lines else []
        for line in lines[1:]:
            if _LIST_ITEM.match(line) or line.startswith("  "):
                joined.append("\n" + line.rstrip())
            else:
                joined.append(" " + line.strip())
        paragraphs.append("".join(joined))
    return _DOUBLE_BACKTICKS.sub(r"`\1`", "\n\n".join(paragraphs))


def _fit_help(command: Any, *, plain: bool) -> None:
    """Make every command's help and its parameters' :func:`readable`; ``plain``: printed by click
    as plain text (no boxes, no colour, nothing cut to fit), as a pipe or a file wants it."""
    command.help = readable(command.help)
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None if plain else "rich"
    for parameter in command.params:
        if getattr(parameter, "help", None):
            parameter.help = readable(parameter.help)
    for child in getattr(command, "commands", {}).values():
        _fit_help(child, plain=plain)


class RootGroup(FaultCatchingGroup):
    """The ``agentic-iqa`` group: its help as rich panels on a terminal; into a pipe or a file
    as plain text at full width (rich would cut it to 80 columns, with ellipses)."""

    def main(self, *args: Any, **extra: Any) -> Any:
        plain = not sys.stdout.isatty()
        _fit_help(self, plain=plain)
        if plain:
            columns = os.environ.get("COLUMNS", "")
            extra.setdefault("terminal_width", int(columns) if columns.isdigit() else PIPE_WIDTH)
        return super().main(*args, **extra)


app = typer.Typer(
    cls=RootGroup,
    callback=redact_logging,
    help="Agentic image-quality assessment: plan, measure with real IQA tools, explain.",
    no_args_is_help=True,
)
app.add_typer(tools_app, name="tools")
app.command("assess")(assess)
app.command("check")(check)
app.command("models")(models)
app.command("worker")(worker)
app.command("flower")(flower)
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


__all__ = ["RootGroup", "app", "main", "readable"]
