"""The state of one assessment run, and the models that travel in it.

Planner, Executor and Summarizer talk only through these models, and a run's state crosses
process boundaries (Celery tasks, the database) as JSON.  So everything here is plain data:
validated on the way in (a VLM's JSON is untrusted input), written to JSON without loss (the NaN
score of a failed tool included) and read back into the same models.  The module is pure: it
imports neither torch nor Celery nor SQL, only the tool metadata, which is a JSON file.

The paper's prompts spell some keys differently from the spec ("Explict", "tool_execute"); those
spellings are accepted on input and the spec's names are always written.
"""

import functools
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, Self, cast

from pydantic import (
    AfterValidator,
    AliasChoices,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from iqa_tools import DISTORTION_CATEGORIES, Catalog, UnknownToolError, load_catalog

log = logging.getLogger(__name__)

#: Replanning rounds a run may take after the first plan, unless the state says otherwise.
DEFAULT_MAX_REPLAN_ITERATIONS = 2
#: Replan entries kept in the state; older ones are dropped first (with a warning).
MAX_REPLAN_HISTORY = 10
#: File extensions accepted for input images (compared ignoring case).
IMAGE_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif",
)
#: The five quality levels of scoring mode, in score order: "Bad" is c = 1, "Excellent" c = 5.
QUALITY_LEVELS: tuple[str, ...] = ("Bad", "Poor", "Fair", "Good", "Excellent")
#: How far a level distribution may sum from 1 (log-probabilities rounded by the backend).
PROBABILITY_SUM_TOLERANCE = 1e-3

Severity = Literal["none", "slight", "moderate", "severe", "extreme"]


_CATALOG_ENV = ("AGENTIC_IQA_CONFIG_DIR", "AGENTIC_IQA_METADATA_PATH",
                "AGENTIC_IQA_METADATA_OVERRIDES")


def _catalog() -> Catalog:
    """The tool catalogue as configured here, overrides included (user-added tools are valid).

    Cached per configuration, so validating a state does not re-read the YAML every time.
    """
    return _configured_catalog(tuple(os.environ.get(name) for name in _CATALOG_ENV))


@functools.lru_cache(maxsize=8)
def _configured_catalog(_environment: tuple[str | None, ...]) -> Catalog:
    from .config import load_tool_settings

    settings = load_tool_settings()
    return load_catalog(settings.metadata_path, settings.metadata_overrides)


def canonical_distortion(name: str) -> str:
    """The category spelled as in :data:`DISTORTION_CATEGORIES`; a VLM's "noise" is "Noise"."""
    key = name.strip().casefold()
    for category in DISTORTION_CATEGORIES:
        if category.casefold() == key:
            return category
    raise ValueError(
        f"unknown distortion category {name!r}; valid categories: "
        + ", ".join(DISTORTION_CATEGORIES)
    )


def _canonical_if_category(name: str) -> str:
    """Keys that only *should* be categories are spelled canonically when they are one."""
    try:
        return canonical_distortion(name)
    except ValueError:
        return name


#: Validation context of data this package wrote itself (see :func:`state_from_json`).
STORED = {"stored": True}


def _canonical_tool(name: str, info: ValidationInfo) -> str:
    if isinstance(info.context, dict) and info.context.get("stored"):
        # Checked when it was written; a tool since removed from the catalogue must not make
        # a stored run unreadable.
        return name
    try:
        return _catalog().resolve(name)
    except UnknownToolError as exc:
        raise ValueError(str(exc)) from None


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _utc_now() -> datetime:
    return datetime.now(UTC)


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
ObjectName = Text  # an object or region the query names, or "Global"
Distortion = Annotated[
    Text,
    AfterValidator(canonical_distortion),
    Field(json_schema_extra={"enum": list(DISTORTION_CATEGORIES)}),
]
DistortionKey = Annotated[Text, AfterValidator(_canonical_if_category)]
ToolName = Annotated[Text, AfterValidator(_canonical_tool)]
Score = Annotated[float, Field(ge=1, le=5)]
Probability = Annotated[float, Field(ge=0, le=1)]
UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]


class _StateModel(BaseModel):
    # "strings" writes NaN as "NaN", which is still JSON (PostgreSQL jsonb, JavaScript accept
    # it) and reads back as NaN; the default ("null") would lose failed tools' NaN scores.
    model_config = ConfigDict(ser_json_inf_nan="strings")


