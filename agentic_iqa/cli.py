"""The ``agentic-iqa`` command line."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from iqa_tools.errors import StoreUnavailable, ToolError

from .cli_eval import BackendOption, BaseUrlOption, ModelOption, use_backend
from .redact import redact

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/test_cli_startup.py checks it.
if TYPE_CHECKING:
    from iqa_tools import ToolRegistry


def _redacted_logging() -> None:
    """Log records of this process (SDK retries quote URLs) go out with credentials masked."""
    import logging

    from .redact import install_log_redaction

    if not logging.getLogger().handlers:  # what Python's last-resort handler would print
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
    install_log_redaction()


app = typer.Typer(
    callback=_redacted_logging,
    help="Agentic image-quality assessment: plan, measure with real IQA tools, explain.",
    no_args_is_help=True,
)
tools_app = typer.Typer(help="The IQA tools (pyiqa): list, run, download or install weights.",
                        no_args_is_help=True)
app.add_typer(tools_app, name="tools")

out = Console()
err = Console(stderr=True)

DeviceOption = Annotated[
    str | None, typer.Option("--device", help="auto, cpu or cuda (default from config)")
]


def _registry(device: str | None = None) -> ToolRegistry:
    from iqa_tools import ToolRegistry

    from .config import load_tool_settings

    overrides = {"device": device} if device else {}
    try:
        return ToolRegistry(load_tool_settings(**overrides))
    except (ToolError, ValueError) as exc:
        _fail(str(exc))


def _fail(message: str, code: int = 1) -> typer.Exit:
    """Print one redacted error line and exit: what a user can act on, never a traceback."""
    err.print(f"[bold red]error:[/] {escape(redact(message) or '')}", highlight=False,
              soft_wrap=True)
    raise typer.Exit(code)


@tools_app.command("list")
def tools_list(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    kind: Annotated[str | None, typer.Option("--type", help="FR or NR only")] = None,
) -> None:
    """List every tool, whether it can run on this machine, and what is missing if not."""
    from rich.table import Table

    registry = _registry()
    rows = []
    for spec in registry.catalog:
        if kind and spec.type != kind.upper():
            continue
        availability = registry.availability(spec.name)
        rows.append((spec, availability))
    if as_json:
        print(json.dumps([
            {
                "name": spec.name,
                "type": spec.type,
                "pyiqa_name": spec.pyiqa_name,
                "lower_is_better": spec.lower_is_better,
                "available": availability.ok,
                "status": availability.status,
                "detail": availability.detail,
                "missing": [w.file for w in availability.missing],
                "normalization_warnings": spec.normalization_warnings(),
            }
            for spec, availability in rows
        ], indent=2))
        return
    table = Table(title="IQA tools (pyiqa)")
    for column in ("name", "type", "pyiqa", "lower better"):
        table.add_column(column, no_wrap=True)
    # File names are what a user copies: on a terminal they fold at the edge, never an ellipsis.
    table.add_column("available here", overflow="fold")
    for spec, availability in rows:
        colour = "green" if availability.ok else "red"
        table.add_row(spec.name, spec.type, spec.pyiqa_name or spec.factory or "",
                      "yes" if spec.lower_is_better else "",
                      f"[{colour}]{escape(availability.summary)}[/]")
    _print_unwrapped(table)
    ready = sum(1 for _, a in rows if a.ok)
    out.print(f"{ready} of {len(rows)} tools can run here.", highlight=False)
    for line in _tools_list_notes(registry.catalog, rows):
        out.print(line, highlight=False, soft_wrap=True, markup=False)


def _print_unwrapped(renderable: Any) -> None:
    """On a terminal, fit the screen; into a pipe or file, print at full width (no cuts)."""
    if out.is_terminal:
        out.print(renderable)
        return
    from rich.measure import Measurement

    wide = Console(file=out.file, width=100_000)
    width = Measurement.get(wide, wide.options, renderable).maximum
    Console(file=out.file, width=max(width, 20)).print(renderable)


def _tools_list_notes(catalog: Any, rows: list[tuple[Any, Any]]) -> list[str]:
    """At most one line per kind of note, and only about the tools listed."""
    notes = []
    needy = [spec for spec, availability in rows if availability.missing]
    fetchable = [spec.name for spec, availability in rows
                 if any(w.location != "hf_hub" for w in availability.missing)]
    if needy:
        # --paper when it is exactly what is missing; else the names, so nothing extra is fetched
        paper = {spec.name for spec in catalog if spec.from_paper
                 and any(w.location != "hf_hub" for w in spec.weights)}
        command = "agentic-iqa tools download " + (
            "--paper" if set(fetchable) == paper else " ".join(fetchable)
        )
        hub_only = [spec.name for spec in needy if spec.name not in fetchable]
        hub_note = (f"; {', '.join(hub_only)} need{'s' if len(hub_only) == 1 else ''} Hugging "
                    "Face models, see `agentic-iqa tools info TOOL`") if hub_only else ""
        count = "1 tool needs" if len(needy) == 1 else f"{len(needy)} tools need"
        notes.append(f"{count} weights: {command}{hub_note}" if fetchable
                     else f"{count} weights{hub_note}")
    bent = [spec.name for spec, _ in rows if spec.normalization_warnings()]
    if bent:
        notes.append(f"note: the normalization of {', '.join(bent)} is not monotone over part "
                     "of the documented raw range (`agentic-iqa tools info TOOL` says where)")
    return notes


@tools_app.command("run")
def tools_run(
    tool: Annotated[str, typer.Argument(help="tool name, e.g. SSIM, BRISQUE or a pyiqa name")],
    image: Annotated[Path, typer.Argument(help="image to assess")],
    reference: Annotated[
        Path | None, typer.Option("--reference", "-r", help="reference image (FR tools)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="recompute, ignore cache")] = False,
    fallback: Annotated[
        bool, typer.Option("--fallback/--no-fallback",
                           help="if TOOL cannot run, let another NR tool answer (and say so) "
                                "instead of failing")
    ] = False,
    device: DeviceOption = None,
) -> None:
    """Run one tool on an image: raw score, score on the 1-5 scale, time, cache hit.

    A tool that cannot run (missing weights) is an error naming the file and the command that
    fetches it; another tool answers only with --fallback.
    """
    import logging

    from iqa_tools.images import load_image

    registry = _registry(device)
    try:
        spec = registry.get(tool)
        # Decoded and size-checked before any model is built: a thumbnail fails in
        # milliseconds with the size the tool needs, not after every fallback has tried it.
        target = load_image(image)
        target.check_size(spec.name)
        ref = load_image(reference) if reference is not None and spec.is_full_reference \
            else None
        if ref is not None:
            ref.check_size(spec.name)
        # Model code prints progress to stdout; keep stdout for the answer.  A fallback is said
        # once, below, so the registry's own warning about it is not printed too.
        registry_log = logging.getLogger("iqa_tools.registry")
        level = registry_log.level
        registry_log.setLevel(logging.ERROR)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                result = registry.execute_tool(
                    spec.name, target, ref, use_cache=not no_cache, allow_fallback=fallback
                )
        finally:
            registry_log.setLevel(level)
    except StoreUnavailable as exc:  # infrastructure, not the tool: fix the setting
        _fail(str(exc), code=2)
    except ToolError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    direction = "lower is better" if result.lower_is_better else "higher is better"
    out.print(f"[bold]{result.tool}[/] on {image}", highlight=False)
    if result.fallback:
        out.print(f"[yellow]fell back from {result.requested_tool}:[/] "
                  f"{escape(result.error or '')}", highlight=False, soft_wrap=True)
    out.print(f"  raw score        {result.raw_score:.4f} ({direction})", highlight=False)
    out.print(f"  quality (1-5)    {result.normalized_score:.3f}", highlight=False)
    out.print(f"  time             {result.execution_time * 1000:.1f} ms"
              f"{' (cache hit)' if result.cached else ''}", highlight=False)


@tools_app.command("info")
def tools_info(tool: Annotated[str, typer.Argument(help="tool name")],
               as_json: Annotated[bool, typer.Option("--json", help="everything, as JSON")]
               = False) -> None:
    """Everything the metadata says about one tool, and whether it can run here."""
    from iqa_tools import weights as weight_files

    registry = _registry()
    try:
        spec = registry.get(tool)
    except ToolError as exc:
        _fail(str(exc))
    availability = registry.availability(spec.name)
    document = spec.model_dump(mode="json")
    document["availability"] = {
        "status": availability.status,
        "detail": availability.detail,
        "expected_paths": {w.file: str(weight_files.expected_path(w)) for w in spec.weights},
    }
    document["normalization_warnings"] = spec.normalization_warnings()
    if as_json:
        print(json.dumps(document, indent=2))
        return
    lines = [f"{spec.name} ({spec.type}, pyiqa {spec.pyiqa_name}): {spec.description}",
             f"  can run here: {availability.status}"
             + (f" ({availability.detail})" if availability.detail else ""),
             f"  scale: raw {spec.score_range[0]} .. {spec.score_range[1]}, "
             f"{'lower' if spec.lower_is_better else 'higher'} is better; normalized onto "
             f"1-5 ({spec.normalization.form}); computes in {spec.precision}",
             f"  strong on: {', '.join(spec.strengths) or '-'}"]
    lines += [f"  weight {w.file}: {document['availability']['expected_paths'][w.file]}"
              for w in spec.weights]
    lines += [f"  warning: {text}" for text in document["normalization_warnings"]]
    for line in lines:
        out.print(escape(line), highlight=False, soft_wrap=True)


@tools_app.command("install-weights")
def tools_install_weights(
    folder: Annotated[Path, typer.Argument(help="folder holding downloaded weight files")],
) -> None:
    """Copy weight files from FOLDER to where pyiqa loads them (for machines without network)."""
    from iqa_tools import weights as weight_files

    registry = _registry()
    try:
        installed, unknown = weight_files.install_weights(folder, registry.catalog)
    except NotADirectoryError as exc:
        _fail(str(exc))
    for item in installed:
        verb = "copied" if item.copied else "already there"
        out.print(f"{item.file}: {verb} -> {item.destination}", highlight=False)
    for name in unknown:
        err.print(f"[yellow]skipped[/] {name}: no tool needs a file of that name", highlight=False)
    if not installed:
        _fail(f"no known weight file in {folder}")
    out.print(f"{len(installed)} weight file(s) in place.")


@tools_app.command("download")
def tools_download(
    tools: Annotated[list[str] | None, typer.Argument(
        help="tools whose weight files to fetch, e.g. NIQE BRISQUE", metavar="TOOL...",
        show_default=False)] = None,
    paper: Annotated[bool, typer.Option(
        "--paper", help="every tool of the AgenticIQA paper's toolbox (several GB)")] = False,
    directory: Annotated[Path | None, typer.Option(
        "--dir", help="put the files here, flat (default: AGENTIC_IQA_WEIGHTS_DIR when set, "
                      "else where pyiqa, torchvision and CLIP load them)")] = None,
) -> None:
    """Fetch the weight files tools need, from the URLs in the tool metadata.

    Shows each file's licence, resumes partial downloads and checks sha256 hashes.
    Hugging Face models are not fetched: the command that fetches them is printed.
    """
    from iqa_tools import download

    from .config import load_tool_settings

    try:
        settings = load_tool_settings()
        from iqa_tools.catalog import load_catalog

        catalog = load_catalog(settings.metadata_path, settings.metadata_overrides)
        specs = download.select_tools(catalog, tools or [], paper)
        target = directory.expanduser().resolve() if directory is not None \
            else settings.weights_dir
        plan = download.plan(specs, target)
    except (ToolError, ValueError) as exc:
        _fail(str(exc))
    failures = 0
    verified = unverified = 0
    for task in plan.files:
        weight = task.weight
        out.print(f"{weight.file} ({', '.join(task.tools)})", highlight=False, soft_wrap=True,
                  markup=False)
        out.print(f"  licence  {download.licence_of(weight)}", highlight=False, soft_wrap=True,
                  markup=False)
        try:
            with _download_progress(weight.file) as progress:
                fetched = download.ensure(task, progress=progress)
        except ToolError as exc:
            failures += 1
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            continue
        if fetched.verified:
            verified += 1
            check = "sha256 verified"
        else:
            unverified += 1
            check = (f"UNVERIFIED (no sha256 recorded in the tool metadata), "
                     f"sha256 {fetched.sha256}")
        what = {"downloaded": "downloaded", "resumed": "resumed and completed",
                "present": "already there"}[fetched.action]
        if fetched.replaced:
            what += " (replaced a copy whose sha256 did not match)"
        out.print(f"  {what}, {_size(fetched.size)}, {check} -> {fetched.path}",
                  highlight=False, soft_wrap=True, markup=False)
    for model in plan.hub_models:
        out.print(f"not fetched: Hugging Face model {model.repo} ({', '.join(model.tools)}): "
                  f"run `huggingface-cli download {model.repo}` (it goes in the Hugging Face "
                  "cache, HF_HOME)", highlight=False, soft_wrap=True, markup=False)
    placed = len(plan.files) - failures
    out.print(f"{placed} of {len(plan.files)} file(s) in place: {verified} verified, "
              f"{unverified} unverified.", highlight=False, soft_wrap=True)
    if directory is not None and placed and target != settings.weights_dir:
        out.print(f"The tools look in AGENTIC_IQA_WEIGHTS_DIR and pyiqa's cache: set "
                  f"AGENTIC_IQA_WEIGHTS_DIR={target}, or run `agentic-iqa tools install-weights "
                  f"{target}`.", highlight=False, soft_wrap=True, markup=False)
    if failures:
        raise typer.Exit(1)


@contextlib.contextmanager
def _download_progress(label: str):  # noqa: ANN202 - yields the download's progress callback
    """A progress bar on stderr while a file downloads (a terminal only: logs stay clean)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("  {task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=True,
                  disable=not err.is_terminal) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _size(size: int) -> str:
    if size < 1000:
        return f"{size} bytes"
    scaled = size / 1000
    for unit in ("kB", "MB"):
        if scaled < 1000:
            return f"{scaled:.1f} {unit}"
        scaled /= 1000
    return f"{scaled:.1f} GB"


