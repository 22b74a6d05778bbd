"""What every command shares: the consoles, one-line failures, the results database, the
backend flags and their check, the job a short id means.

Light on purpose (typer, rich and this project's small modules): every command imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from iqa_tools.errors import ToolError

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/test_cli_startup.py checks it.
if TYPE_CHECKING:
    from iqa_tools import ToolRegistry

out = Console()
err = Console(stderr=True)


def _redacted_logging() -> None:
    """Log records of this process (SDK retries quote URLs) go out with credentials masked."""
    import logging

    from ..redact import install_log_redaction

    if not logging.getLogger().handlers:  # what Python's last-resort handler would print
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
    install_log_redaction()


DeviceOption = Annotated[
    str | None, typer.Option("--device", help="auto, cpu or cuda (default from config)")
]


def _registry(device: str | None = None) -> ToolRegistry:
    from iqa_tools import ToolRegistry

    from ..config import load_tool_settings

    overrides = {"device": device} if device else {}
    try:
        return ToolRegistry(load_tool_settings(**overrides))
    except (ToolError, ValueError) as exc:
        _fail(str(exc))


def _fail(message: str, code: int = 1) -> typer.Exit:
    """Print one redacted error line and exit ``code`` (2: nothing was written, fix the
    configuration; 1: the work itself failed)."""
    from ..redact import redact

    err.print(f"[bold red]error:[/] {escape(redact(message) or '')}", highlight=False,
              soft_wrap=True)
    raise typer.Exit(code)


#: The same three flags wherever a VLM is used (assess, eval submit, eval estimate).
BackendOption = Annotated[str | None, typer.Option(
    "--backend", help="VLM backend for every role: builtin, openai or anthropic "
                      "(default: configs/model_backends.yaml, AGENTIC_IQA_VLM_BACKEND)")]


ModelOption = Annotated[str | None, typer.Option(
    "--model", help="model for every role, e.g. gpt-4o or Qwen/Qwen2.5-VL-7B-Instruct "
                    "(AGENTIC_IQA_VLM_MODEL)")]


BaseUrlOption = Annotated[str | None, typer.Option(
    "--base-url", help="an OpenAI-compatible server (vLLM, Ollama), e.g. "
                       "http://localhost:8000/v1 (AGENTIC_IQA_VLM_BASE_URL)")]


def use_backend(backend: str | None, model: str | None, base_url: str | None, *,
                check: bool = True) -> dict[str, Any]:
    """The role configurations with the flags applied (for every role), checked before
    anything is stored (:func:`agentic_iqa.vlm.preflight.preflight`): a missing key, an
    endpoint that does not answer or a model it does not serve exits 2 with one line.  A
    ``--model`` without ``--backend`` takes the backend its name implies, said in one line on
    stderr, or exits 2: the builtin would ignore it, and the job would name a model that never
    answered."""
    from ..vlm.base import VLMConfigurationError
    from ..vlm.preflight import preflight
    from ..vlm.settings import load_backend_configs

    flags = {name: value for name, value in (("backend", backend), ("model", model),
                                             ("base_url", base_url)) if value is not None}
    notes: list[str] = []
    try:
        configs = dict(load_backend_configs(overrides=flags, notes=notes))
        for note in notes:
            err.print(escape(note), highlight=False, soft_wrap=True)
        if check:
            preflight(configs)
    except VLMConfigurationError as exc:
        _fail(str(exc), code=2)
    return configs


def _engine():  # noqa: ANN202 - sqlalchemy Engine, imported lazily
    from ..config import PipelineSettings
    from ..db.engine import ensure_schema, make_engine

    engine = make_engine(PipelineSettings.load().database_url)
    ensure_schema(engine)
    return engine


def _job_id(engine: Any, reference: str | None) -> str:
    """The job a full id, a unique prefix (the 8 characters the progress bar shows) or None
    (the latest job) means; one clear error line otherwise (unknown, or which jobs an
    ambiguous prefix matches)."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..db.reads import JobNotFound

    try:
        with read_scope(engine) as session:
            return reads.resolve_job_id(session, reference)
    except (JobNotFound, reads.AmbiguousId) as exc:
        _fail(str(exc))


def _safe_url(engine: Any) -> str:
    """The results database's URL with any password or token masked."""
    from ..redact import redact

    return redact(engine.url.render_as_string(hide_password=True)) or ""


def _duration(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(minutes)} min {rest:.0f} s"


def _broker() -> str | None:
    from ..config import PipelineSettings

    return PipelineSettings.load().broker_url or None


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
