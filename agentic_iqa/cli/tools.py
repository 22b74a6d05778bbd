"""``agentic-iqa tools ...``: list the IQA tools, run one, show one, fetch or install weights."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.markup import escape

from iqa_tools.errors import StoreUnavailable, ToolError

from .common import (
    DeviceOption,
    SafeConsole,
    _fail,
    _registry,
    err,
    out,
)

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/test_cli_startup.py checks it.
if TYPE_CHECKING:
    from iqa_tools import ToolRegistry

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

    registry = _registry()
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
    _print_unwrapped(table)
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
    """``up to 179 MP``; ``up to 2.3 MP*`` for a figure not measured; ``none`` if none fits."""
    from iqa_tools import memory

    if pixels <= 0:
        return "none"
    mark = "" if model.measured == "measured" else "*"
    return f"up to {memory.format_pixels(pixels)}{mark}"


def _print_unwrapped(renderable: Any, console: Console = out) -> None:
    """On a terminal, fit the screen; into a pipe or file, print at full width (no cuts)."""
    if console.is_terminal:
        console.print(renderable)
        return
    from rich.measure import Measurement

    wide = SafeConsole(file=console.file, width=100_000)
    width = Measurement.get(wide, wide.options, renderable).maximum
    SafeConsole(file=console.file, width=max(width, 20)).print(renderable)


def _tools_list_notes(catalog: Any, rows: list[tuple[Any, Any]]) -> list[str]:
    """At most one line per kind of note, and only about the tools listed."""
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


#: The columns of ``tools run``'s rows, in order: the CSV header and the JSON keys.
RUN_COLUMNS = (
    "image",
    "reference",
    "tool",
    "raw_score",
    "normalized_score",
    "lower_is_better",
    "cached",
    "seconds",
    "fallback_from",
    "error",
)
RUN_FORMATS = ("table", "csv", "json", "jsonl")
_FORMAT_OF_SUFFIX = {".csv": "csv", ".json": "json", ".jsonl": "jsonl"}


#: Columns of a row of several tools: the image, then per tool its ``tool:NAME`` (the 1-5
#: score) and ``raw:NAME`` columns as ``eval export`` names them, then these.
WIDE_COLUMNS = ("seconds", "cached", "error")


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

    names = _tool_names(tool)
    if len(names) > 1 and fallback:
        _fail(
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
        _run_one(
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
            _fail(f"--json means --format json: give one of them, not --format {fmt}", code=2)
        fmt = "json"
    if fmt is None:
        suffix = output.suffix.lower() if output is not None and str(output) != "-" else ""
        fmt = _FORMAT_OF_SUFFIX.get(suffix, "table")
    if fmt not in RUN_FORMATS:
        _fail(f"unknown format {fmt!r}: use {', '.join(RUN_FORMATS)}", code=2)
    if len(names) > 1:
        _run_tools(
            names,
            paths,
            _References(reference, reference_dir),
            fmt=fmt,
            output=output,
            recursive=recursive,
            use_cache=not no_cache,
            device=device,
        )
        return
    _run_many(
        names[0],
        paths,
        _References(reference, reference_dir),
        fmt=fmt,
        output=output,
        recursive=recursive,
        use_cache=not no_cache,
        fallback=fallback,
        device=device,
    )


def _tool_names(argument: str) -> list[str]:
    """The tools TOOL[,TOOL...] names, in order, each once (exit 2 when it names none)."""
    names = [name.strip() for name in argument.split(",") if name.strip()]
    if not names:
        _fail(
            f"no tool named in {argument!r}: give one, e.g. BRISQUE, or several, e.g. BRISQUE,NIQE",
            code=2,
        )
    return list(dict.fromkeys(names))


def _run_one(
    tool: str,
    image: str,
    reference: Path | None,
    *,
    as_json: bool,
    use_cache: bool,
    fallback: bool,
    device: str | None,
) -> None:
    """One image: its scores in a few lines (or one JSON object), or one error line."""
    from iqa_tools.images import read_image

    registry = _registry(device)
    try:
        spec = registry.get(tool)
        # The memory budget from the header, then decoded and size-checked before any model
        # is built: a thumbnail fails in milliseconds with the size the tool needs, and a photo
        # too large for the tool before a pixel is decoded.
        target = read_image(image)
        registry.check_memory(spec.name, target)
        target.check_size(spec.name)
        ref = read_image(reference) if reference is not None and spec.is_full_reference else None
        if ref is not None:
            ref.check_size(spec.name)
        with _quiet_registry():
            result = registry.execute_tool(
                spec.name, target, ref, use_cache=use_cache, allow_fallback=fallback
            )
    except StoreUnavailable as exc:  # infrastructure, not the tool: fix the setting
        _fail(str(exc), code=2)
    except ToolError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    direction = "lower is better" if result.lower_is_better else "higher is better"
    out.print(f"[bold]{result.tool}[/] on {escape(image)}", highlight=False, soft_wrap=True)
    if result.fallback:
        out.print(
            f"[yellow]fell back from {result.requested_tool}:[/] {escape(result.error or '')}",
            highlight=False,
            soft_wrap=True,
        )
    out.print(f"  raw score        {result.raw_score:.4f} ({direction})", highlight=False)
    out.print(f"  quality (1-5)    {result.normalized_score:.3f}", highlight=False)
    out.print(
        f"  time             {result.execution_time * 1000:.1f} ms"
        f"{' (cache hit)' if result.cached else ''}",
        highlight=False,
    )


@contextlib.contextmanager
def _quiet_registry():  # noqa: ANN202 - a plain context manager
    """Model code prints progress to stdout, which holds the answer: it goes to stderr.  A
    fallback is said once by the command, so the registry's own warning about it is not."""
    import logging

    registry_log = logging.getLogger("iqa_tools.registry")
    level = registry_log.level
    registry_log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        registry_log.setLevel(level)