@app.command("assess")
def assess(
    image: Annotated[Path, typer.Argument(help="image to assess")],
    query: Annotated[str, typer.Option("--query", "-q", help="question about the image")] = (
        "Rate the quality of this image."
    ),
    reference: Annotated[
        Path | None, typer.Option("--reference", "-r", help="reference image (full-reference)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the final state as JSON")] = False,
    max_replans: Annotated[
        int | None, typer.Option("--max-replans", min=0, help="bound on replanning rounds "
                                 "(default: max_replan_iterations in configs/pipeline.yaml)")
    ] = None,
    distributed: Annotated[
        bool, typer.Option("--distributed", help="run the steps on Celery workers")
    ] = False,
    store: Annotated[
        bool, typer.Option("--store/--no-store", help="persist the run in the database")
    ] = True,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds to wait for a distributed run")
    ] = 600.0,
    device: DeviceOption = None,
    vlm_cache: Annotated[
        bool, typer.Option("--vlm-cache/--no-vlm-cache",
                           help="answer deterministic VLM requests from the response cache")
    ] = True,
    backend: BackendOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
) -> None:
    """Ask the agent a question about an image: plan, evidence, answer and why.

    A backend that cannot work (a missing key, an endpoint that does not answer, an unknown
    model) exits 2 with one line before anything is stored."""
    from .pipeline import run_inprocess, validate_inputs
    from .report import output_console, render_state, render_vlm_usage, state_document
    from .vlm.usage import PriceTable, collect_calls, group_records, summarize

    for path in (image, reference):
        if path is not None and not path.is_file():
            _fail(f"image not found: {path}")
    image_path = str(image.resolve())
    reference_path = str(reference.resolve()) if reference else None
    try:  # the plan step checks this too; here it costs no stored run and no model
        validate_inputs(image_path, reference_path)
    except ToolError as exc:
        _fail(str(exc))
    roles = use_backend(backend, model, base_url)
    if not vlm_cache:  # clients built in this process get no cache; stored runs say so too
        os.environ["AGENTIC_IQA_VLM_CACHE"] = "false"
    if max_replans is None:
        from .config import PipelineSettings

        max_replans = PipelineSettings.load().max_replan_iterations
    if distributed:
        state, run_id = _assess_distributed(query, image_path, reference_path, max_replans,
                                            timeout, vlm_cache=vlm_cache)
        usage = _run_vlm_usage(_engine(), run_id)
    elif store:
        from . import service

        engine = _engine()
        run_id = service.create_run(engine, query, image_path, reference_path,
                                    max_replan_iterations=max_replans)
        if not vlm_cache:
            _disable_run_vlm_cache(engine, run_id)
        agents = _agents_for(roles, device)
        with contextlib.redirect_stdout(sys.stderr):
            service.run_embedded(engine, agents, run_id)
        state = _stored_state(engine, run_id)
        usage = _run_vlm_usage(engine, run_id)
        err.print(f"run {run_id} stored in {redact(_safe_url(engine))}; `agentic-iqa runs show "
                  f"{run_id[:8]}` shows it again", highlight=False, soft_wrap=True)
    else:
        agents = _agents_for(roles, device)
        with contextlib.redirect_stdout(sys.stderr), collect_calls() as calls:
            state = run_inprocess(query, image_path, reference_path, agents=agents,
                                  max_replan_iterations=max_replans)
        usage = summarize(group_records(calls.records), PriceTable.load())
    if as_json:  # paths, answers and tool errors may quote a URL: the whole document is redacted
        print(redact(json.dumps(state_document(state, vlm_usage=usage), indent=2)))
    else:  # wrapped to a terminal's width; in a pipe or a file, lines stay whole
        console = output_console()
        render_state(state, console)
        render_vlm_usage(usage, console)
    if "summarizer_result" not in state:
        raise typer.Exit(1)


