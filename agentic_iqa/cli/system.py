"""``agentic-iqa check``, ``worker`` and ``db``: the backends, the Celery workers, the schema."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from .common import (
    BackendOption,
    BaseUrlOption,
    ModelOption,
    err,
    fail,
    out,
    use_backend,
)

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/cli/test_startup.py checks it.
if TYPE_CHECKING:
    from ..vlm.base import Role

db_app = typer.Typer(help="The results database.", no_args_is_help=True)


def check(
    backend: BackendOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Try the configured VLM backend of each role with one tiny request: key, endpoint, model,
    whether log-probabilities come back, latency.  Exits 2 when one does not work."""
    from ..vlm.preflight import probe

    configs = use_backend(backend, model, base_url, check=False)
    groups: dict[Any, list[Role]] = {}
    for role, config in configs.items():
        groups.setdefault(config, []).append(role)
    results = [(roles, probe(roles[0], config)) for config, roles in groups.items()]
    if as_json:
        print(
            json.dumps(
                [{"roles": roles, **result.__dict__} for roles, result in results],
                indent=2,
                default=str,
            )
        )
    else:
        for roles, result in results:
            head = (
                f"{'/'.join(roles)}: {result.backend}"
                + (f" {result.model}" if result.model else "")
                + f" at {result.where}"
            )
            if not result.ok:
                line = f"[red]FAILED[/] {escape(head)}: {escape(result.error or '')}"
            elif result.backend == "builtin":
                line = f"[green]ok[/] {escape(head)} (offline; no request needed)"
            else:
                line = (
                    f"[green]ok[/] {escape(head)}: answered {escape(repr(result.reply))} "
                    f"as {escape(result.answered_model or '?')} in "
                    f"{result.latency_s:.2f} s; log-probabilities: "
                    f"{'yes' if result.logprobs else 'no (scoring asks for stated ones)'}"
                )
            out.print(line, highlight=False, soft_wrap=True)
    if not all(result.ok for _roles, result in results):
        raise typer.Exit(2)


