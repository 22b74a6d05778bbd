"""The Executor: four subtasks gated by the plan's flags, each allowed to fail on its own.

Detection, analysis and selection ask the VLM with the specification's prompt templates;
execution runs the selected tools through :mod:`iqa_tools` and logs every call.  A subtask that
fails (no valid JSON after three attempts, an exception) leaves its field ``None`` and the next
subtask works with what there is; only tool selection has a defined fallback (the generic tools
of the spec: QAlign for NR, TOPIQ_FR for FR), and tool failures fall back inside the registry.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iqa_tools import DISTORTION_CATEGORIES, ToolError, ToolRegistry
from iqa_tools.images import LoadedImage, read_image

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
from ..state import DistortionAnalysis, ExecutorOutput, PlannerOutput, ToolExecutionLog
from ..vlm.base import FatalVLMError, TransientVLMError, VLMClient, VLMError, VLMRequest
from ..vlm.builtin import selection as builtin_selection
from .jsonreply import ask_json

log = logging.getLogger(__name__)

GENERIC_TOOLS = {"NR": "QAlign", "FR": "TOPIQ_FR"}


def scope_keys(plan: PlannerOutput) -> list[str]:
    return list(plan.query_scope) if isinstance(plan.query_scope, list) else ["Global"]


def _images(image_path: str, reference_path: str | None) -> tuple[Path, ...]:
    return tuple(Path(p) for p in (image_path, reference_path) if p)


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

def align_to_scope(raw: Mapping[str, Any], keys: list[str], what: str) -> dict[str, Any]:
    """A reply's per-object mapping with its object names put on the plan's scope ``keys``.

    A name of the scope (any case, with or without "the") is that object; with the whole image
    in scope everything is the whole image; with one object in scope any other name (or
    "Global") is that object.  With several objects in scope, a name that is none of them
    cannot be placed: ``ValueError``, and the question is asked again.
    """
    def fold(name: str) -> str:
        return re.sub(r"^(?:the|a|an)\s+", "", str(name).strip().casefold())

    by_fold = {fold(key): key for key in keys}
    aligned: dict[str, Any] = {}
    for name, value in raw.items():
        key = by_fold.get(fold(name))
        if key is None and keys == ["Global"]:
            key = "Global"
        elif key is None and len(keys) == 1:
            key = keys[0]
        elif key is None:
            raise ValueError(f"{what}: {name!r} is none of the objects in the query's scope "
                             f"({', '.join(keys)})")
        if key in aligned and isinstance(aligned[key], list) and isinstance(value, list):
            aligned[key] = [*aligned[key], *value]
        elif key in aligned and isinstance(aligned[key], dict) and isinstance(value, dict):
            aligned[key] = {**aligned[key], **value}
        else:
            aligned[key] = value
    return aligned


def _scope_suffix(keys: list[str]) -> str:
    return (STRICT_JSON_SUFFIX + " Use exactly these object keys: "
            + ", ".join(json.dumps(key) for key in keys) + ".")


def detect_distortions(client: VLMClient, query: str, image_path: str,
                       reference_path: str | None, plan: PlannerOutput
                       ) -> dict[str, list[str]] | None:
    keys = scope_keys(plan)

    def parse(reply: Mapping[str, Any]) -> dict[str, list[str]]:
        raw = _field(reply, "distortion_set")
        if not isinstance(raw, dict):
            raise TypeError("distortion_set must be an object")
        return ExecutorOutput(
            distortion_set=align_to_scope(raw, keys, "distortion_set")).distortion_set or {}

    request = VLMRequest(
        task="distortion_detection", system=DISTORTION_DETECTION_SYSTEM,
        user=render(DISTORTION_DETECTION_USER, query=query),
        images=_images(image_path, reference_path),
        context={"query": query, "image_path": image_path, "query_scope": plan.query_scope},
    )
    return ask_json(client, request, parse, stricter=_scope_suffix(keys)).value


def _field(reply: Mapping[str, Any], name: str) -> Any:
    """``reply[name]``, also under another spelling of the key ("distortionSet",
    "Distortion Set"); ``KeyError`` when absent, and the question is asked again."""
    wanted = re.sub(r"[^a-z0-9]", "", name)
    for key, value in reply.items():
        if re.sub(r"[^a-z0-9]", "", str(key).casefold()) == wanted:
            return value
    raise KeyError(name)


def analyse_distortions(client: VLMClient, query: str, image_path: str,
                        reference_path: str | None, distortion_set: dict[str, list[str]]
                        ) -> dict[str, list[DistortionAnalysis]] | None:
    keys = list(distortion_set)

    def parse(reply: Mapping[str, Any]) -> dict[str, list[DistortionAnalysis]]:
        raw = _field(reply, "distortion_analysis")
        if not isinstance(raw, dict):
            raise TypeError("distortion_analysis must be an object")
        analysis = ExecutorOutput(
            distortion_analysis=align_to_scope(raw, keys, "distortion_analysis"))
        result = analysis.distortion_analysis or {}
        for key, items in result.items():
            expected = set(distortion_set.get(key, ()))
            stray = [item.type for item in items if expected and item.type not in expected]
            if stray:
                raise ValueError(f"analysis of {key!r} has types not in the distortion set: "
                                 f"{stray}")
        return result

    request = VLMRequest(
        task="distortion_analysis",
        system=render(DISTORTION_ANALYSIS_SYSTEM, distortion_set=distortion_set),
        user=render(DISTORTION_ANALYSIS_USER, query=query),
        images=_images(image_path, reference_path),
        context={"query": query, "image_path": image_path, "distortion_set": distortion_set},
    )
    return ask_json(client, request, parse, stricter=_scope_suffix(keys)).value


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
        tools.append({"name": spec.name, "type": spec.type, "description": spec.description,
                      "strengths": list(spec.strengths), "available": True})
    return tools


def select_tools(client: VLMClient, registry: ToolRegistry, query: str,
                 distortion_set: dict[str, list[str]], reference_mode: str
                 ) -> dict[str, dict[str, str]] | None:
    tools = tool_descriptions(registry, reference_mode)
    allowed = {tool["name"] for tool in tools}

    keys = list(distortion_set)

    def parse(reply: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        raw = _field(reply, "selected_tools")
        if not isinstance(raw, dict):
            raise TypeError("selected_tools must be an object")
        selected = ExecutorOutput(
            selected_tools=align_to_scope(raw, keys, "selected_tools")).selected_tools or {}
        unusable = sorted({name for per in selected.values() for name in per.values()} - allowed)
        if unusable:
            raise ValueError(f"selected tools not offered: {unusable}")
        return selected

    description = "; ".join(
        f"{t['name']} ({t['type']}): {t['description']}"
        + (f" Strong on: {', '.join(t['strengths'])}." if t["strengths"] else "")
        for t in tools
    )
    system = render(TOOL_SELECTION_SYSTEM, distortion_set=distortion_set,
                    tool_description=description)
    if reference_mode == "Full-Reference":
        system += FR_PREFERENCE_INSTRUCTION
    request = VLMRequest(
        task="tool_selection",
        system=system,
        user=render(TOOL_SELECTION_USER, query=query),
        context={"query": query, "distortion_set": distortion_set, "tools": tools,
                 "reference_mode": reference_mode},
    )
    selected = ask_json(client, request, parse, stricter=_scope_suffix(keys)).value
    if selected is None or reference_mode != "Full-Reference":
        return selected
    return prefer_full_reference(selected, tools)


def prefer_full_reference(selected: dict[str, dict[str, str]], tools: list[dict[str, Any]]
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
            best = builtin_selection.select({key: [distortion]}, full_reference,
                                            "Full-Reference")[key][distortion]
            log.info("tool selection: the model chose NR tool %s for %s/%s although a "
                     "reference is given; using FR tool %s", tool, key, distortion, best)
            result[key][distortion] = best
    return result


def generic_selection(distortion_set: dict[str, list[str]], reference_mode: str
                      ) -> dict[str, dict[str, str]]:
    tool = GENERIC_TOOLS["FR" if reference_mode == "Full-Reference" else "NR"]
    return {key: {d: tool for d in distortions} for key, distortions in distortion_set.items()}


def execute_tools(registry: ToolRegistry, image: LoadedImage, reference: LoadedImage | None,
                  selected: dict[str, dict[str, str]]
                  ) -> tuple[dict[str, dict[str, tuple[str, float]]], list[ToolExecutionLog]]:
    """Run every selected tool (the registry's cache makes repeats free) and log each call."""
    scores: dict[str, dict[str, tuple[str, float]]] = {}
    logs: list[ToolExecutionLog] = []
    for key, per_distortion in selected.items():
        for distortion, tool in per_distortion.items():
            entry = _run_one(registry, image, reference, key, distortion, tool)
            logs.append(entry)
            if math.isfinite(entry.normalized_score):
                scores.setdefault(key, {})[distortion] = (entry.tool_name, entry.normalized_score)
    return scores, logs


def _run_one(registry: ToolRegistry, image: LoadedImage, reference: LoadedImage | None,
             key: str, distortion: str, tool: str) -> ToolExecutionLog:
    try:
        spec = registry.get(tool)
        note = None
        if spec.is_full_reference and reference is None:
            # An FR tool without a reference: use the first runnable NR fallback instead.
            candidates = registry.fallback_candidates(spec)
            if not candidates:
                raise ToolError(f"{spec.name} needs a reference and no NR fallback can run")
            note = f"{spec.name} is full-reference and no reference image was given"
            spec = candidates[0]
        result = registry.execute_tool(spec.name, image,
                                       reference if spec.is_full_reference else None)
        fallback = result.fallback or note is not None
        return ToolExecutionLog(
            tool_name=result.tool, requested_tool=tool if fallback else None,
            object_name=key, distortion=distortion, raw_score=result.raw_score,
            normalized_score=result.normalized_score, execution_time=result.execution_time,
            fallback=fallback, error=note or result.error, cached=result.cached,
            load_time=result.load_time,
        )
    except ToolError as exc:
        log.error("tool %s failed for %s/%s: %s", tool, key, distortion, exc)
        return ToolExecutionLog(
            tool_name=tool, object_name=key, distortion=distortion, raw_score=math.nan,
            normalized_score=math.nan, execution_time=0.0, error=str(exc),
        )


#: The object of a metric job's tool calls: the whole image, as in the agent's global scope.
METRIC_OBJECT = "Global"


def metric_distortion(tool: str) -> str:
    """The distortion key of a metric call: one per tool, so each tool has its own log row."""
    return f"metric:{tool}"


def run_metrics(registry: ToolRegistry, image: LoadedImage, reference: LoadedImage | None,
                tools: list[str]) -> tuple[dict[str, dict[str, tuple[str, float]]],
                                           list[ToolExecutionLog]]:
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
                spec.name, image, reference if spec.is_full_reference else None,
                allow_fallback=False)
            entry = ToolExecutionLog(
                tool_name=result.tool, object_name=METRIC_OBJECT, distortion=distortion,
                raw_score=result.raw_score, normalized_score=result.normalized_score,
                execution_time=result.execution_time, cached=result.cached,
                load_time=result.load_time)
            scores.setdefault(METRIC_OBJECT, {})[distortion] = (result.tool,
                                                                result.normalized_score)
        except ToolError as exc:
            log.error("metric %s failed on %s: %s", tool, image.path, exc)
            entry = ToolExecutionLog(
                tool_name=tool, object_name=METRIC_OBJECT, distortion=distortion,
                raw_score=math.nan, normalized_score=math.nan, execution_time=0.0,
                error=str(exc))
        logs.append(entry)
    return scores, logs