class _References:
    """Where an FR tool's reference for each image is: one file, or a folder of namesakes."""

    def __init__(self, file: Path | None, folder: Path | None) -> None:
        if file is not None and folder is not None:
            _fail(
                "give --reference (one reference for every image) or --reference-dir (one "
                "per image, by file name), not both",
                code=2,
            )
        if file is not None and file.is_dir():
            _fail(
                f"--reference {file} is a folder: --reference-dir {file} pairs each image "
                "with the reference of the same name there",
                code=2,
            )
        if folder is not None and not folder.is_dir():
            _fail(f"--reference-dir {folder} is not a folder", code=2)
        self.file, self.folder = file, folder

    @property
    def given(self) -> bool:
        return self.file is not None or self.folder is not None

    def for_image(self, name: str) -> tuple[Path | None, str | None]:
        """The reference of the image named ``name``, or why it has none."""
        if self.folder is None:
            return self.file, None
        path = self.folder / name
        if path.is_file():
            return path, None
        return path, (
            f"no reference {str(path)!r} for this image (--reference-dir pairs "
            "images with references by file name)"
        )


def _run_many(
    tool: str,
    paths: list[str],
    references: _References,
    *,
    fmt: str,
    output: Path | None,
    recursive: bool,
    use_cache: bool,
    fallback: bool,
    device: str | None,
) -> None:
    """Every image the paths name, one row each, with the tool's model loaded once."""
    from ..jobs.export import ExportFormat, write_rows
    from .image_paths import NothingToScore, expand

    registry = _registry(device)
    try:
        spec = registry.get(tool)
    except ToolError as exc:
        _fail(str(exc))
    if spec.is_full_reference and not references.given:
        _fail(
            f"{spec.name} is a full-reference tool: give --reference REF (one for every "
            "image) or --reference-dir DIR (each image's reference by the same file name)",
            code=2,
        )
    if spec.is_full_reference and references.file is not None and not references.file.is_file():
        _fail(f"--reference {references.file}: file not found", code=2)
    availability = registry.availability(spec.name)
    if not availability.ok and not fallback:  # said once, not once per image
        _fail(f"{spec.name} cannot run here: {availability.detail}")
    try:
        images = expand(paths, recursive=recursive)
    except NothingToScore as exc:
        _fail(str(exc), code=2)
    to_stdout = output is None or str(output) == "-"
    failures: list[str] = []
    fell_back: set[str] = set()

    def rows() -> Iterator[dict[str, Any]]:
        streamed = to_stdout and fmt in ("csv", "jsonl")
        with _scoring_progress(quiet=streamed and out.is_terminal) as bar, _quiet_registry():
            for image in bar.track(images, description=spec.name):
                reference, missing = (
                    references.for_image(image.name) if spec.is_full_reference else (None, None)
                )
                row, reason = _score_row(
                    registry,
                    spec.name,
                    image.location,
                    reference,
                    use_cache=use_cache,
                    fallback=fallback,
                    error=missing,
                )
                if row["error"] is not None:
                    failures.append(image.location)
                if reason is not None and reason not in fell_back:
                    fell_back.add(reason)
                    err.print(
                        f"[yellow]fell back from {row['fallback_from']} to {row['tool']}:"
                        f"[/] {escape(reason)}",
                        highlight=False,
                        soft_wrap=True,
                    )
                yield row

    target = "-" if to_stdout else str(output)
    try:
        if fmt in ("csv", "jsonl"):
            streaming = cast(ExportFormat, fmt)
            count = write_rows(rows(), target, streaming, list(RUN_COLUMNS))  # as each is scored
        else:
            collected = list(rows())
            count = len(collected)
            _write_whole(collected, output if not to_stdout else None, fmt)
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}", code=2)
    if not to_stdout:
        err.print(f"wrote {count} rows to {output}", highlight=False, soft_wrap=True, markup=False)
    if len(failures) == count:
        _fail(f"no image could be scored: {count} failed (the error column says why)")
    if failures:
        err.print(
            f"[yellow]warning:[/] {len(failures)} of {count} images could not be scored "
            "(the error column says why)",
            highlight=False,
        )