def _agents_for(roles: dict[str, Any], device: str | None) -> Any:
    """The agents of ``assess``: the role configurations with the flags applied."""
    from .pipeline import Agents
    from .vlm import create_client

    return Agents(planner=create_client("planner", roles),
                  executor=create_client("executor", roles),
                  summarizer=create_client("summarizer", roles), registry=_registry(device))


def _disable_run_vlm_cache(engine, run_id: str) -> None:  # noqa: ANN001 - Engine, lazily
    from .db import steps
    from .db.engine import session_scope

    with session_scope(engine) as session:
        steps.set_run_vlm_cache(session, run_id, False)


def _run_vlm_usage(engine, run_id: str) -> dict[str, Any]:  # noqa: ANN001 - Engine, lazily
    """The run's VLM calls, tokens and cost, and per step its calls and cache hits."""
    from .db import reads, steps
    from .db.engine import read_scope
    from .vlm.usage import PriceTable, summarize

    with read_scope(engine) as session:
        usage = summarize(reads.vlm_usage(session, run_id=run_id), PriceTable.load())
        steps = reads.vlm_steps(session, run_id)
    usage["steps"] = {f"{step}#{iteration}": {"calls": calls, "cache_hits": hits}
                      for (step, iteration), (calls, hits) in sorted(
                          steps.items(), key=lambda entry: (entry[0][1], entry[0][0]))}
    return usage


