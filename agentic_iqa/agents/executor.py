"""The Executor: four subtasks gated by the plan's flags, each allowed to fail on its own.

Detection, analysis and selection ask the VLM with the specification's prompt templates;
execution runs the selected tools through :mod:`iqa_tools` and logs every call, labelled with
what it scored: tools cannot locate an object, so for objects they score the whole image
("Global"), and a region named by position is scored on its crop (:func:`tool_calls`).  Each
subtask keeps what is usable in a reply (evidence, not gates: issue 29) and notes what it
dropped or replaced; a reply is asked again only when nothing in it is usable.  A subtask that
fails (no usable reply after three attempts, an exception) leaves its field ``None`` and the
next subtask works with what there is; only tool selection has a defined fallback (the generic
tools of the spec: QAlign for NR, TOPIQ_FR for FR), and tool failures fall back inside the
registry.

No tool stands in silently: a call whose tool another replaced (a failure, an FR tool without a
reference) logs the tool asked for and why it did not run, and so does a call of the agent's own
choice that a tool of the fallback chain would have made, had that tool been installed here
(:class:`Preference`: without BRISQUE's parameter file the example is measured with PIQE, and
its log names BRISQUE, the missing file and the command that fetches it).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from iqa_tools import DISTORTION_CATEGORIES, ToolError, ToolRegistry, UnknownToolError
from iqa_tools.images import LoadedImage, crop_image, read_image

from ..prompts import (
    DISTORTION_ANALYSIS_SYSTEM,
    DISTORTION_ANALYSIS_USER,
    DISTORTION_DETECTION_SYSTEM,
    DISTORTION_DETECTION_USER,
    FR_PREFERENCE_INSTRUCTION,
    STRICT_JSON_SUFFIX,
    TOOL_SELECTION_SYSTEM,
    TOOL_SELECTION_USER,
    render,
)
from ..query import Region, region_of
from ..state import (
    CANNOT_RUN,
    DistortionAnalysis,
    ExecutorOutput,
    PlannerOutput,
    ToolExecutionLog,
)
from ..vlm.base import FatalVLMError, TransientVLMError, VLMClient, VLMError, VLMRequest
from ..vlm.builtin import selection as builtin_selection
from ..vocabulary import canonical_distortion
from .jsonreply import Outcome, ask_json

log = logging.getLogger(__name__)

GENERIC_TOOLS = {"NR": "QAlign", "FR": "TOPIQ_FR"}


def scope_keys(plan: PlannerOutput) -> list[str]:
    return list(plan.query_scope) if isinstance(plan.query_scope, list) else ["Global"]


def _images(image_path: str, reference_path: str | None) -> tuple[str, ...]:
    """The images as located (a path, or an object's URL: ``Path`` would mangle ``s3://``)."""
    return tuple(p for p in (image_path, reference_path) if p)


def run_subtask(name: str, call: Any) -> Any:
    """Run one subtask; an exception is logged and becomes ``None`` (the spec's rule).

    A transient error is raised for the step's retries (when they run out, the subtask becomes
    ``None`` all the same: :func:`agentic_iqa.pipeline.abandoned`), and a fatal one (a bad key,
    an unknown model) to stop the run and its job: going on would only fail the same way.
    """
    try:
        return call()
    except (TransientVLMError, FatalVLMError):
        raise
    except VLMError as exc:
        log.error("%s failed: VLM error: %s", name, exc)
    except Exception:  # a subtask must never fail the executor node
        log.exception("%s failed", name)
    return None


# -- the four subtasks ------------------------------------------------------------------------

#: Object names that mean the whole image.
WHOLE_IMAGE = frozenset(
    {
        "global",
        "whole image",
        "entire image",
        "image",
        "full image",
        "overall",
        "whole",
        "entire frame",
        "frame",
    }
)


def _fold(name: Any) -> str:
    return re.sub(r"^(?:the|a|an)\s+", "", str(name).strip().casefold())


def _put(aligned: dict[str, Any], key: str, value: Any) -> None:
    """``value`` under ``key``, merged with what is there (lists joined, mappings updated)."""
    old = aligned.get(key)
    if isinstance(old, list) and isinstance(value, list):
        aligned[key] = [*old, *value]
    elif isinstance(old, dict) and isinstance(value, dict):
        aligned[key] = {**old, **value}
    else:
        aligned[key] = value


def align_to_scope(
    raw: Mapping[str, Any], keys: list[str], what: str, notes: list[str] | None = None
) -> dict[str, Any]:
    """A reply's per-object mapping with its object names put on the plan's scope ``keys``.

    A name of the scope (any case, with or without "the") is that object; with the whole image
    in scope everything is the whole image; with one object in scope any other name (or
    "Global") is that object.  With several objects in scope, what the reply says of the whole
    image ("Global") is said of each of them (what it says of an object itself comes first),
    and a name that is none of them is dropped with a note, so one stray object does not void
    the others; when no name can be placed at all, the reply is read as being about the whole
    image (the spec's fallback to Global), with a note.
    """
    keys = keys or ["Global"]
    by_fold = {_fold(key): key for key in keys}
    aligned: dict[str, Any] = {}
    whole: dict[str, Any] = {}
    unplaced: dict[str, Any] = {}
    for name, value in raw.items():
        key = by_fold.get(_fold(name))
        if key is None and len(keys) == 1:
            key = keys[0]
        elif key is None and _fold(name) in WHOLE_IMAGE:
            _put(whole, "Global", value)
            continue
        elif key is None:
            unplaced[str(name)] = value
            continue
        _put(aligned, key, value)
    if unplaced:
        names = ", ".join(repr(name) for name in unplaced)
        scope = ", ".join(keys)
        if aligned or whole:
            _note(notes, f"{what}: {names} is none of the objects in scope ({scope}); dropped")
        else:
            _note(
                notes,
                f"{what}: {names} is none of the objects in scope ({scope}); read as "
                "the whole image (Global)",
            )
            for value in unplaced.values():
                _put(whole, "Global", value)
    if "Global" in whole:
        said = whole["Global"]
        for key in keys:
            own = aligned.get(key)
            if isinstance(own, list) and isinstance(said, list):
                aligned[key] = [*own, *said]
            elif isinstance(own, dict) and isinstance(said, dict):
                aligned[key] = {**said, **own}
            elif own is None:
                aligned[key] = (
                    list(said)
                    if isinstance(said, list)
                    else (dict(said) if isinstance(said, dict) else said)
                )
    return aligned


def _per_object(raw: Any, keys: list[str]) -> Any:
    """``raw`` as ``{object: ...}``: a reply that gave no object names (a bare list of
    distortions or analysis items) is about the whole image, or the one object in scope."""
    if isinstance(raw, str | list | tuple):
        return {keys[0] if len(keys) == 1 else "Global": raw}
    if isinstance(raw, Mapping) and _looks_like_item(raw):
        return {keys[0] if len(keys) == 1 else "Global": [raw]}
    return raw


def _looks_like_item(value: Mapping[str, Any]) -> bool:
    return any(_fold(key) in {"type", "severity", "distortion", "distortion_type"} for key in value)


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None and text not in notes:
        notes.append(text)


def _keep_notes(
    notes: list[str] | None, what: str, outcome: Outcome[Any], found: list[str]
) -> None:
    """Log and keep the notes of the reply that was used, or why none was."""
    if outcome.value is None:
        found = [
            f"{what}: no usable reply after {outcome.attempts} attempts"
            + (f" ({outcome.errors[-1]})" if outcome.errors else "")
        ]
    for text in found:
        log.warning("%s", text)
        _note(notes, text)


def _categories(values: Any, what: str, notes: list[str]) -> list[str]:
    """Distortion names as categories (synonyms mapped); names of no category dropped, noted."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list | tuple):
        _note(notes, f"{what}: {values!r} is not a list of distortions; dropped")
        return []
    kept: list[str] = []
    for value in values:
        try:
            category = canonical_distortion(value) if isinstance(value, str) else None
        except ValueError:
            category = None
        if category is None:
            _note(
                notes,
                f"{what}: {value!r} is no distortion category "
                f"({', '.join(DISTORTION_CATEGORIES)}); dropped",
            )
        elif category not in kept:
            kept.append(category)
    return kept


def _scope_suffix(keys: list[str]) -> str:
    return (
        STRICT_JSON_SUFFIX
        + " Use exactly these object keys: "
        + ", ".join(json.dumps(key) for key in keys)
        + "."
    )


def detect_distortions(
    client: VLMClient,
    query: str,
    image_path: str,
    reference_path: str | None,
    plan: PlannerOutput,
    notes: list[str] | None = None,
) -> dict[str, list[str]] | None:
    """The distortions to look at per object.  Categories off the valid list are mapped to
    one (synonyms) or dropped, objects put on the scope; what was dropped goes to ``notes``.
    A reply is asked again only when it names distortions and none is a category."""
    keys = scope_keys(plan)
    found: list[str] = []

    def parse(reply: Mapping[str, Any]) -> dict[str, list[str]]:
        found.clear()
        raw = _per_object(_field(reply, "distortion_set"), keys)
        if not isinstance(raw, Mapping):
            raise TypeError("distortion_set must be an object")
        aligned = align_to_scope(raw, keys, "distortion detection", found)
        result = {
            key: _categories(values, f"distortion detection ({key})", found)
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
        images=_images(image_path, reference_path),
        context={"query": query, "image_path": image_path, "query_scope": plan.query_scope},
    )
    outcome = ask_json(client, request, parse, stricter=_scope_suffix(keys))
    _keep_notes(notes, "distortion detection", outcome, found)
    return outcome.value


def _field(reply: Mapping[str, Any], name: str) -> Any:
    """``reply[name]``, also under another spelling of the key ("distortionSet",
    "Distortion Set"); ``KeyError`` when absent, and the question is asked again."""
    wanted = re.sub(r"[^a-z0-9]", "", name)
    for key, value in reply.items():
        if re.sub(r"[^a-z0-9]", "", str(key).casefold()) == wanted:
            return value
    raise KeyError(name)


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
        raw = _per_object(_field(reply, "distortion_analysis"), keys)
        if not isinstance(raw, Mapping):
            raise TypeError("distortion_analysis must be an object")
        result: dict[str, list[DistortionAnalysis]] = {}
        for key, items in align_to_scope(raw, keys, "distortion analysis", found).items():
            entries = _analysis_items(items, f"distortion analysis ({key})", found)
            planned = distortion_set.get(key, ())
            extra = [entry.type for entry in entries if planned and entry.type not in planned]
            if extra:
                _note(
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
                _note(found, f"distortion analysis ({key}): {', '.join(left_out)} not analysed")
        return result

    request = VLMRequest(
        task="distortion_analysis",
        system=render(DISTORTION_ANALYSIS_SYSTEM, distortion_set=distortion_set),
        user=render(DISTORTION_ANALYSIS_USER, query=query),
        images=_images(image_path, reference_path),
        context={"query": query, "image_path": image_path, "distortion_set": distortion_set},
    )
    outcome = ask_json(client, request, parse, stricter=_scope_suffix(keys))
    _keep_notes(notes, "distortion analysis", outcome, found)
    return outcome.value


def _analysis_items(items: Any, what: str, notes: list[str]) -> list[DistortionAnalysis]:
    """The readable items of one object's analysis, one per type (the first); the others are
    noted.  ``{"Blurs": {"severity": ..., "explanation": ...}}`` is read as items too."""
    if isinstance(items, Mapping):
        items = (
            [items]
            if _looks_like_item(items)
            else [
                {"type": kind, **value} if isinstance(value, Mapping) else {"type": kind}
                for kind, value in items.items()
            ]
        )
    if not isinstance(items, list | tuple):
        _note(notes, f"{what}: {items!r:.80} is not a list of analysis items; dropped")
        return []
    entries: list[DistortionAnalysis] = []
    for item in items:
        try:
            entry = DistortionAnalysis.model_validate(item)
        except ValidationError as invalid:
            problem = "; ".join(str(error["msg"]) for error in invalid.errors())
            _note(notes, f"{what}: item {item!r:.80} unreadable ({problem:.120}); dropped")
            continue
        if all(entry.type != other.type for other in entries):
            entries.append(entry)
    return entries


def tool_descriptions(registry: ToolRegistry, reference_mode: str) -> list[dict[str, Any]]:
    """The tools offered for selection: default ones that can run here (FR only with a reference).

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
    """The model's tool per (object, distortion), among the offered tools; tools the query
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
        raw = _field(reply, "selected_tools")
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
                _note(
                    found,
                    f"tool selection ({key}): {per!r:.80} is not a tool per distortion; dropped",
                )
                continue
            for distortion, value in per.items():
                category = _categories(str(distortion), f"tool selection ({key})", found)
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
    outcome = ask_json(client, request, parse, stricter=_scope_suffix(keys))
    _keep_notes(notes, "tool selection", outcome, found)
    selected = outcome.value
    if selected is None or reference_mode != "Full-Reference":
        return selected
    return prefer_full_reference(selected, tools)


def _tool_name(value: Any, registry: ToolRegistry) -> str | None:
    """The catalogue's name of the tool ``value`` names (any spelling, "the NIQE metric", a
    one-tool list or ``{"tool": ...}``), or None."""
    if isinstance(value, list | tuple) and value:
        value = value[0]
    if isinstance(value, Mapping):
        value = next((value[k] for k in ("tool", "name", "tool_name") if k in value), None)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return registry.catalog.resolve(value.strip())
    except UnknownToolError:
        from ..query import tool_in

        return tool_in(value, [spec.name for spec in registry.catalog])


def _replacement(
    key: str,
    distortion: str,
    value: Any,
    name: str | None,
    tools: list[dict[str, Any]],
    reference_mode: str,
    notes: list[str],
) -> str:
    """The tool for one (object, distortion) the model gave no usable tool for: the builtin
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
    _note(notes, f"tool selection ({key}/{distortion}): {why}; using {tool}")
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
    tool = GENERIC_TOOLS["FR" if reference_mode == "Full-Reference" else "NR"]
    return {key: {d: tool for d in distortions} for key, distortions in distortion_set.items()}


