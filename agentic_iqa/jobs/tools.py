"""The tools of a metric job (``eval submit --tools``), checked before anything is stored.

A metric job runs the named tools on every image, without the agent: per-image raw and
normalized scores, resumable, in the same database.  Its tools are checked at submit, so a typo
or a tool that cannot run never leaves a job of failed items behind: an unknown name, a tool
whose weights or packages are missing here, and a full-reference tool on a manifest row without
a reference are each refused with a message that says what to do.  Only the tool metadata and
the weight files are read: checking never imports torch or pyiqa.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from iqa_tools import weights as weight_files
from iqa_tools.catalog import Catalog, load_catalog
from iqa_tools.errors import UnknownToolError
from iqa_tools.settings import ToolSettings

from .manifest import ManifestEntry, ManifestItem


class MetricToolsError(ValueError):
    """The tools of a metric job cannot run as asked; the message says which and why."""


def parse_tools(text: str) -> list[str]:
    """``"BRISQUE, niqe,"`` -> ``["BRISQUE", "niqe"]``: names as given, blanks dropped."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise MetricToolsError("--tools names no tool: give e.g. --tools BRISQUE,NIQE")
    return names


def metric_query(tools: Sequence[str]) -> str:
    """A metric job's default query: what its runs were asked to do, for the runs table."""
    return "metrics: " + ",".join(tools)


def _settings_and_catalog(settings: ToolSettings | None) -> tuple[ToolSettings, Catalog]:
    if settings is None:
        from ..config import load_tool_settings

        settings = load_tool_settings()
    return settings, load_catalog(settings.metadata_path, settings.metadata_overrides)


def check_tools(names: Sequence[str], settings: ToolSettings | None = None) -> list[str]:
    """The canonical names of ``names`` (order kept, repeats dropped), or a
    :class:`MetricToolsError` listing every unknown tool and every tool that cannot run here."""
    settings, catalog = _settings_and_catalog(settings)
    canonical: list[str] = []
    problems: list[str] = []
    for name in names:
        try:
            spec = catalog.get(name)
        except UnknownToolError:
            hint = catalog.did_you_mean(name)
            problems.append(f"unknown tool {name!r}" + (f" ({hint})" if hint else ""))
            continue
        availability = weight_files.check(spec, settings.weights_dir, settings.allow_downloads)
        if not availability.ok:
            problems.append(
                f"{spec.name} cannot run here ({availability.summary}); see "
                "`agentic-iqa tools list` and AGENTIC_IQA_WEIGHTS_DIR"
            )
        elif spec.name not in canonical:
            canonical.append(spec.name)
    if problems:
        raise MetricToolsError("; ".join(problems) + f". Known tools: {', '.join(catalog.tools)}")
    return canonical


def full_reference(tools: Sequence[str], settings: ToolSettings | None = None) -> list[str]:
    """The full-reference tools among ``tools`` (they need a reference on every item)."""
    _settings, catalog = _settings_and_catalog(settings)
    return [name for name in tools if catalog.get(name).is_full_reference]


def not_only_questions(entries: Iterable[ManifestEntry]) -> Iterator[ManifestEntry]:
    """``entries`` of a metric job, unchanged; at their end a :class:`MetricToolsError` when
    every good row is a multiple-choice question (it has options): tools give scores, not
    answers, so such a job could never answer one of them.  Raised before the submit commits,
    so nothing is stored; a manifest with some questions is accepted (the report says their
    accuracy is not applicable)."""
    items = questions = 0
    first: ManifestItem | None = None
    for entry in entries:
        if isinstance(entry, ManifestItem):
            items += 1
            if entry.options:
                questions += 1
                first = first or entry
        yield entry
    if first is not None and questions == items:
        stem = (first.query or "").split("\n")[0]
        raise MetricToolsError(
            f"--mode tools gives scores, not answers: all {items} items are multiple-choice "
            f"questions (line {first.line}: {stem!r}), and no tool can answer one; run them "
            "with --mode agent or --mode vlm"
        )
