"""Select an IQA tool per distortion: the query's tool, the VLM's choice, or the spec's.

A tool the catalogue lacks or the query ruled out is replaced for its distortion only.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from iqa_tools import ToolRegistry

from ...prompts import (
    FR_PREFERENCE_INSTRUCTION,
    TOOL_SELECTION_SYSTEM,
    TOOL_SELECTION_USER,
    render,
)
from ...state import (
    ExecutorOutput,
    PlannerOutput,
)
from ...vlm.base import VLMClient, VLMRequest
from ...vlm.builtin import selection as builtin_selection
from ..jsonreply import ask_json
from .subtasks import add_note, align_to_scope, categories_of, keep_notes, reply_field, scope_suffix

log = logging.getLogger(__name__)


GENERIC_TOOLS = {"NR": "QAlign", "FR": "TOPIQ_FR"}


def tool_descriptions(registry: ToolRegistry, reference_mode: str) -> list[dict[str, Any]]:
    """Return the tools offered for selection: default ones that can run here (FR only with a
    reference).

    Tools marked ``default: false`` stay usable when a query names them.
    """
    tools = []
    for spec in registry.catalog:
        if not spec.default or (spec.is_full_reference and reference_mode != "Full-Reference"):
            continue
        if not registry.availability(spec.name).ok:
            continue
        tools.append(
            {
                "name": spec.name,
                "type": spec.type,
                "description": spec.description,
                "strengths": list(spec.strengths),
                "available": True,
            }
        )
    return tools


def select_tools(
    client: VLMClient,
    registry: ToolRegistry,
    query: str,
    distortion_set: dict[str, list[str]],
    reference_mode: str,
    excluded: Collection[str] = (),
    notes: list[str] | None = None,
) -> dict[str, dict[str, str]] | None:
    """Return the model's tool per (object, distortion), among the offered tools; tools the query
    rules out (``excluded``) are not offered.

    A tool name is read in any catalogue spelling ("brisque", "MS SSIM"); a tool that is
    unknown or not offered here is replaced for its distortion only (the builtin choice among
    the offered tools), and a planned distortion the reply left out gets that choice too, each
    noted.  A reply is asked again only when no tool per distortion can be read in it."""
    tools = [
        tool for tool in tool_descriptions(registry, reference_mode) if tool["name"] not in excluded
    ]
    allowed = {tool["name"] for tool in tools}

    keys = list(distortion_set)
    found: list[str] = []

    def parse(reply: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        found.clear()
        raw = reply_field(reply, "selected_tools")
        if (
            isinstance(raw, Mapping)
            and raw
            and not any(isinstance(value, Mapping) for value in raw.values())
        ):
            raw = {keys[0] if len(keys) == 1 else "Global": raw}  # no object level
        if not isinstance(raw, Mapping):
            raise TypeError("selected_tools must be an object")
        selected: dict[str, dict[str, str]] = {}
        for key, per in align_to_scope(raw, keys, "tool selection", found).items():
            if not isinstance(per, Mapping):
                add_note(
                    found,
                    f"tool selection ({key}): {per!r:.80} is not a tool per distortion; dropped",
                )
                continue
            for distortion, value in per.items():
                category = categories_of(str(distortion), f"tool selection ({key})", found)
                if not category:
                    continue
                named = _tool_name(value, registry)
                name = (
                    named
                    if named is not None and named in allowed
                    else _replacement(key, category[0], value, named, tools, reference_mode, found)
                )
                selected.setdefault(key, {})[category[0]] = name
        if not selected:
            raise ValueError(f"selected_tools has no tool per distortion: {dict(raw)!r:.200}")
        for key, planned in distortion_set.items():
            for distortion in planned:
                if distortion not in selected.get(key, {}):
                    selected.setdefault(key, {})[distortion] = _replacement(
                        key, distortion, None, None, tools, reference_mode, found
                    )
        return ExecutorOutput(selected_tools=selected).selected_tools or {}

    description = "; ".join(
        f"{t['name']} ({t['type']}): {t['description']}"
        + (f" Strong on: {', '.join(t['strengths'])}." if t["strengths"] else "")
        for t in tools
    )
    system = render(
        TOOL_SELECTION_SYSTEM, distortion_set=distortion_set, tool_description=description
    )
    if reference_mode == "Full-Reference":
        system += FR_PREFERENCE_INSTRUCTION
    request = VLMRequest(
        task="tool_selection",
        system=system,
        user=render(TOOL_SELECTION_USER, query=query),
        context={
            "query": query,
            "distortion_set": distortion_set,
            "tools": tools,
            "reference_mode": reference_mode,
        },
    )
    outcome = ask_json(client, request, parse, stricter=scope_suffix(keys))
    keep_notes(notes, "tool selection", outcome, found)
    selected = outcome.value
    if selected is None or reference_mode != "Full-Reference":
        return selected
    return prefer_full_reference(selected, tools)


def _tool_name(value: Any, registry: ToolRegistry) -> str | None:
    """Return the catalogue's name of the tool ``value`` names (any spelling, "the NIQE metric", a
    one-tool list or ``{"tool": ...}``), or None."""
    if isinstance(value, list | tuple) and value:
        value = value[0]
    if isinstance(value, Mapping):
        value = next((value[k] for k in ("tool", "name", "tool_name") if k in value), None)
    if not isinstance(value, str) or not value.strip():
        return None
    from ...query import catalogue_tool

    return catalogue_tool(value, registry.catalog)  # "CLIP-IQA+" is not CLIP-IQA: None


def _replacement(
    key: str,
    distortion: str,
    value: Any,
    name: str | None,
    tools: list[dict[str, Any]],
    reference_mode: str,
    notes: list[str],
) -> str:
    """Return the tool for one (object, distortion) the model gave no usable tool for: the builtin
    choice among the offered tools, else the spec's generic tool; noted."""
    best = builtin_selection.select({key: [distortion]}, tools, reference_mode).get(key, {})
    tool = (
        best.get(distortion) or GENERIC_TOOLS["FR" if reference_mode == "Full-Reference" else "NR"]
    )
    if value is None:
        why = "no tool given"
    elif name is None:
        why = f"{value!r:.60} is no tool of the catalogue"
    else:
        why = f"{name} is not offered here"
    add_note(notes, f"tool selection ({key}/{distortion}): {why}; using {tool}")
    return tool