@dataclass(frozen=True)
class ToolCall:
    """One tool run as it will be logged: what it scores and for which objects in scope.

    ``key`` is where the score is filed: "Global" (the whole image) or a region's scope key,
    scored on the crop ``region``.  Tools cannot locate an object, so a call for objects
    scores the whole image, once per distortion, and names them in ``requested_for``."""

    key: str
    distortion: str
    tool: str
    region: Region | None = None
    requested_for: tuple[str, ...] = ()


def tool_calls(
    selected: Mapping[str, Mapping[str, str]], query: str = "", notes: list[str] | None = None
) -> list[ToolCall]:
    """The calls that give ``selected`` (a tool per object and distortion) its evidence.

    A region the query names by position ("the left half": :func:`~agentic_iqa.query.region_of`)
    is a known box, scored on its crop.  "Global" and every object are the whole image: one call
    per distortion, its score the whole image's, never copied to each object as if it were
    theirs.  Objects whose selections differ for one distortion get the first one (noted): the
    others would score the same whole image."""
    calls: list[ToolCall] = []
    whole: dict[str, ToolCall] = {}
    for key, per_distortion in selected.items():
        region = None if key == "Global" else region_of(key, query)
        for distortion, tool in per_distortion.items():
            if region is not None:
                calls.append(ToolCall(key, distortion, tool, region))
                continue
            objects = () if key == "Global" else (key,)
            first = whole.get(distortion)
            if first is None:
                whole[distortion] = ToolCall("Global", distortion, tool, None, objects)
                continue
            if tool != first.tool:
                _note(
                    notes,
                    f"tool execution ({key}/{distortion}): {tool} not run; tools "
                    f"score the whole image, and {first.tool} already scores it for "
                    f"{distortion}",
                )
            whole[distortion] = replace(
                first, requested_for=tuple(dict.fromkeys((*first.requested_for, *objects)))
            )
    return [*whole.values(), *calls]


