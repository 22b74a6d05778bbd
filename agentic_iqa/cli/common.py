"""What every command shares: the consoles, one-line failures, the results database, the
backend flags and their check, the job a short id means.

Light on purpose (typer, rich and this project's small modules): every command imports it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape

from iqa_tools.errors import ToolError

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/cli/test_startup.py checks it.
if TYPE_CHECKING:
    from rich.segment import Segment

    from iqa_tools import ToolRegistry

    from ..runtime.consumers import Unconsumed
    from ..vlm.base import Role
    from ..vlm.settings import BackendConfig

#: Characters a terminal acts on rather than shows: C0 controls but tab and newline (ESC
#: starts colour, cursor and title sequences; CR overwrites a line), DEL, C1 controls, and the
#: bidirectional overrides that reorder what is shown.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """Return ``text`` with every control character written out as an escape (``\\x1b``): names,
    queries and answers come from datasets and models, and must not drive the terminal."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text
    )


class SafeConsole(Console):
    """A console whose printed text cannot carry terminal control sequences: every text
    segment is escaped (:func:`terminal_safe`) after rendering, whatever printed it (tables,
    markup, progress bars); rich's own styling and control segments are left as they are."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and _CONTROL.search(segment.text):
                yield segment._replace(text=terminal_safe(segment.text))
            else:
                yield segment


out = SafeConsole()
err = SafeConsole(stderr=True)

#: ``--debug`` (or ``AGENTIC_IQA_DEBUG=1``): print the traceback instead of writing it to a file.
_DEBUG = {"on": False}


def set_debug(on: bool) -> None:
    _DEBUG["on"] = on


def debugging() -> bool:
    return _DEBUG["on"] or os.environ.get("AGENTIC_IQA_DEBUG", "") not in ("", "0")


def redact_logging(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="print the traceback of an infrastructure fault (database, disk, "
            "broker) instead of one line and a log file",
        ),
    ] = False,
) -> None:
    """Log records of this process (SDK retries quote URLs) go out with credentials masked."""
    import logging

    set_debug(debug)

    from ..redact import install_log_redaction

    if not logging.getLogger().handlers:  # what Python's last-resort handler would print
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
    # --debug: a failed step's traceback in the log, which its item's error never carries
    logging.getLogger("agentic_iqa.runtime.service").setLevel(
        logging.DEBUG if debugging() else logging.NOTSET
    )
    install_log_redaction()


DeviceOption = Annotated[
    str | None, typer.Option("--device", help="auto, cpu or cuda (default from config)")
]


def load_registry(device: str | None = None) -> ToolRegistry:
    from iqa_tools import ToolRegistry

    from ..config import load_tool_settings

    overrides = {"device": device} if device else {}
    try:
        return ToolRegistry(load_tool_settings(**overrides))
    except (ToolError, ValueError) as exc:
        fail(str(exc))


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one redacted error line and exit ``code`` (2: nothing was written, fix the
    configuration; 1: the work itself failed)."""
    import sys
    import traceback

    from ..redact import redact

    handled = sys.exc_info()[1]
    if handled is not None and debugging():  # --debug: what led to the line, masked
        err.print(
            redact("".join(traceback.format_exception(handled))) or "",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    err.print(
        f"[bold red]error:[/] {escape(redact(message) or '')}", highlight=False, soft_wrap=True
    )
    raise typer.Exit(code)


#: The same three flags wherever a VLM is used (assess, eval submit, eval estimate).
BackendOption = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="VLM backend for every role: builtin, openai or anthropic "
        "(default: configs/model_backends.yaml, AGENTIC_IQA_VLM_BACKEND)",
    ),
]


ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="model for every role, e.g. gpt-4o or Qwen/Qwen2.5-VL-7B-Instruct "
        "(AGENTIC_IQA_VLM_MODEL)",
    ),
]


FollowUpOption = Annotated[
    bool | None,
    typer.Option(
        "--follow-up/--no-follow-up",
        help="ask the model once more which option it chose when its reply names none "
        "readably (its reply quoted, no image); default: on for hosted models "
        "(AGENTIC_IQA_VLM_FOLLOW_UP)",
        show_default=False,
    ),
]


BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="an OpenAI-compatible server (vLLM, Ollama), e.g. "
        "http://localhost:8000/v1 (AGENTIC_IQA_VLM_BASE_URL)",
    ),
]


def use_backend(
    backend: str | None,
    model: str | None,
    base_url: str | None,
    *,
    check: bool = True,
    follow_up: bool | None = None,
) -> dict[Role, BackendConfig]:
    """Return the role configurations with the flags applied (for every role), checked before
    anything is stored (:func:`agentic_iqa.vlm.preflight.preflight`): a missing key, an
    endpoint that does not answer or a model it does not serve exits 2 with one line.  A
    ``--model`` without ``--backend`` takes the backend its name implies, said in one line on
    stderr, or exits 2: the builtin would ignore it, and the job would name a model that never
    answered.  ``follow_up``: ``--follow-up/--no-follow-up`` (None: the configured default)."""
    from ..vlm.base import VLMConfigurationError
    from ..vlm.preflight import preflight
    from ..vlm.settings import load_backend_configs

    flags = {
        name: value
        for name, value in (
            ("backend", backend),
            ("model", model),
            ("base_url", base_url),
            ("follow_up", follow_up),
        )
        if value is not None
    }
    notes: list[str] = []
    try:
        configs = dict(load_backend_configs(overrides=flags, notes=notes))
        for note in notes:
            err.print(escape(note), highlight=False, soft_wrap=True)
        if check:
            preflight(configs)
    except VLMConfigurationError as exc:
        fail(str(exc), code=2)
    return configs