def worker(
    queues: Annotated[
        str | None,
        typer.Option(
            "--queues", "-Q", help="comma-separated queues (default: every configured queue)"
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 1,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
    pool: Annotated[
        str, typer.Option("--pool", help="prefork, solo or threads (VLM queue: threads with -c 64)")
    ] = "prefork",
    hostname: Annotated[
        str | None,
        typer.Option(
            "--name",
            "--hostname",
            "-n",
            help="Celery node name (default: its queues at this host, e.g. gpu@%h; %h is the "
            "host name, a container's id in Docker)",
        ),
    ] = None,
    health_file: Annotated[
        str | None,
        typer.Option(
            "--health-file",
            envvar="AGENTIC_IQA_WORKER_HEALTH_FILE",
            help="file touched every AGENTIC_IQA_WORKER_HEALTH_INTERVAL seconds (default 10) "
            "while the worker is connected to the broker, for a container's healthcheck",
        ),
    ] = None,
    max_memory: Annotated[
        str | None,
        typer.Option(
            "--max-memory",
            envvar="AGENTIC_IQA_WORKER_MAX_MEMORY",
            help="memory this worker may use, e.g. 2GB: the tool budget per call "
            "(AGENTIC_IQA_TOOL_MEMORY) is lowered to what fits with --concurrency, so a "
            "too-large image fails as such instead of the worker being OOM-killed",
        ),
    ] = None,
    tool_time_limit: Annotated[
        int | None,
        typer.Option(
            "--tool-time-limit",
            min=1,
            envvar="AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT",
            help="seconds a tool step may run, wherever it runs (default 900): raise it for "
            "very large photos",
        ),
    ] = None,
    vlm_time_limit: Annotated[
        int | None,
        typer.Option(
            "--vlm-time-limit",
            min=1,
            envvar="AGENTIC_IQA_VLM_SOFT_TIME_LIMIT",
            help="seconds a model step may run (default 300)",
        ),
    ] = None,
) -> None:
    """Start a Celery worker (same as `celery -A workers.celery_app:app worker`).

    VLM steps wait on the network: a worker of the VLM queue (``vlm_queue``) holds 64 calls in
    flight with ``--queues vlm --pool threads --concurrency 64``.
    """
    import os

    extra: list[str] = []
    if max_memory is not None:
        extra = worker_memory(max_memory, concurrency, pool)
    # Before the app is built from the settings; the worker's processes inherit them.
    for name, value in (("TOOL", tool_time_limit), ("VLM", vlm_time_limit)):
        if value is not None:
            os.environ[f"AGENTIC_IQA_{name}_SOFT_TIME_LIMIT"] = str(value)
    if health_file:
        os.environ["AGENTIC_IQA_WORKER_HEALTH_FILE"] = health_file
    from workers.celery_app import app as celery_app

    if queues is None:
        settings = celery_app.settings
        queues = ",".join(
            dict.fromkeys([settings.default_queue, settings.vlm_steps_queue, settings.tool_queue])
        )
    argv = [
        "worker",
        f"--queues={queues}",
        f"--concurrency={concurrency}",
        f"--loglevel={loglevel}",
        f"--pool={pool}",
    ]
    argv.append(f"--hostname={hostname or node_name(queues)}")
    raise typer.Exit(run_celery(["--app", "workers.celery_app:app", *argv, *extra]))


def run_celery(args: list[str]) -> int:
    """Run Celery's command line with ``args`` and return its exit code.

    Not ``app.worker_main``: it drops the code Celery's command ends with, so a worker that
    stopped on an "Unrecoverable error" (code 1) exited 0 and no restart-on-failure brought it
    back.
    """
    import click
    from celery.bin.celery import celery

    try:
        code = celery.main(args=args, prog_name="celery", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    return code if isinstance(code, int) else 0


def node_name(queues: str) -> str:
    """Return a worker's default Celery node name: its queues joined by ``+``, at this host
    (``gpu@%h``, ``default+vlm@%h``), so that workers of different queues on one host (or
    replicas in containers, each its own host name) are told apart in Flower and in
    ``step_records.worker``.  Characters a node name should not hold become ``_``."""
    names = [name.strip() for name in queues.split(",") if name.strip()]
    joined = "+".join(re.sub(r"[^A-Za-z0-9_.+-]", "_", name) for name in names)
    return f"{joined or 'worker'}@%h"


def worker_memory(max_memory: str, concurrency: int, pool: str) -> list[str]:
    """Fit the tool budget per call into ``--max-memory``: lower ``AGENTIC_IQA_TOOL_MEMORY``
    in this process's environment (which the worker's processes inherit) when the configured
    budget times the calls in flight, beside each process's idle memory, does not fit; say so
    in one line.  Returns Celery's own ``--max-memory-per-child`` for a prefork pool: a child
    that grew past its share (model caches) is replaced after its task."""
    import os

    from iqa_tools.memory import parse_bytes, worker_fit

    from ..config import load_tool_settings

    try:
        limit = parse_bytes(max_memory)
        configured = load_tool_settings().tool_memory
    except ValueError as exc:
        fail(f"--max-memory: {exc}", code=2)
    fit = worker_fit(limit, concurrency, pool, configured)
    if fit.budget <= 0:
        fail(fit.line, code=2)
    err.print(fit.line, highlight=False, soft_wrap=True, markup=False)
    if fit.lowered:
        os.environ["AGENTIC_IQA_TOOL_MEMORY"] = str(fit.budget)
    if pool != "prefork":
        return []
    return [f"--max-memory-per-child={limit // concurrency // 1024}"]


@db_app.command("upgrade")
def db_upgrade(
    url: Annotated[str | None, typer.Option("--url", help="database URL (default: config)")] = None,
) -> None:
    """Create or migrate the database schema to the latest version (alembic upgrade head)."""
    from ..config import PipelineSettings
    from ..db.engine import upgrade

    target = url or PipelineSettings.load().database_url
    upgrade(target)
    out.print("database schema is up to date", highlight=False)