def call_images(
    call: ToolCall, image: LoadedImage, reference: LoadedImage | None
) -> tuple[LoadedImage, LoadedImage | None]:
    """What ``call`` scores: the whole image (and reference), or both cropped to its region."""
    if call.region is None:
        return image, reference
    box, name = call.region.box, call.region.name
    return (
        crop_image(image, box, name),
        crop_image(reference, box, name) if reference is not None else None,
    )


def whole_image_note(objects: Sequence[str]) -> str:
    """What the summarizer and the user are told when a whole-image score is all there is for
    objects: the score is not theirs, so they are judged from the image itself."""
    names = objects[0] if len(objects) == 1 else f"{', '.join(objects[:-1])} and {objects[-1]}"
    return (
        f"tool execution: the tool scores are the whole image's (Global); tools cannot "
        f"locate objects, so no tool measured {names} on "
        f"{'its' if len(objects) == 1 else 'their'} own: judge {names} from the image itself"
    )


def not_installed(registry: ToolRegistry, name: str) -> str | None:
    """Why tool ``name`` cannot run here, in words a person can act on: the files it lacks and
    the command that fetches them, the Python packages or Hugging Face models it needs; None
    when it can run."""
    spec = registry.get(name)
    availability = registry.availability(spec.name)
    if availability.ok:
        return None
    parts: list[str] = []
    files = [w for w in availability.missing if w.location != "hf_hub"]
    if files:
        many = len(files) > 1
        kind = "parameter file" if spec.weight_kwarg else "weight file"
        them = "them" if many else "it"
        where = (
            f" into {availability.weights_dir}"
            if availability.weights_dir is not None
            else f", or set AGENTIC_IQA_WEIGHTS_DIR to a folder holding {them}"
        )
        parts.append(
            f"its {kind}{'s' if many else ''} {' and '.join(w.file for w in files)} "
            f"{'are' if many else 'is'} not installed: `agentic-iqa tools download "
            f"{spec.name}` fetches {them}{where}"
        )
    models = [w.file for w in availability.missing if w.location == "hf_hub"]
    if models:
        parts.append(
            f"it needs the Hugging Face model{'s' if len(models) > 1 else ''} "
            f"{' and '.join(models)} (`huggingface-cli download` where there is "
            "network, then copy the hub cache folder)"
        )
    if availability.missing_packages:
        packages = " ".join(availability.missing_packages)
        parts.append(f"it needs the Python package(s) {packages} (`pip install {packages}`)")
    return "; ".join(parts) or availability.detail


