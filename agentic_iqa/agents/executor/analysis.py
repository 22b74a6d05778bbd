"""Detect the distortions to look at and analyse their severity, by asking the VLM.

Each keeps what is usable in a reply (evidence, not gates) and notes what it dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from iqa_tools import DISTORTION_CATEGORIES

from ...prompts import (
    DISTORTION_ANALYSIS_SYSTEM,
    DISTORTION_ANALYSIS_USER,
    DISTORTION_DETECTION_SYSTEM,
    DISTORTION_DETECTION_USER,
    render,
)
from ...state import (
    DistortionAnalysis,
    ExecutorOutput,
    PlannerOutput,
)
from ...vlm.base import VLMClient, VLMRequest
from ..jsonreply import ask_json
from .subtasks import (
    add_note,
    align_to_scope,
    categories_of,
    keep_notes,
    located_images,
    looks_like_item,
    per_object,
    reply_field,
    scope_keys,
    scope_suffix,
)


def detect_distortions(
    client: VLMClient,
    query: str,
    image_path: str,
    reference_path: str | None,
    plan: PlannerOutput,
    notes: list[str] | None = None,
) -> dict[str, list[str]] | None:
    """Return the distortions to look at per object.  Categories off the valid list are mapped to
    one (synonyms) or dropped, objects put on the scope; what was dropped goes to ``notes``. A
    reply is asked again only when it names distortions and none is a category."""
    keys = scope_keys(plan)
    found: list[str] = []

    def parse(reply: Mapping[str, Any]) -> dict[str, list[str]]:
        found.clear()
        raw = per_object(reply_field(reply, "distortion_set"), keys)
        if not isinstance(raw, Mapping):
            raise TypeError("distortion_set must be an object")
        aligned = align_to_scope(raw, keys, "distortion detection", found)
        result = {
            key: categories_of(values, f"distortion detection ({key})", found)
            for key, values in aligned.items()
        }
        named = any(values for values in aligned.values())
        if named and not any(result.values()):
            raise ValueError(f"distortion_set names no valid category: {dict(aligned)!r:.200}")
        kept = {key: values for key, values in result.items() if values or not named}
        return ExecutorOutput(distortion_set=kept).distortion_set or {}

    request = VLMRequest(
        task="distortion_detection",
        system=DISTORTION_DETECTION_SYSTEM,
        user=render(DISTORTION_DETECTION_USER, query=query),
        images=located_images(image_path, reference_path),
        context={"query": query, "image_path": image_path, "query_scope": plan.query_scope},
    )
    outcome = ask_json(client, request, parse, stricter=scope_suffix(keys))
    keep_notes(notes, "distortion detection", outcome, found)
    return outcome.value


def analyse_distortions(
    client: VLMClient,
    query: str,
    image_path: str,
    reference_path: str | None,
    distortion_set: dict[str, list[str]],
    notes: list[str] | None = None,
) -> dict[str, list[DistortionAnalysis]] | None:
    """Severity and explanation per distortion and object.  Items of the planned types are
    kept; a type not asked for is kept as extra evidence, a planned type left out, an item
    that cannot be read and an object off the scope are noted.  A reply is asked again only
    when it has no readable item at all."""
    keys = list(distortion_set)
    found: list[str] = []

    def parse(reply: Mapping[str, Any]) -> dict[str, list[DistortionAnalysis]]:
        found.clear()
        raw = per_object(reply_field(reply, "distortion_analysis"), keys)
        if not isinstance(raw, Mapping):
            raise TypeError("distortion_analysis must be an object")
        result: dict[str, list[DistortionAnalysis]] = {}
        for key, items in align_to_scope(raw, keys, "distortion analysis", found).items():
            entries = _analysis_items(items, f"distortion analysis ({key})", found)
            planned = distortion_set.get(key, ())
            extra = [entry.type for entry in entries if planned and entry.type not in planned]
            if extra:
                add_note(
                    found,
                    f"distortion analysis ({key}): {', '.join(extra)} analysed too, "
                    "not asked for; kept as extra evidence",
                )
            if entries:
                result[key] = entries
        if not result:
            raise ValueError(f"distortion_analysis has no readable item: {dict(raw)!r:.200}")
        for key, planned in distortion_set.items():
            done = {entry.type for entry in result.get(key, ())}
            left_out = [kind for kind in planned if kind not in done]
            if left_out:
                add_note(found, f"distortion analysis ({key}): {', '.join(left_out)} not analysed")
        return result

    request = VLMRequest(
        task="distortion_analysis",
        system=render(DISTORTION_ANALYSIS_SYSTEM, distortion_set=distortion_set),
        user=render(DISTORTION_ANALYSIS_USER, query=query),
        images=located_images(image_path, reference_path),
        context={"query": query, "image_path": image_path, "distortion_set": distortion_set},
    )
    outcome = ask_json(client, request, parse, stricter=scope_suffix(keys))
    keep_notes(notes, "distortion analysis", outcome, found)
    return outcome.value


def _analysis_items(items: Any, what: str, notes: list[str]) -> list[DistortionAnalysis]:
    """Return the readable items of one object's analysis, one per type (the first); the others are
    noted.  ``{"Blurs": {"severity": ..., "explanation": ...}}`` is read as items too."""
    if isinstance(items, Mapping):
        items = (
            [items]
            if looks_like_item(items)
            else [
                {"type": kind, **value} if isinstance(value, Mapping) else {"type": kind}
                for kind, value in items.items()
            ]
        )
    if not isinstance(items, list | tuple):
        add_note(notes, f"{what}: {items!r:.80} is not a list of analysis items; dropped")
        return []
    entries: list[DistortionAnalysis] = []
    for item in items:
        try:
            entry = DistortionAnalysis.model_validate(item)
        except ValidationError as invalid:
            problem = "; ".join(str(error["msg"]) for error in invalid.errors())
            add_note(notes, f"{what}: item {item!r:.80} unreadable ({problem:.120}); dropped")
            continue
        if all(entry.type != other.type for other in entries):
            entries.append(entry)
    return entries


def distortion_set_for(
    plan: PlannerOutput, detected: dict[str, list[str]] | None
) -> dict[str, list[str]]:
    """Return what analysis and selection work on: the distortions the query named (the plan's, put
    on the plan's scope: "Global" for the one object in scope is that object), with any detected
    ones added; else every category."""
    aligned = align_to_scope(plan.distortions or {}, scope_keys(plan), "plan distortions")
    named = {key: list(dict.fromkeys(values)) for key, values in aligned.items()}
    if detected:
        merged = {key: list(values) for key, values in named.items()}
        for key, values in detected.items():
            merged.setdefault(key, [])
            merged[key] += [value for value in values if value not in merged[key]]
        return merged
    if named:
        return named
    return {key: list(DISTORTION_CATEGORIES) for key in scope_keys(plan)}