def prefer_full_reference(
    selected: dict[str, dict[str, str]], tools: list[dict[str, Any]]
) -> dict[str, dict[str, str]]:
    """Replace each NR choice with the best offered FR tool for its distortion.

    The spec's rule (FR tools over NR when a reference exists; NR only when no FR tool suits)
    holds whatever the model chose; the replacement is the builtin backend's choice among the
    offered FR tools, by metadata strengths then preference order.
    """
    kinds = {tool["name"]: tool["type"] for tool in tools}
    full_reference = [tool for tool in tools if tool["type"] == "FR"]
    if not full_reference:
        return selected
    result: dict[str, dict[str, str]] = {}
    for key, per_distortion in selected.items():
        result[key] = dict(per_distortion)
        for distortion, tool in per_distortion.items():
            if kinds.get(tool) == "FR":
                continue
            best = builtin_selection.select({key: [distortion]}, full_reference, "Full-Reference")[
                key
            ][distortion]
            log.info(
                "tool selection: the model chose NR tool %s for %s/%s although a "
                "reference is given; using FR tool %s",
                tool,
                key,
                distortion,
                best,
            )
            result[key][distortion] = best
    return result


def generic_selection(
    distortion_set: dict[str, list[str]], reference_mode: str
) -> dict[str, dict[str, str]]:
    """Return the spec's generic tool (QAlign for NR, TOPIQ_FR for FR) for every distortion."""
    tool = GENERIC_TOOLS["FR" if reference_mode == "Full-Reference" else "NR"]
    return {key: {d: tool for d in distortions} for key, distortions in distortion_set.items()}


def selection_for(
    plan: PlannerOutput,
    distortion_set: dict[str, list[str]],
    selected: dict[str, dict[str, str]] | None,
) -> dict[str, dict[str, str]]:
    """Return the tools to run: the plan's required tool, the selection, or the spec's generic."""
    if plan.required_tool:
        return {
            key: {d: plan.required_tool for d in values} for key, values in distortion_set.items()
        }
    return without_excluded(
        selected or generic_selection(distortion_set, plan.reference_mode), plan.excluded_tools
    )


def without_excluded(
    selected: dict[str, dict[str, str]], excluded: Collection[str]
) -> dict[str, dict[str, str]]:
    """Return ``selected`` with each tool the query ruled out replaced by the first tool of the same
    kind (FR or NR) in the builtin preference order that it did not rule out."""
    if not excluded:
        return selected
    result: dict[str, dict[str, str]] = {}
    for key, per_distortion in selected.items():
        result[key] = {}
        for distortion, tool in per_distortion.items():
            if tool in excluded:
                order = (
                    builtin_selection.FR_PREFERENCE
                    if tool in builtin_selection.FR_PREFERENCE
                    else builtin_selection.NR_PREFERENCE
                )
                replacement = next((name for name in order if name not in excluded), tool)
                log.info(
                    "tool %s for %s/%s is ruled out by the query; using %s",
                    tool,
                    key,
                    distortion,
                    replacement,
                )
                tool = replacement
            result[key][distortion] = tool
    return result