def cannot_run(name: str, why: str) -> str:
    """A log's ``error`` for a tool that is not installed: the registry's own wording
    (:data:`agentic_iqa.state.CANNOT_RUN`), so both read alike."""
    return f"{name}{CANNOT_RUN}{why}"


class Preference:
    """Which tool the agent's own choice would have been, had the fallback chain's tools been
    installed here.

    Selection is offered only the tools that can run here, so without BRISQUE's parameter file
    the builtin choice for blur (and any NR distortion no offered tool is strong on) is PIQE,
    and a model cannot choose BRISQUE either.  The tools of the registry's fallback chain
    (default BRISQUE, then NIQE) are the ones a run counts on: for a call of the agent's own
    choice, the builtin choice among the offered tools *and* the chain's missing ones says which
    tool was wanted; when that one is missing, the tool that ran stood in for it.  Tools the
    query ruled out are never wanted; FR calls are not compared (the chain is no-reference).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        excluded: Collection[str] = (),
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.excluded = set(excluded)
        #: Chain tools the selection could not offer (:func:`unavailable_chain_tools` where it
        #: ran, another worker perhaps), and why: missing whether or not they can run here.
        self.unavailable = dict(unavailable or {})
        self._pool: tuple[list[dict[str, Any]], set[str]] | None = None

    def _candidates(self) -> tuple[list[dict[str, Any]], set[str]]:
        """(the offered NR tools plus the chain's missing ones, the names of the missing)."""
        if self._pool is None:
            offered = [
                tool
                for tool in tool_descriptions(self.registry, "No-Reference")
                if tool["type"] == "NR"
                and tool["name"] not in self.excluded
                and tool["name"] not in self.unavailable
            ]
            missing: list[dict[str, Any]] = []
            for name in self.registry.settings.fallback_chain:
                spec = self.registry.get(name)
                if (
                    spec.type != "NR"
                    or spec.name in self.excluded
                    or any(tool["name"] == spec.name for tool in (*offered, *missing))
                    or (
                        self.registry.availability(spec.name).ok
                        and spec.name not in self.unavailable
                    )
                ):
                    continue
                missing.append(
                    {
                        "name": spec.name,
                        "type": spec.type,
                        "description": spec.description,
                        "strengths": list(spec.strengths),
                        "available": True,
                    }
                )
            self._pool = (offered + missing, {tool["name"] for tool in missing})
        return self._pool

    def wanted(self, tool: str, distortion: str) -> str | None:
        """The missing chain tool that ``tool`` stood in for on ``distortion``, or None."""
        if self.registry.get(tool).is_full_reference:
            return None
        pool, missing = self._candidates()
        if not missing:
            return None
        best = (
            builtin_selection.select({"Global": [distortion]}, pool, "No-Reference")
            .get("Global", {})
            .get(distortion)
        )
        return best if best in missing and best != tool else None


def _chain_gap(registry: ToolRegistry, failed: str, used: str) -> str | None:
    """The fallback chain's tool that would have replaced ``failed``, when the fallback skipped
    it for not being installed: ``used`` is then not the one the chain names, and says why."""
    try:
        failed = registry.get(failed).name
        first = next(
            (
                spec.name
                for spec in map(registry.get, registry.settings.fallback_chain)
                if spec.type == "NR" and spec.name != failed
            ),
            None,
        )
        why = not_installed(registry, first) if first not in (None, used) else None
    except Exception:  # the fallback's score stands; only the remark about it is lost
        log.exception("could not tell which fallback-chain tool %s was used before", used)
        return None
    if first is None or why is None:
        return None
    return f"{first}, which the fallback chain puts before {used}, cannot run here: {why}"


def unavailable_chain_tools(
    registry: ToolRegistry, excluded: Collection[str] = ()
) -> dict[str, str]:
    """The fallback chain's NR tools that cannot be offered to selection here, and why
    (:func:`not_installed`): kept with the selection, so that the step running the tools,
    on another worker perhaps, says what a tool chosen in their place stood in for."""
    missing: dict[str, str] = {}
    for name in registry.settings.fallback_chain:
        spec = registry.get(name)
        if spec.type != "NR" or spec.name in excluded:
            continue
        why = not_installed(registry, spec.name)
        if why is not None:
            missing[spec.name] = why
    return missing


#: How a stand-in's reason ends when its tool could run where the tools ran but not where
#: they were chosen (another worker): what to do about it.
CHOSEN_ELSEWHERE = (
    " (on the worker that chose the tools; the worker that ran them has it: "
    "install it on every worker)"
)


def _standing_in(
    registry: ToolRegistry, preference: Preference, tool: str, distortion: str
) -> tuple[str | None, str | None]:
    """(the tool ``tool`` stood in for, why that one cannot run), or Nones.  Saying so never
    costs the score: a problem working it out is logged and the call stands as it ran."""
    try:
        wanted = preference.wanted(tool, distortion)
        if wanted is None:
            return None, None
        here = not_installed(registry, wanted)
        if here is None and wanted in preference.unavailable:
            return wanted, preference.unavailable[wanted] + CHOSEN_ELSEWHERE
        return wanted, here
    except Exception:  # the score is there; only the remark about it is lost
        log.exception("could not tell which tool %s stood in for on %s", tool, distortion)
        return None, None


def execute_tools(
    registry: ToolRegistry,
    image: LoadedImage,
    reference: LoadedImage | None,
    selected: dict[str, dict[str, str]],
    query: str = "",
    notes: list[str] | None = None,
    *,
    own_choice: bool = True,
    excluded: Collection[str] = (),
    unavailable: Mapping[str, str] | None = None,
) -> tuple[dict[str, dict[str, tuple[str, float]]], list[ToolExecutionLog]]:
    """Run the tools of ``selected`` (:func:`tool_calls`) and log each call; the registry's
    cache makes repeats free.  Scores are filed under what was scored ("Global" or a region),
    and a whole-image score that stands in for objects is noted in ``notes``.

    ``own_choice``: the tools are the agent's choice, not one the query named; a call whose
    tool stood in for a fallback-chain tool that is not installed here (:class:`Preference`,
    never one of ``excluded``) then logs the tool wanted, why it cannot run and how to get it;
    ``unavailable``: the chain tools the selection could not offer where it ran
    (:func:`unavailable_chain_tools`), wanted too whether or not they can run here.
    A tool the query named is run as named (the registry falls back when it cannot run)."""
    scores: dict[str, dict[str, tuple[str, float]]] = {}
    logs: list[ToolExecutionLog] = []
    preference = Preference(registry, excluded, unavailable) if own_choice else None
    for call in tool_calls(selected, query, notes):
        entry = _run_one(registry, image, reference, call, preference)
        logs.append(entry)
        if math.isfinite(entry.normalized_score):
            scores.setdefault(call.key, {})[call.distortion] = (
                entry.tool_name,
                entry.normalized_score,
            )
    objects = list(
        dict.fromkeys(
            name
            for entry in logs
            if math.isfinite(entry.normalized_score)
            for name in entry.requested_for
        )
    )
    if objects:
        _note(notes, whole_image_note(objects))
    return scores, logs


def _run_one(
    registry: ToolRegistry,
    image: LoadedImage,
    reference: LoadedImage | None,
    call: ToolCall,
    preference: Preference | None = None,
) -> ToolExecutionLog:
    where: dict[str, Any] = {
        "object_name": call.key,
        "distortion": call.distortion,
        "region": call.region.name if call.region else None,
        "requested_for": list(call.requested_for),
    }
    tool = call.tool
    try:
        target, ref = call_images(call, image, reference)
        spec = registry.get(tool)
        note = None
        if spec.is_full_reference and ref is None:
            # An FR tool without a reference: use the first runnable NR fallback instead.
            candidates = registry.fallback_candidates(spec)
            if not candidates:
                raise ToolError(f"{spec.name} needs a reference and no NR fallback can run")
            note = f"{spec.name} is full-reference and no reference image was given"
            spec = candidates[0]
        if call.region is not None:  # a crop can be too small where the image was not
            target.check_size(spec.name)
        result = registry.execute_tool(spec.name, target, ref if spec.is_full_reference else None)
        fallback = result.fallback or note is not None
        requested, error = (tool, note or result.error) if fallback else (None, None)
        if fallback:
            gap = _chain_gap(registry, tool, result.tool)
            error = f"{error}; {gap}" if gap and error else error or gap
        elif preference is not None:
            requested, why = _standing_in(registry, preference, result.tool, call.distortion)
            if requested and why:
                fallback, error = True, cannot_run(requested, why)
                log.info(
                    "%s/%s: %s stands in for %s (%s)",
                    call.key,
                    call.distortion,
                    result.tool,
                    requested,
                    why,
                )
            else:
                requested = None
        return ToolExecutionLog(
            tool_name=result.tool,
            requested_tool=requested,
            raw_score=result.raw_score,
            normalized_score=result.normalized_score,
            execution_time=result.execution_time,
            fallback=fallback,
            error=error,
            cached=result.cached,
            load_time=result.load_time,
            **where,
        )
    except ToolError as exc:
        log.error("tool %s failed for %s/%s: %s", tool, call.key, call.distortion, exc)
        return ToolExecutionLog(
            tool_name=tool,
            raw_score=math.nan,
            normalized_score=math.nan,
            execution_time=0.0,
            error=str(exc),
            **where,
        )


#: The object of a metric job's tool calls: the whole image, as in the agent's global scope.
METRIC_OBJECT = "Global"


def metric_distortion(tool: str) -> str:
    """The distortion key of a metric call: one per tool, so each tool has its own log row."""
    return f"metric:{tool}"


def run_metrics(
    registry: ToolRegistry, image: LoadedImage, reference: LoadedImage | None, tools: list[str]
) -> tuple[dict[str, dict[str, tuple[str, float]]], list[ToolExecutionLog]]:
    """Run exactly ``tools`` on the whole image (a metric job): no fallback to another tool,
    since a metric job asks for these scores; a tool that fails is logged with its error and
    NaN scores, and the others still run."""
    scores: dict[str, dict[str, tuple[str, float]]] = {}
    logs: list[ToolExecutionLog] = []
    for tool in tools:
        distortion = metric_distortion(tool)
        try:
            spec = registry.get(tool)
            result = registry.execute_tool(
                spec.name,
                image,
                reference if spec.is_full_reference else None,
                allow_fallback=False,
            )
            entry = ToolExecutionLog(
                tool_name=result.tool,
                object_name=METRIC_OBJECT,
                distortion=distortion,
                raw_score=result.raw_score,
                normalized_score=result.normalized_score,
                execution_time=result.execution_time,
                cached=result.cached,
                load_time=result.load_time,
            )
            scores.setdefault(METRIC_OBJECT, {})[distortion] = (
                result.tool,
                result.normalized_score,
            )
        except ToolError as exc:
            log.error("metric %s failed on %s: %s", tool, image.path, exc)
            entry = ToolExecutionLog(
                tool_name=tool,
                object_name=METRIC_OBJECT,
                distortion=distortion,
                raw_score=math.nan,
                normalized_score=math.nan,
                execution_time=0.0,
                error=str(exc),
            )
        logs.append(entry)
    return scores, logs


# -- planning the subtasks' inputs ------------------------------------------------------------


def distortion_set_for(
    plan: PlannerOutput, detected: dict[str, list[str]] | None
) -> dict[str, list[str]]:
    """What analysis and selection work on: the distortions the query named (the plan's, put
    on the plan's scope: "Global" for the one object in scope is that object), with any
    detected ones added; else every category."""
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


def selection_for(
    plan: PlannerOutput,
    distortion_set: dict[str, list[str]],
    selected: dict[str, dict[str, str]] | None,
) -> dict[str, dict[str, str]]:
    """The tools to run: the plan's required tool, the selection, or the spec's generic ones."""
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
    """``selected`` with each tool the query ruled out replaced by the first tool of the same
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


def load_inputs(
    image_path: str, reference_path: str | None
) -> tuple[LoadedImage, LoadedImage | None]:
    return read_image(image_path), read_image(reference_path) if reference_path else None