def _engine():  # noqa: ANN202 - sqlalchemy Engine, imported lazily
    from .config import PipelineSettings
    from .db.engine import ensure_schema, make_engine

    engine = make_engine(PipelineSettings.load().database_url)
    ensure_schema(engine)
    return engine


def _safe_url(engine) -> str:  # noqa: ANN001
    return engine.url.render_as_string(hide_password=True)


def _stored_state(engine, run_id: str):  # noqa: ANN001, ANN202 - Engine and state, lazily
    """The run's final state, with the run's error in it when a step gave up.

    A step that fails for good (a VLM server that cannot be reached) records its reason on the
    run row only; without this the state says neither why nor that anything failed.
    """
    from .db import reads
    from .db.engine import read_scope
    from .state import merge_state

    with read_scope(engine) as session:
        run = reads.get_run(session, run_id)
        state = reads.load_state(session, run_id)
        if run.status == "failed" and run.error and not state.get("error"):
            state = merge_state(state, {"error": run.error})
    return state


def _assess_distributed(query: str, image_path: str, reference_path: str | None,
                        max_replans: int, timeout: float, *,
                        vlm_cache: bool = True):  # noqa: ANN202
    import time

    from . import service
    from .config import PipelineSettings

    settings = PipelineSettings.load()
    if not settings.broker_url:
        _fail("--distributed needs a broker: set AGENTIC_IQA_BROKER_URL (e.g. redis://host:6379/0)")
    from workers.tasks import submit

    engine = _engine()
    # Leased: if the message is lost (a broker restart), the workers' supervisor re-sends it.
    run_id = service.create_run(engine, query, image_path, reference_path,
                                max_replan_iterations=max_replans,
                                lease_seconds=settings.lease_seconds)
    if not vlm_cache:  # the workers read it from the run
        _disable_run_vlm_cache(engine, run_id)
    submit(run_id)
    deadline = time.monotonic() + timeout
    with err.status(f"run {run_id}: queued") as status:
        while True:
            from .db import reads
            from .db.engine import read_scope

            with read_scope(engine) as session:
                run = reads.get_run(session, run_id)
                done = run.status in {"succeeded", "failed"}
                current = reads.current_step(session, run_id)
            status.update(f"run {run_id}: {run.status}" + (f", {current}" if current else ""))
            if done:
                break
            if time.monotonic() > deadline:
                _fail(f"run {run_id} did not finish in {timeout:.0f}s (still {run.status}); "
                      "are workers consuming both queues?")
            time.sleep(0.2)
    return _stored_state(engine, run_id), run_id


