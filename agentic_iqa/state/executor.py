"""Define the Executor's models: distortions found and analysed, tools chosen, scores, logs."""

import logging
import math
from collections.abc import Mapping
from typing import Any, Self

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from ..vocabulary import (
    canonical_distortion,
    canonical_severity,
)
from .fields import (
    Distortion,
    DistortionKey,
    ObjectName,
    Score,
    Severity,
    StateModel,
    Text,
    ToolName,
    UtcDatetime,
    distortion_lists,
    field_keys,
    is_global,
    utc_now,
)

log = logging.getLogger(__name__)


class DistortionAnalysis(StateModel):
    """How severe one distortion is, and what it looks like."""

    type: Distortion = Field(description="a distortion category")
    severity: Severity = Field(description="none, slight, moderate, severe or extreme")
    explanation: Text = Field(description="a brief visual explanation")

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        data = field_keys(data, cls.model_fields)
        if isinstance(data, Mapping) and "type" not in data:
            for other in ("distortion", "distortion_type", "name", "category"):
                if other in data:
                    data = {**data, "type": data[other]}
                    break
        return data

    @field_validator("severity", mode="before")
    @classmethod
    def _lower_severity(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return canonical_severity(value)
            except ValueError:
                return value.strip().lower()  # refused below, with the valid words
        return value


class ToolExecutionLog(StateModel):
    """One tool run, failed ones included: the audit trail behind every score.

    A failed run (``error`` set) may record NaN scores; ``fallback`` says a replacement tool ran,
    ``requested_tool`` which tool was asked for (or wanted: the agent's choice among the tools
    that run here, when a tool of the fallback chain would have been chosen but is not
    installed) and ``error`` why that one did not run.  Two logs whose scores are both NaN compare
    equal, so a state read back from JSON equals the one written.

    ``object_name`` is what the tool scored, never more: "Global" (the whole image) or a region
    the query names by position, scored on its crop (``region``).  Tools cannot find an object
    ("the car"), so a call made for objects scores the whole image and says for which ones in
    ``requested_for``.  A log written before these fields (an object's name, no ``region``)
    scored the whole image too.
    """

    tool_name: Text = Field(description="the tool that produced the score")
    object_name: ObjectName = Field(
        description='what was scored: "Global" (the whole image) or a region\'s scope key'
    )
    distortion: DistortionKey = Field(description="the distortion the tool was chosen for")
    raw_score: float = Field(description="the tool's own output, on its own scale")
    normalized_score: float = Field(description="the score mapped onto [1, 5]")
    execution_time: float = Field(ge=0, allow_inf_nan=False, description="seconds")
    fallback: bool = Field(default=False, description="a fallback tool replaced the requested one")
    error: Text | None = Field(
        default=None,
        description="why the requested tool failed, or why the tool wanted cannot run here",
    )
    timestamp: UtcDatetime = Field(default_factory=utc_now, description="when it ran (UTC)")
    requested_tool: str | None = Field(
        default=None,
        description="the tool asked for, when a fallback ran instead; for a "
        "tool of the agent's own choice, the fallback-chain tool it would have been had that "
        "one been installed (``error`` says why it cannot run and how to get it)",
    )
    cached: bool = Field(default=False, description="the raw score came from the score cache")
    load_time: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="seconds of one-time model creation included in execution_time "
        "(0: the model was loaded already; None: not recorded)",
    )
    region: Text | None = Field(
        default=None,
        description='the region whose crop was scored ("left half"); None: the whole image',
    )
    requested_for: list[ObjectName] = Field(
        default_factory=list,
        description="the objects in scope this whole-image score was asked for: no tool "
        "measured them on their own",
    )

    @model_validator(mode="after")
    def _scores(self) -> Self:
        score = self.normalized_score
        if self.error is None:
            if not math.isfinite(self.raw_score):
                raise ValueError(
                    f"raw_score must be finite, got {self.raw_score} "
                    "(only a failed execution, with error set, may record NaN)"
                )
            if not 1 <= score <= 5:
                raise ValueError(
                    f"normalized_score must be in [1, 5], got {score} "
                    "(only a failed execution, with error set, may record NaN)"
                )
        elif not (math.isnan(score) or 1 <= score <= 5):
            raise ValueError(f"normalized_score must be in [1, 5] or NaN, got {score}")
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolExecutionLog):
            return NotImplemented
        return type(self) is type(other) and _nan_equal(self.__dict__) == _nan_equal(other.__dict__)


_NAN = object()


def _nan_equal(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _NAN if isinstance(value, float) and math.isnan(value) else value
        for key, value in fields.items()
    }


class ExecutorOutput(StateModel):
    """The evidence the Executor gathered; a subtask that did not run (or failed) leaves None."""

    distortion_set: dict[ObjectName, list[Distortion]] | None = Field(
        default=None, description="distortions to look at, per object or Global"
    )
    distortion_analysis: dict[ObjectName, list[DistortionAnalysis]] | None = Field(
        default=None, description="severity and explanation per distortion, per object"
    )
    selected_tools: dict[ObjectName, dict[Distortion, ToolName]] | None = Field(
        default=None, description="the tool chosen per object and distortion (canonical names)"
    )
    quality_scores: dict[ObjectName, dict[DistortionKey, tuple[ToolName, Score]]] | None = Field(
        default=None,
        description="(tool, normalized score in [1, 5]) per part of the image "
        'scored and distortion: "Global" is the whole image (what tools score for objects), a '
        "region named by position its crop",
    )
    tool_logs: list[ToolExecutionLog] = Field(
        default_factory=list, description="every tool run, failed ones included"
    )
    unavailable_tools: dict[ToolName, str] | None = Field(
        default=None,
        description="the fallback chain's tools that could not be offered where "
        "the tools were chosen (not installed there), and why: a tool chosen in their place "
        "stood in for them, wherever it then ran",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="what the subtasks left out of the model's replies or put in instead "
        "(a type not analysed, an off-list category dropped, a tool replaced), for the user "
        "and the summarizer",
    )

    @field_validator("distortion_set", mode="before")
    @classmethod
    def _distortion_set(cls, value: Any) -> Any:
        return distortion_lists(value, "distortion set")

    @field_validator("distortion_analysis", mode="before")
    @classmethod
    def _analysis(cls, value: Any) -> Any:
        """Drop (and log) items whose type names no category, as in a distortion set."""
        if not isinstance(value, Mapping):
            return value
        result: dict[Any, Any] = {}
        for key, items in value.items():
            name = "Global" if is_global(key) else key
            if isinstance(items, Mapping):
                items = [items]
            if isinstance(items, list | tuple):
                kept = []
                for item in items:
                    kind = item.get("type") if isinstance(item, Mapping) else None
                    if isinstance(kind, str):
                        try:
                            canonical_distortion(kind)
                        except ValueError:
                            log.warning(
                                "distortion analysis: %r is no distortion category; ignored", kind
                            )
                            continue
                    kept.append(item)
                items = kept
            result[name] = [*result.get(name, []), *items] if name in result else items
        return result

    @field_validator("selected_tools", mode="before")
    @classmethod
    def _selection(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        result: dict[Any, Any] = {}
        for key, per in value.items():
            if isinstance(per, Mapping):
                kept = {}
                for distortion, tool in per.items():
                    try:
                        kept[canonical_distortion(distortion)] = tool
                    except (ValueError, AttributeError):
                        log.warning(
                            "tool selection: %r is no distortion category; ignored", distortion
                        )
                per = kept
            result["Global" if is_global(key) else key] = per
        return result