def _run_tools(
    names: list[str],
    paths: list[str],
    references: _References,
    *,
    fmt: str,
    output: Path | None,
    recursive: bool,
    use_cache: bool,
    device: str | None,
) -> None:
    """Every image the paths name scored by every tool: one row each, a column per tool, each
    image read and decoded once for all of them, each tool's model loaded once."""
    from ..jobs.export import raw_column, tool_column, write_rows
    from .image_paths import NothingToScore, expand

    registry = _registry(device)
    try:
        specs = list({spec.name: spec for spec in map(registry.get, names)}.values())
    except ToolError as exc:
        _fail(str(exc))
    needing = [spec.name for spec in specs if spec.is_full_reference]
    if needing and not references.given:
        kind = "is a full-reference tool" if len(needing) == 1 else "are full-reference tools"
        _fail(
            f"{', '.join(needing)} {kind}: give --reference REF (one for every image) or "
            "--reference-dir DIR (each image's reference by the same file name)",
            code=2,
        )
    if needing and references.file is not None and not references.file.is_file():
        _fail(f"--reference {references.file}: file not found", code=2)
    for spec in specs:  # said once, not once per image
        availability = registry.availability(spec.name)
        if not availability.ok:
            _fail(f"{spec.name} cannot run here: {availability.detail}")
    try:
        images = expand(paths, recursive=recursive)
    except NothingToScore as exc:
        _fail(str(exc), code=2)
    tools = [spec.name for spec in specs]
    columns = [
        "image",
        "reference",
        *(column for name in tools for column in (tool_column(name), raw_column(name))),
        *WIDE_COLUMNS,
    ]
    to_stdout = output is None or str(output) == "-"
    unscored: list[str] = []
    partial: list[str] = []

    def rows() -> Iterator[dict[str, Any]]:
        streamed = to_stdout and fmt in ("csv", "jsonl")
        with _scoring_progress(quiet=streamed and out.is_terminal) as bar, _quiet_registry():
            for image in bar.track(images, description="+".join(tools)):
                reference, missing = references.for_image(image.name) if needing else (None, None)
                row = _score_wide(
                    registry, specs, image.location, reference, use_cache=use_cache, missing=missing
                )
                scored = sum(row[raw_column(name)] is not None for name in tools)
                if not scored:
                    unscored.append(image.location)
                elif scored < len(tools):
                    partial.append(image.location)
                yield row

    count = _write_rows(rows(), columns, fmt, output, to_stdout, write_rows)
    if len(unscored) == count:
        _fail(f"no image could be scored: {count} failed (the error column says why)")
    if unscored or partial:
        err.print(
            f"[yellow]warning:[/] {len(unscored)} of {count} images could not be scored "
            f"by any tool, {len(partial)} by only some (the error column says why)",
            highlight=False,
        )


