"""Score images with tools from the command line (``agentic-iqa tools run``): one image, many, or
many with several tools, as a table, CSV, JSON or JSONL rows."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.markup import escape

from iqa_tools.errors import StoreUnavailable, ToolError

from .common import (
    SafeConsole,
    err,
    fail,
    load_registry,
    out,
    print_unwrapped,
)

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/cli/test_startup.py checks it.
if TYPE_CHECKING:
    from iqa_tools import ToolRegistry


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


FORMAT_OF_SUFFIX = {".csv": "csv", ".json": "json", ".jsonl": "jsonl"}


#: Columns of a row of several tools: the image, then per tool its ``tool:NAME`` (the 1-5
#: score) and ``raw:NAME`` columns as ``eval export`` names them, then these.
WIDE_COLUMNS = ("seconds", "cached", "error")


def parse_tool_names(argument: str) -> list[str]:
    """Return the tools TOOL[,TOOL...] names, in order, each once (exit 2 when it names none)."""
    names = [name.strip() for name in argument.split(",") if name.strip()]
    if not names:
        fail(
            f"no tool named in {argument!r}: give one, e.g. BRISQUE, or several, e.g. BRISQUE,NIQE",
            code=2,
        )
    return list(dict.fromkeys(names))


def run_one(
    tool: str,
    image: str,
    reference: Path | None,
    *,
    as_json: bool,
    use_cache: bool,
    fallback: bool,
    device: str | None,
) -> None:
    """Score one image: its scores in a few lines (or one JSON object), or one error line."""
    from iqa_tools.images import read_image

    registry = load_registry(device)
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
        fail(str(exc), code=2)
    except ToolError as exc:
        fail(str(exc))
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


class References:
    """Where an FR tool's reference for each image is: one file, or a folder of namesakes."""

    def __init__(self, file: Path | None, folder: Path | None) -> None:
        if file is not None and folder is not None:
            fail(
                "give --reference (one reference for every image) or --reference-dir (one "
                "per image, by file name), not both",
                code=2,
            )
        if file is not None and file.is_dir():
            fail(
                f"--reference {file} is a folder: --reference-dir {file} pairs each image "
                "with the reference of the same name there",
                code=2,
            )
        if folder is not None and not folder.is_dir():
            fail(f"--reference-dir {folder} is not a folder", code=2)
        self.file, self.folder = file, folder

    @property
    def given(self) -> bool:
        return self.file is not None or self.folder is not None

    def for_image(self, name: str) -> tuple[Path | None, str | None]:
        """Return the reference of the image named ``name``, or why it has none."""
        if self.folder is None:
            return self.file, None
        path = self.folder / name
        if path.is_file():
            return path, None
        return path, (
            f"no reference {str(path)!r} for this image (--reference-dir pairs "
            "images with references by file name)"
        )


def run_many(
    tool: str,
    paths: list[str],
    references: References,
    *,
    fmt: str,
    output: Path | None,
    recursive: bool,
    use_cache: bool,
    fallback: bool,
    device: str | None,
) -> None:
    """Score every image the paths name, one row each, with the tool's model loaded once."""
    from ..reports.export import ExportFormat, write_rows
    from .image_paths import NothingToScore, expand

    registry = load_registry(device)
    try:
        spec = registry.get(tool)
    except ToolError as exc:
        fail(str(exc))
    if spec.is_full_reference and not references.given:
        fail(
            f"{spec.name} is a full-reference tool: give --reference REF (one for every "
            "image) or --reference-dir DIR (each image's reference by the same file name)",
            code=2,
        )
    if spec.is_full_reference and references.file is not None and not references.file.is_file():
        fail(f"--reference {references.file}: file not found", code=2)
    availability = registry.availability(spec.name)
    if not availability.ok and not fallback:  # said once, not once per image
        fail(f"{spec.name} cannot run here: {availability.detail}")
    try:
        images = expand(paths, recursive=recursive)
    except NothingToScore as exc:
        fail(str(exc), code=2)
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
        fail(f"cannot write {output}: {exc.strerror or exc}", code=2)
    if not to_stdout:
        err.print(f"wrote {count} rows to {output}", highlight=False, soft_wrap=True, markup=False)
    if len(failures) == count:
        fail(f"no image could be scored: {count} failed (the error column says why)")
    if failures:
        err.print(
            f"[yellow]warning:[/] {len(failures)} of {count} images could not be scored "
            "(the error column says why)",
            highlight=False,
        )


def run_tools(
    names: list[str],
    paths: list[str],
    references: References,
    *,
    fmt: str,
    output: Path | None,
    recursive: bool,
    use_cache: bool,
    device: str | None,
) -> None:
    """Score every image the paths name with every tool: one row each, a column per tool, each
    image read and decoded once for all of them, each tool's model loaded once."""
    from ..reports.export import raw_column, tool_column, write_rows
    from .image_paths import NothingToScore, expand

    registry = load_registry(device)
    try:
        specs = list({spec.name: spec for spec in map(registry.get, names)}.values())
    except ToolError as exc:
        fail(str(exc))
    needing = [spec.name for spec in specs if spec.is_full_reference]
    if needing and not references.given:
        kind = "is a full-reference tool" if len(needing) == 1 else "are full-reference tools"
        fail(
            f"{', '.join(needing)} {kind}: give --reference REF (one for every image) or "
            "--reference-dir DIR (each image's reference by the same file name)",
            code=2,
        )
    if needing and references.file is not None and not references.file.is_file():
        fail(f"--reference {references.file}: file not found", code=2)
    for spec in specs:  # said once, not once per image
        availability = registry.availability(spec.name)
        if not availability.ok:
            fail(f"{spec.name} cannot run here: {availability.detail}")
    try:
        images = expand(paths, recursive=recursive)
    except NothingToScore as exc:
        fail(str(exc), code=2)
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
        fail(f"no image could be scored: {count} failed (the error column says why)")
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
    """Write rows streamed (csv, jsonl) or whole (table, json) to stdout or ``output``; return
    how many."""
    target = "-" if to_stdout else str(output)
    try:
        if fmt in ("csv", "jsonl"):
            count = write_rows(rows, target, fmt, columns)  # as each is scored
        else:
            collected = list(rows)
            count = len(collected)
            _write_whole(collected, output if not to_stdout else None, fmt)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}", code=2)
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
    """Return one image's row of several tools: read and decoded once, then scored by each (a
    full-reference tool against its reference, ``missing`` saying why it has none); a tool
    that cannot score it leaves its cells empty and says why in ``error``."""
    import time

    from iqa_tools.images import read_image
    from iqa_tools.storage import display

    from ..redact import redact
    from ..reports.export import raw_column, tool_column

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
        fail(str(exc), code=2)
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
            fail(str(exc), code=2)
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
    """Return one image's row (its error instead of scores if it cannot be scored, or ``error`` if
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
        fail(str(exc), code=2)
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
    """Return a progress bar on stderr while images are scored: on a terminal only, and not while
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
    """Write a table or one JSON list, on standard output (``path`` None) or into a file."""
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
        print_unwrapped(table)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        print_unwrapped(table, SafeConsole(file=handle))


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
    """Return rows of several tools: a raw and a 1-5 column per tool."""
    from rich.table import Table
    from rich.text import Text

    from ..reports.export import RAW_PREFIX, raw_column, tool_column

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