def unconsumed_queues() -> list[Unconsumed]:
    """Return the configured queues that hold work and have no live worker, with since when;
    nothing in embedded mode (no broker), for a broker other than Redis, or one away."""
    from ..config import PipelineSettings
    from ..runtime.consumers import check_queues

    settings = PipelineSettings.load()
    if not settings.broker_url:
        return []
    return check_queues(settings.broker_url, settings.queues)


def open_engine(*, create: bool = False):  # noqa: ANN202 - sqlalchemy Engine, imported lazily
    """Open the results database, migrated.  Only a command that stores something (``create``:
    submit, assess) may create the default SQLite file; any other exits 1 naming the file it
    did not find and how to point at another, and leaves no file behind."""
    from ..config import PipelineSettings
    from ..db.engine import NoDatabase, ensure_schema, existing_engine, make_engine

    configured = PipelineSettings.load().database_url
    try:
        engine = make_engine(configured) if create else existing_engine(configured)
    except NoDatabase as exc:
        fail(
            f"{exc}: "
            + (
                "the SQLite file AGENTIC_IQA_DATABASE_URL names does not exist; check "
                "AGENTIC_IQA_DATABASE_URL (nothing was created)"
                if configured
                else "no job was submitted from this folder; run the command where "
                "`agentic-iqa eval submit` ran, or set AGENTIC_IQA_DATABASE_URL to the database "
                "that holds your jobs (e.g. sqlite:////path/to/agentic-iqa.sqlite3)"
            )
        )
    ensure_schema(engine)
    return engine


def explain_not_found(engine: Any, exc: LookupError) -> str:
    """Return the line for a job or run the database does not hold, naming that database
    (redacted): from another folder the default SQLite file is another one."""
    from ..db.jobs import JobNotFound, NoJobs
    from ..db.runs import RunNotFound

    where = redact_url(engine)
    if isinstance(exc, NoJobs):
        return (
            f"no job in the database {where} yet: submit one with `agentic-iqa eval "
            "submit MANIFEST`, or set AGENTIC_IQA_DATABASE_URL to the database that holds "
            "your jobs"
        )
    if isinstance(exc, JobNotFound | RunNotFound):
        return f"{exc} {where}"
    return str(exc)  # an ambiguous prefix: the ids it matches say which database it is


def resolve_job(engine: Any, reference: str | None) -> str:
    """Return the job a full id, a unique prefix (the 8 characters the progress bar shows) or None
    (the latest job) means; one clear error line otherwise (unknown, naming the database, or
    which jobs an ambiguous prefix matches)."""
    from ..db.engine import read_scope
    from ..db.jobs import JobNotFound, resolve_job_id
    from ..db.queries import AmbiguousId

    try:
        with read_scope(engine) as session:
            return resolve_job_id(session, reference)
    except (JobNotFound, AmbiguousId) as exc:
        fail(explain_not_found(engine, exc))


def redact_url(engine: Any) -> str:
    """Return the results database's URL with any password or token masked."""
    from ..redact import redact

    return redact(engine.url.render_as_string(hide_password=True)) or ""


def format_duration(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(minutes)} min {rest:.0f} s"


def read_broker_url() -> str | None:
    from ..config import PipelineSettings

    return PipelineSettings.load().broker_url or None


def summarize_error(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def save_figures(drawn: list[Any], folder: str, nothing: str) -> None:
    """Write each figure as SVG and PDF (``eval report/compare --figures DIR``), the paths on
    stderr; DIR may be a store's URL.  A folder that cannot be written is one line and exit 1, and
    no figure says why."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display, is_url, join_under, output_folder

    from ..reports.figure_files import write_figures

    try:
        with output_folder(folder) as local:
            written = write_figures(drawn, local)
    except StorageError as exc:
        fail(f"cannot write figures to {display(folder)}: {exc}")
    except OSError as exc:
        fail(f"cannot write figures into {folder}: {exc.strerror or exc}")
    for path in written:
        shown = join_under(folder, path.name) if is_url(folder) else str(path)
        err.print(f"wrote {display(shown)}", highlight=False, soft_wrap=True)
    if not drawn:
        err.print(f"no figure: {nothing}", highlight=False, soft_wrap=True)


def save_page(write: Any, where: str) -> None:
    """Call ``write(local_path)`` where ``--html PATH`` asked, a path or a store's URL,
    then "wrote ..." on stderr; a store that refuses is one line and exit 1."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display, output_file

    try:
        with output_file(where) as local:
            write(local)
    except StorageError as exc:
        fail(f"cannot write {display(where)}: {exc}")
    err.print(f"wrote {display(where)}", highlight=False, soft_wrap=True)


def print_unwrapped(renderable: Any, console: Console = out) -> None:
    """Print fitting the screen on a terminal; into a pipe or file, at full width (no cuts)."""
    if console.is_terminal:
        console.print(renderable)
        return
    from rich.measure import Measurement

    wide = SafeConsole(file=console.file, width=100_000)
    width = Measurement.get(wide, wide.options, renderable).maximum
    SafeConsole(file=console.file, width=max(width, 20)).print(renderable)