@app.command("check")
def check(
    backend: BackendOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Try the configured VLM backend of each role with one tiny request: key, endpoint, model,
    whether log-probabilities come back, latency.  Exits 2 when one does not work."""
    from .vlm.preflight import probe

    configs = use_backend(backend, model, base_url, check=False)
    groups: dict[Any, list[str]] = {}
    for role, config in configs.items():
        groups.setdefault(config, []).append(role)
    results = [(roles, probe(roles[0], config)) for config, roles in groups.items()]
    if as_json:
        print(json.dumps([{"roles": roles, **result.__dict__} for roles, result in results],
                         indent=2, default=str))
    else:
        for roles, result in results:
            head = (f"{'/'.join(roles)}: {result.backend}"
                    + (f" {result.model}" if result.model else "") + f" at {result.where}")
            if not result.ok:
                line = f"[red]FAILED[/] {escape(head)}: {escape(result.error or '')}"
            elif result.backend == "builtin":
                line = f"[green]ok[/] {escape(head)} (offline; no request needed)"
            else:
                line = (f"[green]ok[/] {escape(head)}: answered {escape(repr(result.reply))} "
                        f"as {escape(result.answered_model or '?')} in "
                        f"{result.latency_s:.2f} s; log-probabilities: "
                        f"{'yes' if result.logprobs else 'no (scoring asks for stated ones)'}")
            out.print(line, highlight=False, soft_wrap=True)
    if not all(result.ok for _roles, result in results):
        raise typer.Exit(2)


@app.command("worker")
def worker(
    queues: Annotated[str | None, typer.Option(
        "--queues", "-Q", help="comma-separated queues (default: every configured queue)")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 1,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
    pool: Annotated[str, typer.Option(
        "--pool", help="prefork, solo or threads (VLM queue: threads with -c 64)")] = "prefork",
    hostname: Annotated[str | None, typer.Option("--hostname", "-n")] = None,
) -> None:
    """Start a Celery worker (same as `celery -A workers.celery_app:app worker`).

    VLM steps wait on the network: a worker of the VLM queue (``vlm_queue``) holds 64 calls in
    flight with ``--queues vlm --pool threads --concurrency 64``.
    """
    from workers.celery_app import app as celery_app

    if queues is None:
        settings = celery_app.conf.agentic_iqa
        queues = ",".join(dict.fromkeys(
            [settings.default_queue, settings.vlm_steps_queue, settings.tool_queue]))
    argv = ["worker", f"--queues={queues}", f"--concurrency={concurrency}",
            f"--loglevel={loglevel}", f"--pool={pool}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    celery_app.worker_main(argv)


db_app = typer.Typer(help="The results database.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    url: Annotated[str | None, typer.Option("--url", help="database URL (default: config)")] = None,
) -> None:
    """Create or migrate the database schema to the latest version (alembic upgrade head)."""
    from .config import PipelineSettings
    from .db.engine import upgrade

    target = url or PipelineSettings.load().database_url
    upgrade(target)
    out.print("database schema is up to date", highlight=False)


def _register_eval() -> None:
    from .cli_eval import calibrate, eval_app

    app.add_typer(eval_app, name="eval")
    eval_app.command("calibrate")(calibrate)
    # The old name, kept so scripts keep working.
    app.command("calibrate", help="Same as `agentic-iqa eval calibrate`.")(calibrate)


_register_eval()


def _register_runs() -> None:
    from .cli_runs import runs_app

    app.add_typer(runs_app, name="runs")


_register_runs()


def main() -> None:  # pragma: no cover - console entry point
    app()
