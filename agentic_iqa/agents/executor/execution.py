"""Run the selected tools on the image (or a region's crop) and log every call.

No tool stands in silently: a call whose tool another replaced logs the tool asked for and why
it did not run (:class:`Preference`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from iqa_tools import ToolError, ToolRegistry
from iqa_tools.images import LoadedImage, crop_image, read_image

from ...evidence import CANNOT_RUN
from ...query import Region, region_of
from ...state import (
    ToolExecutionLog,
)
from ...vlm.builtin import selection as builtin_selection
from .selection import tool_descriptions
from .subtasks import add_note

log = logging.getLogger(__name__)


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
    """Return the calls that give ``selected`` (a tool per object and distortion) its evidence.

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
                add_note(
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
    """Return what ``call`` scores: the whole image (and reference), or both cropped to a region."""
    if call.region is None:
        return image, reference
    box, name = call.region.box, call.region.name
    return (
        crop_image(image, box, name),
        crop_image(reference, box, name) if reference is not None else None,
    )


def whole_image_note(objects: Sequence[str]) -> str:
    """Return what the summarizer and the user are told when a whole-image score is all there is for
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
    """Return a log's ``error`` for a tool that is not installed: the registry's own wording
    (:data:`agentic_iqa.evidence.CANNOT_RUN`), so both read alike."""
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
        """Return the missing chain tool that ``tool`` stood in for on ``distortion``, or None."""
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
    """Return the fallback chain's tool that would have replaced ``failed``, when the fallback
    skipped it for not being installed: ``used`` is then not the one the chain names, and says
    why."""
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
    """Return the fallback chain's NR tools that cannot be offered to selection here, and why
    (:func:`not_installed`): kept with the selection, so that the step running the tools, on
    another worker perhaps, says what a tool chosen in their place stood in for."""
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
        add_note(notes, whole_image_note(objects))
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
    """Return the distortion key of a metric call: one per tool, so each has its own log row."""
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


def load_inputs(
    image_path: str, reference_path: str | None
) -> tuple[LoadedImage, LoadedImage | None]:
    """Read the image and the reference, if any, for the tools."""
    return read_image(image_path), read_image(reference_path) if reference_path else None