def _write_rows(
    rows: Iterator[dict[str, Any]],
    columns: list[str],
    fmt: str,
    output: Path | None,
    to_stdout: bool,
    write_rows: Any,
) -> int:
    """Rows streamed (csv, jsonl) or whole (table, json), to stdout or ``output``; how many."""
    target = "-" if to_stdout else str(output)
    try:
        if fmt in ("csv", "jsonl"):
            count = write_rows(rows, target, fmt, columns)  # as each is scored
        else:
            collected = list(rows)
            count = len(collected)
            _write_whole(collected, output if not to_stdout else None, fmt)
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}", code=2)
    if not to_stdout:
        err.print(f"wrote {count} rows to {output}", highlight=False, soft_wrap=True, markup=False)
    return count


def _score_wide(
    registry: ToolRegistry,
    specs: list[Any],
    image: str,
    reference: Path | None,
    *,
    use_cache: bool,
    missing: str | None,
) -> dict[str, Any]:
    """One image's row of several tools: read and decoded once, then scored by each (a
    full-reference tool against its reference, ``missing`` saying why it has none); a tool
    that cannot score it leaves its cells empty and says why in ``error``."""
    import time

    from iqa_tools.images import read_image
    from iqa_tools.storage import display

    from ..jobs.export import raw_column, tool_column
    from ..redact import redact

    started = time.perf_counter()
    row: dict[str, Any] = {
        "image": display(image),
        "reference": str(reference) if reference is not None else None,
    }
    for spec in specs:
        row[tool_column(spec.name)] = row[raw_column(spec.name)] = None
    errors: list[str] = []
    cached: list[bool] = []
    try:
        target = read_image(image)
        ref = read_image(reference) if reference is not None and missing is None else None
    except StoreUnavailable as exc:
        _fail(str(exc), code=2)
    except ToolError as exc:  # the file itself: no tool can score it
        row.update(seconds=None, cached=None, error=redact(str(exc)))
        return row
    for spec in specs:
        if spec.is_full_reference and ref is None:
            errors.append(f"{spec.name}: {missing or 'no reference'}")
            continue
        try:
            registry.check_memory(spec.name, target)
            target.check_size(spec.name)
            if ref is not None and spec.is_full_reference:
                ref.check_size(spec.name)
            result = registry.execute_tool(
                spec.name,
                target,
                ref if spec.is_full_reference else None,
                use_cache=use_cache,
                allow_fallback=False,
            )
        except StoreUnavailable as exc:  # infrastructure: every other image would fail alike
            _fail(str(exc), code=2)
        except ToolError as exc:
            errors.append(f"{spec.name}: {redact(str(exc))}")
            continue
        row[tool_column(spec.name)] = result.normalized_score
        row[raw_column(spec.name)] = result.raw_score
        cached.append(result.cached)
    row.update(
        seconds=round(time.perf_counter() - started, 6),
        cached=all(cached) if cached else None,
        error="; ".join(errors) or None,
    )
    return row


def _score_row(
    registry: ToolRegistry,
    tool: str,
    image: str,
    reference: Path | None,
    *,
    use_cache: bool,
    fallback: bool,
    error: str | None = None,
) -> tuple[dict[str, Any], str | None]:
    """One image's row (its error instead of scores if it cannot be scored, or ``error`` if
    known beforehand), and the reason another tool answered, if one did."""
    from iqa_tools.images import read_image
    from iqa_tools.storage import display

    from ..redact import redact

    row: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    row.update(
        image=display(image), tool=tool, reference=str(reference) if reference is not None else None
    )
    if error is not None:
        row["error"] = error
        return row, None
    try:
        target = read_image(image)
        registry.check_memory(tool, target)
        target.check_size(tool)
        ref = read_image(reference) if reference is not None else None
        if ref is not None:
            ref.check_size(tool)
        result = registry.execute_tool(
            tool, target, ref, use_cache=use_cache, allow_fallback=fallback
        )
    except StoreUnavailable as exc:  # infrastructure: every other image would fail alike
        _fail(str(exc), code=2)
    except ToolError as exc:
        row["error"] = redact(str(exc))
        return row, None
    row.update(
        tool=result.tool,
        raw_score=result.raw_score,
        normalized_score=result.normalized_score,
        lower_is_better=result.lower_is_better,
        cached=result.cached,
        seconds=round(result.execution_time, 6),
        fallback_from=result.requested_tool if result.fallback else None,
    )
    return row, (redact(result.error) if result.fallback else None)