def _image_path(value: str) -> str:
    if Path(value).suffix.lower() not in IMAGE_EXTENSIONS:
        raise ValueError(
            f"Invalid image format: {value!r} (expected one of {', '.join(IMAGE_EXTENSIONS)})"
        )
    if not Path(value).is_file():
        raise ValueError(f"Image file not found: {value}")
    return value


# -- Planner ---------------------------------------------------------------------------------


class PlannerInput(_StateModel):
    """What the Planner is asked; paths are checked here so a typo fails before any VLM call."""

    query: Text = Field(description="the user's question about the image")
    image_path: str = Field(description="the image to assess (an existing image file)")
    reference_path: str | None = Field(
        default=None, description="a pristine reference image, for full-reference tools"
    )
    prior_context: dict[str, Any] | None = Field(
        default=None,
        description="context from earlier turns or rounds, e.g. the reason for replanning",
    )

    @field_validator("image_path", "reference_path", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("image_path", "reference_path")
    @classmethod
    def _existing_image(cls, value: str | None) -> str | None:
        return None if value is None else _image_path(value)


class PlanControlFlags(_StateModel):
    """Which Executor subtasks run.  No defaults: a plan missing a flag is malformed."""

    distortion_detection: bool = Field(
        description="detect the distortions to look at (off when the query names them)"
    )
    distortion_analysis: bool = Field(
        description="judge how severe each distortion is and explain what it looks like"
    )
    tool_selection: bool = Field(description="let the Executor choose an IQA tool per distortion")
    tool_execution: bool = Field(
        validation_alias=AliasChoices("tool_execution", "tool_execute"),
        description="run IQA tools and collect normalized [1, 5] scores",
    )


_PLANNER_EXAMPLE: dict[str, Any] = {
    "query_type": "IQA",
    "query_scope": ["vehicle"],
    "distortion_source": "Explicit",
    "distortions": {"vehicle": ["Blurs"]},
    "reference_mode": "No-Reference",
    "required_tool": None,
    "plan": {
        "distortion_detection": False,
        "distortion_analysis": True,
        "tool_selection": False,
        "tool_execution": False,
    },
}


class PlannerOutput(_StateModel):
    """The Planner's plan: what the query is about and which Executor subtasks to run."""

    model_config = ConfigDict(json_schema_extra={"examples": [_PLANNER_EXAMPLE]})

    query_type: Literal["IQA", "Other"] = Field(
        description='"IQA" for technical quality (noise, blur, lighting...), "Other" for '
        "aesthetics, emotion or style"
    )
    query_scope: list[ObjectName] | Literal["Global"] = Field(
        description='the objects or regions the query names, or "Global" when it names none'
    )
    distortion_source: Literal["Explicit", "Inferred"] = Field(
        description='"Explicit" when the query names distortions, else "Inferred"'
    )
    distortions: dict[ObjectName, list[Distortion]] | None = Field(
        default=None,
        description='distortions the query names, per object or "Global"; null when none',
    )
    reference_mode: Literal["Full-Reference", "No-Reference"] = Field(
        description='"Full-Reference" exactly when a reference image is given'
    )
    required_tool: str | None = Field(
        default=None, description="an IQA tool the query names explicitly, else null"
    )
    plan: PlanControlFlags = Field(description="which Executor subtasks run")

    @field_validator("distortion_source", mode="before")
    @classmethod
    def _fix_paper_spelling(cls, value: Any) -> Any:
        return "Explicit" if value == "Explict" else value

    @field_validator("query_scope", mode="before")
    @classmethod
    def _scope(cls, value: Any) -> Any:
        if isinstance(value, str):
            name = value.strip()
            return "Global" if name.casefold() == "global" else [name]
        if isinstance(value, list | tuple) and not value:
            return "Global"
        return value

    @field_validator("required_tool", mode="before")
    @classmethod
    def _blank_tool_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value


class PlannerError(_StateModel):
    """A failed Planner attempt, with what the retry logic and a debugging human need."""

    error_type: Text = Field(description='"validation_error", "api_error" or "internal_error"')
    message: str = Field(description="what went wrong, for a human")
    details: dict[str, Any] | None = Field(default=None, description="extra context (JSON)")
    retry_count: int = Field(default=0, ge=0, description="retries attempted before this one")
    timestamp: UtcDatetime = Field(default_factory=_utc_now, description="when it failed (UTC)")
    exception_type: str | None = Field(
        default=None, description="the original exception's class, module-qualified"
    )
    attempt: int = Field(default=1, ge=1, description="which attempt failed, counted from 1")
    backend: str | None = Field(default=None, description="the VLM backend used by the attempt")

    @classmethod
    def from_exception(
        cls,
        exc: BaseException,
        *,
        retry_count: int = 0,
        attempt: int = 1,
        backend: str | None = None,
    ) -> Self:
        """Record ``exc`` and log it: the log line is what one reads when a run keeps failing."""
        kind = type(exc)
        exception_type = (
            kind.__qualname__ if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        details = None
        if isinstance(exc, ValidationError):
            details = {"errors": json.loads(exc.json(include_url=False))}
        error = cls(
            error_type=_error_type(exc),
            message=str(exc) or kind.__name__,
            details=details,
            retry_count=retry_count,
            exception_type=exception_type,
            attempt=attempt,
            backend=backend,
        )
        log.warning(
            "planner attempt %d failed (backend %s, %d retries so far): %s: %s",
            attempt, backend or "unknown", retry_count, exception_type, error.message,
        )
        return error


_CLIENT_LIBRARIES = {"openai", "anthropic", "httpx", "requests", "google"}


def _error_type(exc: BaseException) -> str:
    """Bad output is worth a stricter retry; a failed call is worth a plain one."""
    if isinstance(exc, ValueError):
        return "validation_error"
    if isinstance(exc, TimeoutError | ConnectionError) or (
        type(exc).__module__.split(".")[0] in _CLIENT_LIBRARIES
    ):
        return "api_error"
    return "internal_error"


# -- Executor --------------------------------------------------------------------------------


class DistortionAnalysis(_StateModel):
    """How severe one distortion is, and what it looks like."""

    type: Distortion = Field(description="a distortion category")
    severity: Severity = Field(description="none, slight, moderate, severe or extreme")
    explanation: Text = Field(description="a brief visual explanation")

    @field_validator("severity", mode="before")
    @classmethod
    def _lower_severity(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class ToolExecutionLog(_StateModel):
    """One tool run, failed ones included: the audit trail behind every score.

    A failed run (``error`` set) may record NaN scores; ``fallback`` says a replacement tool ran,
    ``requested_tool`` which tool was asked for.  Two logs whose scores are both NaN compare
    equal, so a state read back from JSON equals the one written.
    """

    tool_name: Text = Field(description="the tool that produced the score")
    object_name: ObjectName
    distortion: DistortionKey = Field(description="the distortion the tool was chosen for")
    raw_score: float = Field(description="the tool's own output, on its own scale")
    normalized_score: float = Field(description="the score mapped onto [1, 5]")
    execution_time: float = Field(ge=0, allow_inf_nan=False, description="seconds")
    fallback: bool = Field(default=False, description="a fallback tool replaced the requested one")
    error: Text | None = Field(default=None, description="why the requested tool failed")
    timestamp: UtcDatetime = Field(default_factory=_utc_now, description="when it ran (UTC)")
    requested_tool: str | None = Field(
        default=None, description="the tool asked for, when a fallback ran instead"
    )
    cached: bool = Field(default=False, description="the raw score came from the score cache")
    load_time: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="seconds of one-time model creation included in execution_time "
                    "(0: the model was loaded already; None: not recorded)",
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


class ExecutorOutput(_StateModel):
    """The evidence the Executor gathered; a subtask that did not run (or failed) leaves None."""

    distortion_set: dict[ObjectName, list[Distortion]] | None = Field(
        default=None, description="distortions to look at, per object or Global"
    )
    distortion_analysis: dict[ObjectName, list[DistortionAnalysis]] | None = Field(
        default=None, description="severity and explanation per distortion, per object"
    )
    selected_tools: dict[ObjectName, dict[DistortionKey, ToolName]] | None = Field(
        default=None, description="the tool chosen per object and distortion (canonical names)"
    )
    quality_scores: dict[ObjectName, dict[DistortionKey, tuple[ToolName, Score]]] | None = Field(
        default=None, description="(tool, normalized score in [1, 5]) per object and distortion"
    )
    tool_logs: list[ToolExecutionLog] = Field(
        default_factory=list, description="every tool run, failed ones included"
    )


# -- Summarizer ------------------------------------------------------------------------------


class SummarizerOutput(_StateModel):
    """The answer and why; or a request to plan again because evidence is missing."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "final_answer": "B",
                    "quality_reasoning": "The image shows moderate blur affecting sharpness, "
                    "consistent with tool score of 2.6.",
                    "need_replan": False,
                },
                {
                    "final_answer": "Unable to determine",
                    "quality_reasoning": "Insufficient evidence for vehicle region.",
                    "need_replan": True,
                    "replan_reason": "Missing tool scores for vehicle region",
                },
            ]
        }
    )

    final_answer: Text = Field(description='an option letter ("A") or a quality level')
    quality_reasoning: Text = Field(description="the evidence behind the answer")
    need_replan: bool = Field(default=False, description="the evidence cannot answer the query")
    replan_reason: str | None = Field(default=None, description="what evidence is missing")
    used_evidence: dict[str, Any] | None = Field(
        default=None, description="the evidence items the answer relied on"
    )
    quality_score: Score | None = Field(
        default=None, description="the fused quality score in [1, 5] (scoring mode)"
    )
    level_distribution: dict[str, Probability] | None = Field(
        default=None,
        description="the VLM's probability per quality level, Bad..Excellent (scoring mode)",
    )
    probability_source: Text | None = Field(
        default=None,
        description='where level_distribution comes from: "logprobs" (token log-probabilities),'
        ' "stated" (probabilities the model stated when asked), "argmax" (probability 1 on the'
        " level answered: the fused score is then that level and tool scores do not move it),"
        " or a backend's own substitute",
    )
    answer_unparseable: bool = Field(
        default=False,
        description="no option could be read from the model's answers, retries included; "
        "final_answer then says so instead of a guessed letter",
    )
    unparseable_reason: str | None = Field(
        default=None, description="what the model answered instead of an option"
    )

    @field_validator("replan_reason", mode="before")
    @classmethod
    def _blank_reason_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("level_distribution", mode="before")
    @classmethod
    def _canonical_levels(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        spelled = {level.casefold(): level for level in QUALITY_LEVELS}
        return {
            spelled.get(key.strip().casefold(), key) if isinstance(key, str) else key: probability
            for key, probability in value.items()
        }

    @field_validator("level_distribution")
    @classmethod
    def _a_distribution(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if set(value) != set(QUALITY_LEVELS):
            missing = [level for level in QUALITY_LEVELS if level not in value]
            unknown = sorted(set(value) - set(QUALITY_LEVELS))
            raise ValueError(
                f"level_distribution needs exactly the levels {', '.join(QUALITY_LEVELS)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        total = math.fsum(value.values())
        if abs(total - 1) > PROBABILITY_SUM_TOLERANCE:
            raise ValueError(f"level_distribution must sum to 1, sums to {total:.6g}")
        return {level: value[level] for level in QUALITY_LEVELS}

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.level_distribution is not None and self.probability_source is None:
            raise ValueError(
                "level_distribution needs probability_source (\"logprobs\" or the substitute)"
            )
        if self.answer_unparseable and not self.unparseable_reason:
            raise ValueError("answer_unparseable needs unparseable_reason (what was answered)")
        if self.need_replan and self.replan_reason is None:
            log.warning("summarizer asked to replan without a reason; recording 'No reason "
                        "provided'")
            self.replan_reason = "No reason provided"
        return self


# -- The state -------------------------------------------------------------------------------


class ReplanEntry(_StateModel):
    """One replanning round: why the Summarizer asked for it."""

    iteration: int = Field(ge=1, description="the iteration count after this replan")
    reason: Text
    timestamp: UtcDatetime = Field(default_factory=_utc_now)


@with_config(ConfigDict(extra="forbid"))
class AgenticIQAState(TypedDict):
    """The state of one run, as it grows through the pipeline.

    The inputs come first (query, image, optional reference); the Planner adds ``plan`` (or
    ``error``), the Executor adds ``executor_evidence``, the Summarizer ``summarizer_result``.
    When the Summarizer asks to replan, :func:`record_replan` counts the round and keeps the
    reason, and the Planner runs again, at most ``max_replan_iterations`` times.  Updates are
    applied with :func:`merge_state`; the state crosses processes with :func:`state_to_json`.
    """

    query: str
    image_path: str
    reference_path: NotRequired[str]
    # Phase 2: Planner outputs
    plan: NotRequired[PlannerOutput]
    error: NotRequired[str]
    # Phase 3: Executor outputs
    executor_evidence: NotRequired[ExecutorOutput]
    # Phase 4: Summarizer outputs and replanning
    summarizer_result: NotRequired[SummarizerOutput]
    iteration_count: NotRequired[int]
    max_replan_iterations: NotRequired[int]
    replan_history: NotRequired[list[ReplanEntry]]
    # Progress of the current iteration, so the next step follows from the state alone
    steps_done: NotRequired[list[str]]
    step_seconds: NotRequired[dict[str, float]]
    # A metric job's run: only these tools, on the whole image, with no plan and no VLM
    metric_tools: NotRequired[list[ToolName]]


_STATE_KEYS = AgenticIQAState.__required_keys__ | AgenticIQAState.__optional_keys__
_STATE = TypeAdapter(AgenticIQAState)


def initial_state(
    query: str,
    image_path: str,
    reference_path: str | None = None,
    *,
    max_replan_iterations: int = DEFAULT_MAX_REPLAN_ITERATIONS,
    metric_tools: Sequence[str] | None = None,
) -> AgenticIQAState:
    """A run's starting state, with the replanning counters set.

    ``metric_tools``: a metric job's run, which only scores the image with these tools.
    """
    if max_replan_iterations < 0:
        raise ValueError(f"max_replan_iterations must be >= 0, got {max_replan_iterations}")
    state = AgenticIQAState(
        query=query,
        image_path=image_path,
        iteration_count=0,
        max_replan_iterations=max_replan_iterations,
        replan_history=[],
    )
    if reference_path is not None:
        state["reference_path"] = reference_path
    if metric_tools:
        state["metric_tools"] = list(metric_tools)
    return state


def merge_state(state: AgenticIQAState, update: Mapping[str, Any]) -> AgenticIQAState:
    """``state`` with a node's partial ``update`` applied; neither argument is modified.

    Every key is replaced, except ``executor_evidence``, which accumulates: the update's fields
    that are not None replace the old ones and its tool logs are appended.  A None value removes
    an optional key.  Nested models are shared with the inputs, not copied: treat them as
    immutable.
    """
    unknown = sorted(set(update) - _STATE_KEYS)
    if unknown:
        raise ValueError(f"unknown state keys {unknown}; known: {sorted(_STATE_KEYS)}")
    merged: dict[str, Any] = {
        key: list(value) if isinstance(value, list) else value for key, value in state.items()
    }
    for key, value in update.items():
        if value is None:
            if key in AgenticIQAState.__required_keys__:
                raise ValueError(f"{key} is required and cannot be removed from the state")
            merged.pop(key, None)
        elif key == "executor_evidence" and merged.get(key) is not None:
            merged[key] = _add_evidence(merged[key], value)
        else:
            merged[key] = list(value) if isinstance(value, list) else value
    return cast(AgenticIQAState, merged)


def _add_evidence(old: Any, new: Any) -> ExecutorOutput:
    old, new = ExecutorOutput.model_validate(old), ExecutorOutput.model_validate(new)
    changes = {
        name: getattr(new, name)
        for name in ExecutorOutput.model_fields
        if name != "tool_logs" and getattr(new, name) is not None
    }
    return old.model_copy(update={**changes, "tool_logs": [*old.tool_logs, *new.tool_logs]})


def record_replan(state: AgenticIQAState, reason: str) -> AgenticIQAState:
    """``state`` after one more replanning round: the count goes up, the reason is kept.

    Only the latest :data:`MAX_REPLAN_HISTORY` entries are kept; dropping older ones is logged
    as a warning, because a run that replans that often is stuck.
    """
    iteration = state.get("iteration_count", 0) + 1
    history = [*state.get("replan_history", []), ReplanEntry(iteration=iteration, reason=reason)]
    if len(history) > MAX_REPLAN_HISTORY:
        dropped = history[:-MAX_REPLAN_HISTORY]
        history = history[-MAX_REPLAN_HISTORY:]
        log.warning(
            "excessive replanning (%d rounds): replan history keeps the last %d entries, "
            "dropped iterations %s",
            iteration, MAX_REPLAN_HISTORY, [entry.iteration for entry in dropped],
        )
    return merge_state(state, {"iteration_count": iteration, "replan_history": history})


def state_to_json(state: AgenticIQAState) -> str:
    """The state as JSON (validated first, so whatever is written can be read back)."""
    return _STATE.dump_json(_STATE.validate_python(state)).decode()


def state_from_json(text: str | bytes) -> AgenticIQAState:
    """The state written by :func:`state_to_json`, with its nested models revived."""
    return _STATE.validate_json(text, context=STORED)