# -- planning the subtasks' inputs ------------------------------------------------------------

def distortion_set_for(plan: PlannerOutput, detected: dict[str, list[str]] | None
                       ) -> dict[str, list[str]]:
    """What analysis and selection work on: the distortions the query named (the plan's), with
    any detected ones added; else every category."""
    named = {key: list(values) for key, values in (plan.distortions or {}).items()}
    if detected:
        merged = {key: list(values) for key, values in named.items()}
        for key, values in detected.items():
            merged.setdefault(key, [])
            merged[key] += [value for value in values if value not in merged[key]]
        return merged
    if named:
        return named
    return {key: list(DISTORTION_CATEGORIES) for key in scope_keys(plan)}


def selection_for(plan: PlannerOutput, distortion_set: dict[str, list[str]],
                  selected: dict[str, dict[str, str]] | None) -> dict[str, dict[str, str]]:
    """The tools to run: the plan's required tool, the selection, or the spec's generic ones."""
    if plan.required_tool:
        return {key: {d: plan.required_tool for d in values}
                for key, values in distortion_set.items()}
    if selected:
        return selected
    return generic_selection(distortion_set, plan.reference_mode)


def load_inputs(image_path: str, reference_path: str | None
                ) -> tuple[LoadedImage, LoadedImage | None]:
    return read_image(image_path), read_image(reference_path) if reference_path else None