def _scoring_progress(*, quiet: bool) -> Any:
    """A progress bar on stderr while images are scored: on a terminal only, and not while
    rows stream onto the same terminal (they are the progress, and the bar would erase them)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
        disable=quiet or not err.is_terminal,
        redirect_stdout=False,
        redirect_stderr=False,
    )


def _write_whole(rows: list[dict[str, Any]], path: Path | None, fmt: str) -> None:
    """A table or one JSON list, on standard output (``path`` None) or into a file."""
    if fmt == "json":
        text = json.dumps(rows, indent=2, allow_nan=False)
        if path is None:
            print(text)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
        return
    table = _rows_table(rows) if not rows or "tool" in rows[0] else _wide_table(rows)
    if path is None:
        _print_unwrapped(table)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        _print_unwrapped(table, SafeConsole(file=handle))


def _rows_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    with_reference = any(row["reference"] for row in rows)
    table = Table()
    table.add_column("image", overflow="fold")
    if with_reference:
        table.add_column("reference", overflow="fold")
    for column in ("tool", "raw score", "quality (1-5)", "time"):
        table.add_column(column, no_wrap=True, justify="left" if column == "tool" else "right")
    table.add_column("error", overflow="fold")
    for row in rows:
        scored = row["error"] is None
        tool = row["tool"] + (f" (for {row['fallback_from']})" if row["fallback_from"] else "")
        cells = [Text(row["image"])] + ([Text(row["reference"] or "")] if with_reference else [])
        cells += [
            Text(tool),
            Text(f"{row['raw_score']:.4f}" if scored else ""),
            Text(f"{row['normalized_score']:.3f}" if scored else ""),
            Text(
                (f"{row['seconds'] * 1000:.1f} ms" + (" (cached)" if row["cached"] else ""))
                if scored
                else ""
            ),
            Text(row["error"] or "", style="red"),
        ]
        table.add_row(*cells)
    return table


def _wide_table(rows: list[dict[str, Any]]) -> Any:
    """Rows of several tools: a raw and a 1-5 column per tool."""
    from rich.table import Table
    from rich.text import Text

    from ..jobs.export import RAW_PREFIX, raw_column, tool_column

    tools = [key[len(RAW_PREFIX) :] for key in rows[0] if key.startswith(RAW_PREFIX)]
    with_reference = any(row["reference"] for row in rows)
    table = Table()
    table.add_column("image", overflow="fold")
    if with_reference:
        table.add_column("reference", overflow="fold")
    for name in tools:
        table.add_column(f"{name} raw", no_wrap=True, justify="right")
        table.add_column(f"{name} (1-5)", no_wrap=True, justify="right")
    table.add_column("time", no_wrap=True, justify="right")
    table.add_column("error", overflow="fold")
    for row in rows:
        cells = [Text(row["image"])] + ([Text(row["reference"] or "")] if with_reference else [])
        for name in tools:
            raw, score = row[raw_column(name)], row[tool_column(name)]
            cells += [
                Text("" if raw is None else f"{raw:.4f}"),
                Text("" if score is None else f"{score:.3f}"),
            ]
        seconds = row["seconds"]
        cells += [
            Text(
                ""
                if seconds is None
                else f"{seconds * 1000:.1f} ms" + (" (cached)" if row["cached"] else "")
            ),
            Text(row["error"] or "", style="red"),
        ]
        table.add_row(*cells)
    return table


@tools_app.command("info")
def tools_info(
    tool: Annotated[str, typer.Argument(help="tool name")],
    as_json: Annotated[bool, typer.Option("--json", help="everything, as JSON")] = False,
) -> None:
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
        _fail(str(exc))
    failures = 0
    verified = unverified = 0
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
