"""List, run, show, download and install the IQA tools (``agentic-iqa tools ...``).

The scoring behind ``tools run`` lives in :mod:`.tool_runs`."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from iqa_tools.errors import ToolError

from .common import (
    DeviceOption,
    err,
    fail,
    load_registry,
    out,
    print_unwrapped,
)
from .tool_runs import (
    FORMAT_OF_SUFFIX,
    RUN_FORMATS,
    References,
    parse_tool_names,
    run_many,
    run_one,
    run_tools,
)

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/cli/test_startup.py checks it.
if TYPE_CHECKING:
    pass

tools_app = typer.Typer(
    help="The IQA tools (pyiqa): list, run, download or install weights.", no_args_is_help=True
)


@tools_app.command("list")
def tools_list(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    kind: Annotated[str | None, typer.Option("--type", help="FR or NR only")] = None,
) -> None:
    """List every tool, whether it can run on this machine, and what is missing if not, and
    the largest image one call takes within the memory budget per tool call."""
    from rich.table import Table

    from iqa_tools import memory

    registry = load_registry()
    rows = []
    for spec in registry.catalog:
        if kind and spec.type != kind.upper():
            continue
        availability = registry.availability(spec.name)
        rows.append((spec, availability))
    if as_json:
        print(
            json.dumps(
                [
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
                        "max_pixels": registry.largest_image(spec.name),
                        "memory_model": memory.model_for(spec.pyiqa_name).measured,
                    }
                    for spec, availability in rows
                ],
                indent=2,
            )
        )
        return
    table = Table(title="IQA tools (pyiqa)")
    for column in ("name", "type", "pyiqa", "lower better", "largest image"):
        table.add_column(column, no_wrap=True)
    # File names are what a user copies: on a terminal they fold at the edge, never an ellipsis.
    table.add_column("available here", overflow="fold")
    for spec, availability in rows:
        colour = "green" if availability.ok else "red"
        table.add_row(
            spec.name,
            spec.type,
            spec.pyiqa_name or spec.factory or "",
            "yes" if spec.lower_is_better else "",
            _largest(registry.largest_image(spec.name), memory.model_for(spec.pyiqa_name)),
            f"[{colour}]{escape(availability.summary)}[/]",
        )
    print_unwrapped(table)
    out.print(
        f"Largest image: per tool call within AGENTIC_IQA_TOOL_MEMORY="
        f"{memory.format_bytes(registry.settings.tool_memory)} (* estimated, not "
        "measured: the weights were not there to measure).",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    ready = sum(1 for _, a in rows if a.ok)
    out.print(f"{ready} of {len(rows)} tools can run here.", highlight=False)
    for line in _tools_list_notes(registry.catalog, rows):
        out.print(line, highlight=False, soft_wrap=True, markup=False)


def _largest(pixels: int, model: Any) -> str:
    """Return ``up to 179 MP``; ``up to 2.3 MP*`` for a figure not measured; ``none`` if none
    fits."""
    from iqa_tools import memory

    if pixels <= 0:
        return "none"
    mark = "" if model.measured == "measured" else "*"
    return f"up to {memory.format_pixels(pixels)}{mark}"


def _tools_list_notes(catalog: Any, rows: list[tuple[Any, Any]]) -> list[str]:
    """Return at most one line per kind of note, and only about the tools listed."""
    notes = []
    needy = [spec for spec, availability in rows if availability.missing]
    fetchable = [
        spec.name
        for spec, availability in rows
        if any(w.location != "hf_hub" for w in availability.missing)
    ]
    if needy:
        # --paper when it is exactly what is missing; else the names, so nothing extra is fetched
        paper = {
            spec.name
            for spec in catalog
            if spec.from_paper and any(w.location != "hf_hub" for w in spec.weights)
        }
        command = "agentic-iqa tools download " + (
            "--paper" if set(fetchable) == paper else " ".join(fetchable)
        )
        hub_only = [spec.name for spec in needy if spec.name not in fetchable]
        hub_note = (
            (
                f"; {', '.join(hub_only)} need{'s' if len(hub_only) == 1 else ''} Hugging "
                "Face models, see `agentic-iqa tools info TOOL`"
            )
            if hub_only
            else ""
        )
        count = "1 tool needs" if len(needy) == 1 else f"{len(needy)} tools need"
        notes.append(
            f"{count} weights: {command}{hub_note}" if fetchable else f"{count} weights{hub_note}"
        )
    bent = [spec.name for spec, _ in rows if spec.normalization_warnings()]
    if bent:
        notes.append(
            f"note: the normalization of {', '.join(bent)} is not monotone over part "
            "of the documented raw range (`agentic-iqa tools info TOOL` says where)"
        )
    return notes


@tools_app.command("run")
def tools_run(
    tool: Annotated[
        str,
        typer.Argument(
            help="tool name, e.g. SSIM, BRISQUE or a pyiqa name; several, comma-separated "
            "(BRISQUE,NIQE), score each image together: one row per image, a column per tool",
            metavar="TOOL[,TOOL...]",
        ),
    ],
    paths: Annotated[
        list[str],
        typer.Argument(
            help="images, folders (their images, sorted by name) or quoted glob patterns such as "
            "'photos/*.jpg'",
            metavar="PATH...",
            show_default=False,
        ),
    ],
    reference: Annotated[
        Path | None,
        typer.Option(
            "--reference", "-r", help="reference image (FR tools), the same for every image"
        ),
    ] = None,
    reference_dir: Annotated[
        Path | None,
        typer.Option(
            "--reference-dir",
            help="FR tools: each image's reference is the file of the same name "
            "(the same path below a folder given) in this folder",
        ),
    ] = None,
    recursive: Annotated[
        bool, typer.Option("--recursive", "-R", help="folders: their subfolders' images too")
    ] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="table, csv, json (one list) or jsonl (one object a line); default: "
            "from the extension of -o, else table",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="write the rows to this file; - for standard output (the default)",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="machine-readable output (with several images: --format json)"),
    ] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="recompute, ignore cache")] = False,
    fallback: Annotated[
        bool,
        typer.Option(
            "--fallback/--no-fallback",
            help="if TOOL cannot run, let another NR tool answer (and say so) instead of failing",
        ),
    ] = False,
    device: DeviceOption = None,
) -> None:
    """Run tools on images: raw score, score on the 1-5 scale, time, cache hit.

    One tool on one image file: its scores, or one error line.  Several images, a folder or a
    glob (or --format / -o): one row per image on standard output, progress on stderr; an image
    that cannot be scored is a row with its error, and the exit code is 1 only if none could.

    Several tools (BRISQUE,NIQE; a name given twice counts once): each image is read and
    decoded once and scored by every tool, one row per image with a tool:NAME (1-5) and a
    raw:NAME column per tool, as `eval export` names them; a tool that fails on an image leaves
    its cells empty and says why in the error column.

    A tool that cannot run (missing weights) is an error naming the file and the command that
    fetches it; another tool answers only with --fallback.
    """
    from .image_paths import is_folder, is_pattern

    names = parse_tool_names(tool)
    if len(names) > 1 and fallback:
        fail(
            "--fallback lets another tool answer for one tool that cannot run; with several "
            "tools, name those that run here (`agentic-iqa tools list`)",
            code=2,
        )
    if (
        len(names) == 1
        and len(paths) == 1
        and fmt is None
        and output is None
        and reference_dir is None
        and not is_folder(paths[0])
        and not is_pattern(paths[0])
    ):
        run_one(
            tool,
            paths[0],
            reference,
            as_json=as_json,
            use_cache=not no_cache,
            fallback=fallback,
            device=device,
        )
        return
    if as_json:
        if fmt not in (None, "json"):
            fail(f"--json means --format json: give one of them, not --format {fmt}", code=2)
        fmt = "json"
    if fmt is None:
        suffix = output.suffix.lower() if output is not None and str(output) != "-" else ""
        fmt = FORMAT_OF_SUFFIX.get(suffix, "table")
    if fmt not in RUN_FORMATS:
        fail(f"unknown format {fmt!r}: use {', '.join(RUN_FORMATS)}", code=2)
    if len(names) > 1:
        run_tools(
            names,
            paths,
            References(reference, reference_dir),
            fmt=fmt,
            output=output,
            recursive=recursive,
            use_cache=not no_cache,
            device=device,
        )
        return
    run_many(
        names[0],
        paths,
        References(reference, reference_dir),
        fmt=fmt,
        output=output,
        recursive=recursive,
        use_cache=not no_cache,
        fallback=fallback,
        device=device,
    )


@tools_app.command("info")
def tools_info(
    tool: Annotated[str, typer.Argument(help="tool name")],
    as_json: Annotated[bool, typer.Option("--json", help="everything, as JSON")] = False,
) -> None:
    """Everything the metadata says about one tool, and whether it can run here."""
    from iqa_tools import weights as weight_files

    registry = load_registry()
    try:
        spec = registry.get(tool)
    except ToolError as exc:
        fail(str(exc))
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
    lines = [
        f"{spec.name} ({spec.type}, pyiqa {spec.pyiqa_name}): {spec.description}",
        f"  can run here: {availability.status}"
        + (f" ({availability.detail})" if availability.detail else ""),
        f"  scale: raw {spec.score_range[0]} .. {spec.score_range[1]}, "
        f"{'lower' if spec.lower_is_better else 'higher'} is better; normalized onto "
        f"1-5 ({spec.normalization.form}); computes in {spec.precision}",
        f"  strong on: {', '.join(spec.strengths) or '-'}",
    ]
    lines += [
        f"  weight {w.file}: {document['availability']['expected_paths'][w.file]}"
        for w in spec.weights
    ]
    lines += [f"  warning: {text}" for text in document["normalization_warnings"]]
    for line in lines:
        out.print(escape(line), highlight=False, soft_wrap=True)


@tools_app.command("install-weights")
def tools_install_weights(
    folder: Annotated[Path, typer.Argument(help="folder holding downloaded weight files")],
) -> None:
    """Copy weight files from FOLDER to where pyiqa loads them (for machines without network)."""
    from iqa_tools import weights as weight_files

    registry = load_registry()
    try:
        installed, unknown = weight_files.install_weights(folder, registry.catalog)
    except NotADirectoryError as exc:
        fail(str(exc))
    for item in installed:
        verb = "copied" if item.copied else "already there"
        out.print(f"{item.file}: {verb} -> {item.destination}", highlight=False)
    for name in unknown:
        err.print(f"[yellow]skipped[/] {name}: no tool needs a file of that name", highlight=False)
    if not installed:
        fail(f"no known weight file in {folder}")
    out.print(f"{len(installed)} weight file(s) in place.")


@tools_app.command("download")
def tools_download(
    tools: Annotated[
        list[str] | None,
        typer.Argument(
            help="tools whose weight files to fetch, e.g. NIQE BRISQUE",
            metavar="TOOL...",
            show_default=False,
        ),
    ] = None,
    paper: Annotated[
        bool,
        typer.Option("--paper", help="every tool of the AgenticIQA paper's toolbox (several GB)"),
    ] = False,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="put the files here, flat (default: AGENTIC_IQA_WEIGHTS_DIR when set, "
            "else where pyiqa, torchvision and CLIP load them)",
        ),
    ] = None,
) -> None:
    """Fetch the weight files tools need, from the URLs in the tool metadata.

    Shows each file's licence, resumes partial downloads and checks sha256 hashes.
    Hugging Face models are not fetched: the command that fetches them is printed.
    """
    from iqa_tools import download

    from ..config import load_tool_settings

    try:
        settings = load_tool_settings()
        from iqa_tools.catalog import load_catalog

        catalog = load_catalog(settings.metadata_path, settings.metadata_overrides)
        specs = download.select_tools(catalog, tools or [], paper)
        target = directory.expanduser().resolve() if directory is not None else settings.weights_dir
        plan = download.plan(specs, target)
    except (ToolError, ValueError) as exc:
        fail(str(exc))
    failures = 0
    verified = unverified = 0
    unreachable: list[tuple[str, str]] = []  # (host, file)
    for task in plan.files:
        weight = task.weight
        out.print(
            f"{weight.file} ({', '.join(task.tools)})",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
        out.print(
            f"  licence  {download.licence_of(weight)}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
        try:
            with _download_progress(weight.file) as progress:
                fetched = download.ensure(task, progress=progress)
        except ToolError as exc:
            failures += 1
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            if isinstance(exc, download.UnreachableError):
                unreachable.append((exc.host, weight.file))
            continue
        if fetched.verified:
            verified += 1
            check = "sha256 verified"
        else:
            unverified += 1
            check = f"UNVERIFIED (no sha256 recorded in the tool metadata), sha256 {fetched.sha256}"
        what = {
            "downloaded": "downloaded",
            "resumed": "resumed and completed",
            "present": "already there",
        }[fetched.action]
        if fetched.replaced:
            what += " (replaced a copy whose sha256 did not match)"
        out.print(
            f"  {what}, {_size(fetched.size)}, {check} -> {fetched.path}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    for model in plan.hub_models:
        out.print(
            f"not fetched: Hugging Face model {model.repo} ({', '.join(model.tools)}): "
            f"run `huggingface-cli download {model.repo}` (it goes in the Hugging Face "
            "cache, HF_HOME)",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    placed = len(plan.files) - failures
    out.print(
        f"{placed} of {len(plan.files)} file(s) in place: {verified} verified, "
        f"{unverified} unverified.",
        highlight=False,
        soft_wrap=True,
    )
    if directory is not None and placed and target != settings.weights_dir:
        out.print(
            f"The tools look in AGENTIC_IQA_WEIGHTS_DIR and pyiqa's cache: set "
            f"AGENTIC_IQA_WEIGHTS_DIR={target}, or run `agentic-iqa tools install-weights "
            f"{target}`.",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    if unreachable:
        from .offline_weights import unreachable_hint

        hint = unreachable_hint([h for h, _ in unreachable], [f for _, f in unreachable])
        for line in hint.splitlines():
            err.print(line, highlight=False, soft_wrap=True, markup=False)
    if failures:
        raise typer.Exit(1)


@contextlib.contextmanager
def _download_progress(label: str):  # noqa: ANN202 - yields the download's progress callback
    """Show a progress bar on stderr while a file downloads (a terminal only: logs stay clean)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
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
