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
import re
from collections.abc import Iterable, Mapping, Sequence
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

from iqa_tools import Catalog, UnknownToolError, load_catalog

from .vocabulary import (
    DISTORTION_CATEGORIES,
    QUALITY_LEVELS,
    canonical_distortion,
    canonical_severity,
)

log = logging.getLogger(__name__)

#: Replanning rounds a run may take after the first plan, unless the state says otherwise.
DEFAULT_MAX_REPLAN_ITERATIONS = 2
#: Replan entries kept in the state; older ones are dropped first (with a warning).
MAX_REPLAN_HISTORY = 10
#: File extensions accepted for input images (compared ignoring case).
IMAGE_EXTENSIONS: tuple[str, ...] = (
    ".jpg",
    ".jpeg",
    ".png",
    ".bmp",
    ".tif",
    ".tiff",
    ".webp",
    ".gif",
)
#: How far a level distribution may sum from 1 (log-probabilities rounded by the backend).
PROBABILITY_SUM_TOLERANCE = 1e-3

Severity = Literal["none", "slight", "moderate", "severe", "extreme"]


_CATALOG_ENV = (
    "AGENTIC_IQA_CONFIG_DIR",
    "AGENTIC_IQA_METADATA_PATH",
    "AGENTIC_IQA_METADATA_OVERRIDES",
)


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


@functools.lru_cache(maxsize=4096)
def _canonical_if_category(name: str) -> str:
    """Keys that only *should* be categories are spelled canonically when they are one.

    Cached, refusals too: a metric job's keys ("metric: BRISQUE") are no category, and finding
    that out costs a few hundred regular-expression searches, a dozen times per item."""
    try:
        return canonical_distortion(name)
    except ValueError:
        return name


def _one_of(value: Any, spellings: Mapping[str, str]) -> Any:
    """``value`` as the allowed literal it spells (case, spaces, hyphens and underscores
    ignored), or unchanged for the validator to refuse."""
    if not isinstance(value, str):
        return value
    key = "".join(ch for ch in value.casefold() if ch.isalnum())
    return spellings.get(key, value)


def _snake(key: str) -> str:
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key.strip())
    return re.sub(r"[^0-9a-z]+", "_", key.casefold()).strip("_")


def _field_keys(data: Any, names: Iterable[str]) -> Any:
    """``data`` with keys spelled another way ("Query Type", "queryType", "query-type") renamed
    to the field they spell; keys that are no field are left for the model to ignore."""
    if not isinstance(data, Mapping):
        return data
    wanted = {_snake(name): name for name in names}
    renamed: dict[Any, Any] = {}
    for key, value in data.items():
        name = wanted.get(_snake(key), key) if isinstance(key, str) else key
        if name not in renamed or name == key:
            renamed[name] = value
    return renamed


def _is_global(name: Any) -> bool:
    return isinstance(name, str) and name.strip().casefold() in {
        "global",
        "whole image",
        "entire image",
        "image",
    }


def _known_distortions(values: Any, where: str) -> Any:
    """A list of distortion names with each spelled canonically and the ones that name no
    category dropped (logged): one odd label ("lens flare") must not void the others.  A single
    string counts as a list of one."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list | tuple):
        return values
    kept: list[Any] = []
    for value in values:
        try:
            name = canonical_distortion(value) if isinstance(value, str) else value
        except ValueError:
            log.warning("%s: %r is no distortion category; ignored", where, value)
            continue
        if name not in kept:
            kept.append(name)
    return kept


def _distortion_lists(value: Any, where: str) -> Any:
    """``{object: [distortion, ...]}`` from a model: "global" keys spelled "Global", each list
    through :func:`_known_distortions`, objects left with none dropped."""
    if not isinstance(value, Mapping):
        return value
    result: dict[Any, Any] = {}
    for key, values in value.items():
        name = "Global" if _is_global(key) else key
        kept = _known_distortions(values, where)
        if isinstance(kept, list) and not kept and values:
            continue
        if isinstance(kept, list) and isinstance(result.get(name), list):
            kept = [*result[name], *(v for v in kept if v not in result[name])]
        result[name] = kept
    return result


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
    """A local image file that exists, or an object's URL (``s3://bucket/key.jpg``), whose
    existence its reader checks: a HEAD here would cost a request per run."""
    from urllib.parse import urlsplit

    from iqa_tools.storage import is_url

    remote = is_url(value)
    name = urlsplit(value).path if remote else value
    if Path(name).suffix.lower() not in IMAGE_EXTENSIONS:
        raise ValueError(
            f"Invalid image format: {value!r} (expected one of {', '.join(IMAGE_EXTENSIONS)})"
        )
    if not remote and not Path(value).is_file():
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

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        return _field_keys(data, [*cls.model_fields, "tool_execute"])


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


_SCOPE_SEPARATORS = re.compile(r"\s*(?:[,;/&]|\band\b)\s*", re.I)
_PLAN_FLAGS = ("distortion_detection", "distortion_analysis", "tool_selection", "tool_execution")


def _is_none(value: str) -> bool:
    return value.strip().casefold() in {"", "none", "null", "n/a", "na", "no", "nil", "-"}


def _split_names(value: Any) -> Any:
    """A list of names, from a list or from one string of several ("Blurs, Noise")."""
    if isinstance(value, str):
        return [name for name in re.split(r"\s*[,;]\s*", value.strip()) if name]
    return list(value) if isinstance(value, tuple) else value


def _flags_named(value: Any) -> Any:
    """``plan`` written as the list of the subtasks to run (["distortion_detection",
    "tool_execution"], or the same as one string) read as the four flags, the listed ones on;
    anything else is left for the flags' own validation."""
    names = _split_names(value) if isinstance(value, str | list | tuple) else None
    if names is None or not all(isinstance(name, str) for name in names):
        return value
    on = {{"tool_execute": "tool_execution"}.get(_snake(name), _snake(name)) for name in names}
    if not on <= set(_PLAN_FLAGS):
        return value
    return {flag: flag in on for flag in _PLAN_FLAGS}


def _one_tool(value: Any) -> Any:
    """``required_tool`` given as a list: its first name (the field holds one tool)."""
    if not isinstance(value, list | tuple):
        return value
    names = [name for name in value if not (isinstance(name, str) and _is_none(name))]
    if len(names) > 1:
        log.warning("plan: required_tool lists %s; the first is required", names)
    return names[0] if names else None


def _family(value: Any) -> tuple[str, ...]:
    """The members of the tool family ``value`` names ("WaDIQaM": WaDIQaM_FR, WaDIQaM_NR), or ():
    a family is no one tool, and no unknown one either."""
    if not isinstance(value, str):
        return ()
    from iqa_tools.catalog import lookup_key

    return _catalog().families.get(lookup_key(value), ())


def _unknown_tool(value: Any) -> bool:
    """Whether ``value`` names a tool, but none the catalogue knows (in any spelling)."""
    if not isinstance(value, str) or _is_none(value) or value.strip() in _catalog():
        return False
    from .query import tool_in

    return tool_in(value, [spec.name for spec in _catalog()]) is None


#: The plan's fields that the input decides: a model's reply may leave them out when the
#: validation context gives "defaults" (the planner does, from the query and the images).
_INPUT_FIELDS = ("reference_mode", "distortion_source", "query_scope")


def _with_defaults(
    data: Mapping[str, Any], defaults: Mapping[str, Any], filled: list[str]
) -> dict[str, Any]:
    """``data`` with the fields the input decides and the four flags taken from ``defaults``
    where the model left them out (or wrote null; a null scope is already the whole image), so
    a plan short of them is still a plan; each field filled is appended to ``filled``."""
    data = dict(data)
    for key in _INPUT_FIELDS:
        if key in defaults and (key not in data or (data[key] is None and key != "query_scope")):
            data[key] = defaults[key]
            filled.append(key)
    flags = {} if data.get("plan") is None else data["plan"]
    if not isinstance(flags, Mapping) or not isinstance(defaults.get("plan"), Mapping):
        return data  # not flags at all: left for validation to refuse
    flags = {
        ("tool_execution" if key == "tool_execute" else key): value
        for key, value in _field_keys(
            flags, [*PlanControlFlags.model_fields, "tool_execute"]
        ).items()
    }
    lacking = [flag for flag in _PLAN_FLAGS if flags.get(flag) is None]
    if lacking:
        data["plan"] = {**flags, **{flag: defaults["plan"][flag] for flag in lacking}}
        filled.extend(
            ["plan"] if len(lacking) == len(_PLAN_FLAGS) else [f"plan.{flag}" for flag in lacking]
        )
    return data


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
    required_tool: ToolName | None = Field(
        default=None, description="an IQA tool the query names explicitly, else null"
    )
    excluded_tools: list[ToolName] = Field(
        default_factory=list,
        description='tools the query rules out ("don\'t use NIQE"): never selected nor run',
    )
    plan: PlanControlFlags = Field(description="which Executor subtasks run")
    answer_mode: Literal["scoring", "explanation"] | None = Field(
        default=None,
        description='"scoring" when the query asks for a rating of the image (the answer is a '
        'quality level and a score), "explanation" for any other question (multiple choice '
        "included); null: decided from the query's wording",
    )

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any, info: ValidationInfo) -> Any:
        data = _field_keys(data, cls.model_fields)
        if isinstance(data, Mapping) and "plan" not in data:
            # The four flags written beside the other keys instead of under "plan".
            flags = _field_keys(data, [*PlanControlFlags.model_fields, "tool_execute"])
            found = {
                k: flags[k] for k in (*PlanControlFlags.model_fields, "tool_execute") if k in flags
            }
            if found:
                data = {**data, "plan": found}
        if not isinstance(data, Mapping):
            return data
        data = {**data, "plan": _flags_named(data.get("plan"))}
        if isinstance(info.context, dict) and isinstance(info.context.get("defaults"), Mapping):
            data = _with_defaults(
                data, info.context["defaults"], info.context.setdefault("filled", [])
            )
        tool = _one_tool(data.get("required_tool"))
        data["required_tool"] = tool
        stored = isinstance(info.context, dict) and info.context.get("stored")
        members = () if stored else _family(tool)
        if members or (not stored and _unknown_tool(tool)):
            if members:  # the query's qualifier or the reference decides which (reconcile)
                log.info(
                    "plan: required_tool %r is a family of tools (%s); the query and the "
                    "reference decide which",
                    tool,
                    ", ".join(members),
                )
            else:  # the model wants a tool measured but names none the catalogue has
                log.warning(
                    "plan: required_tool %r is no tool of the catalogue; a tool is "
                    "selected instead",
                    tool,
                )
            data["required_tool"] = None
            if isinstance(data["plan"], Mapping):
                data["plan"] = {**data["plan"], "tool_selection": True, "tool_execution": True}
        return data

    @field_validator("query_type", mode="before")
    @classmethod
    def _query_type(cls, value: Any) -> Any:
        return _one_of(
            value,
            {
                "iqa": "IQA",
                "technical": "IQA",
                "technicalquality": "IQA",
                "other": "Other",
                "aesthetic": "Other",
                "aesthetics": "Other",
            },
        )

    @field_validator("distortion_source", mode="before")
    @classmethod
    def _fix_paper_spelling(cls, value: Any) -> Any:
        return _one_of(
            value,
            {
                "explicit": "Explicit",
                "explict": "Explicit",
                "inferred": "Inferred",
                "implicit": "Inferred",
                "infer": "Inferred",
            },
        )

    @field_validator("reference_mode", mode="before")
    @classmethod
    def _reference_mode(cls, value: Any) -> Any:
        return _one_of(
            value,
            {
                "fullreference": "Full-Reference",
                "fr": "Full-Reference",
                "noreference": "No-Reference",
                "nr": "No-Reference",
                "blind": "No-Reference",
            },
        )

    @field_validator("answer_mode", mode="before")
    @classmethod
    def _answer_mode(cls, value: Any) -> Any:
        return _one_of(
            value,
            {
                "scoring": "scoring",
                "score": "scoring",
                "rating": "scoring",
                "rate": "scoring",
                "explanation": "explanation",
                "explain": "explanation",
                "answer": "explanation",
                "text": "explanation",
                "multiplechoice": "explanation",
            },
        )

    @field_validator("query_scope", mode="before")
    @classmethod
    def _scope(cls, value: Any) -> Any:
        if value is None:
            return "Global"
        if isinstance(value, str):
            # "car, sky" and "the car and the sky" are two objects.
            value = [name for name in _SCOPE_SEPARATORS.split(value.strip()) if name.strip()]
        if isinstance(value, list | tuple):
            names = [v for v in value if not _is_global(v)]
            # ["Global"], [] and the like: the whole image
            return list(dict.fromkeys(names)) if names else "Global"
        return value

    @field_validator("distortions", mode="before")
    @classmethod
    def _distortions(cls, value: Any) -> Any:
        if isinstance(value, str) and _is_none(value):
            return None
        if isinstance(value, str | list | tuple):
            value = {"Global": value}  # distortions not given per object: the whole image's
        if isinstance(value, Mapping):
            value = {
                key: _split_names(names)
                for key, names in value.items()
                if not (isinstance(names, str) and _is_none(names))
            }
        value = _distortion_lists(value, "plan distortions")
        return value or None

    @field_validator("excluded_tools", mode="before")
    @classmethod
    def _excluded_tools(cls, value: Any, info: ValidationInfo) -> Any:
        """Names in any spelling, as a list or one string; unknown ones are dropped (logged):
        a tool the catalogue lacks cannot be run anyway."""
        if value is None or (isinstance(value, str) and _is_none(value)):
            return []
        names = _split_names(value)
        if not isinstance(names, list) or (
            isinstance(info.context, dict) and info.context.get("stored")
        ):
            return names
        kept = []
        for name in names:
            if isinstance(name, str) and name.strip() in _catalog():
                kept.append(_catalog().resolve(name.strip()))
            else:
                log.warning("plan: excluded tool %r is no tool of the catalogue; ignored", name)
        return list(dict.fromkeys(kept))

    @field_validator("required_tool", mode="before")
    @classmethod
    def _blank_tool_is_none(cls, value: Any, info: ValidationInfo) -> Any:
        """A blank or "none" is no tool; a name the catalogue does not know is looked for as
        a tool inside the text ("the NIQE metric"), else dropped (logged): a model's wording
        must not void its plan, and a required tool is only ever a real one."""
        if not isinstance(value, str):
            return value
        value = value.strip()
        if _is_none(value):
            return None
        if isinstance(info.context, dict) and info.context.get("stored"):
            return value
        catalog = _catalog()
        try:
            return catalog.resolve(value)
        except UnknownToolError:
            from .query import tool_in

            named = tool_in(value, [spec.name for spec in catalog])
            if named is None and not _family(value):
                log.warning("plan: required_tool %r is no tool of the catalogue; ignored", value)
            return named


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
            kind.__qualname__
            if kind.__module__ == "builtins"
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
            attempt,
            backend or "unknown",
            retry_count,
            exception_type,
            error.message,
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

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        data = _field_keys(data, cls.model_fields)
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


class ToolExecutionLog(_StateModel):
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
    timestamp: UtcDatetime = Field(default_factory=_utc_now, description="when it ran (UTC)")
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


class ExecutorOutput(_StateModel):
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
        return _distortion_lists(value, "distortion set")

    @field_validator("distortion_analysis", mode="before")
    @classmethod
    def _analysis(cls, value: Any) -> Any:
        """Items whose type names no category are dropped (logged), like in a distortion set."""
        if not isinstance(value, Mapping):
            return value
        result: dict[Any, Any] = {}
        for key, items in value.items():
            name = "Global" if _is_global(key) else key
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
            result["Global" if _is_global(key) else key] = per
        return result


# -- Summarizer ------------------------------------------------------------------------------

#: ``quality_reasoning`` of an answer the model gave without saying why.
NO_REASONING = "(the model gave no reasoning)"
#: Fields of :class:`SummarizerOutput` that are the pipeline's to write (a fused score, its
#: probabilities and their source, an unreadable answer): a model writing one is ignored.
PIPELINE_RESULT_FIELDS = (
    "quality_score",
    "level_distribution",
    "probability_source",
    "answer_unparseable",
    "unparseable_reason",
    "notes",
)
_YES = frozenset({"true", "yes", "y", "1"})
_NO = frozenset({"false", "no", "n", "0"})
_ABSENT = object()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _replan_flag(value: Any, notes: list[str]) -> bool:
    """``need_replan`` as written: true or false, in JSON or in words.  Anything else ("maybe",
    null, 5) is no request: a replan costs a whole round, so only a plain yes asks for one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().casefold() in _YES | _NO:
        flag = value.strip().casefold() in _YES
    elif isinstance(value, int) and value in (0, 1):
        flag = bool(value)
    else:
        notes.append(
            f"need_replan {_shown(value)} is neither true nor false: read as false "
            "(no replan asked for)"
        )
        return False
    notes.append(f"need_replan {_shown(value)} read as {str(flag).lower()}")
    return flag


def _replan_reason(value: Any, notes: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        notes.append("replan_reason given as a list: its items joined")
        return "; ".join(v.strip() for v in value if v.strip()) or None
    notes.append(f"replan_reason {_shown(value)} is not text: ignored")
    return None


def _reasoning(data: Mapping[str, Any], notes: list[str]) -> str:
    """``quality_reasoning``, else what the model wrote under another usual name, else
    :data:`NO_REASONING`: an answer without its why is still the answer."""
    written = data.get("quality_reasoning", _ABSENT)
    if isinstance(written, str) and written.strip():
        return written
    if isinstance(written, list) and written and all(isinstance(v, str) for v in written):
        notes.append("quality_reasoning given as a list: its items joined")
        return " ".join(written)
    for other in ("reasoning", "explanation", "reason"):
        if isinstance(data.get(other), str) and data[other].strip():
            if written is not _ABSENT:
                notes.append(
                    f"quality_reasoning {_shown(written)} is no text: {other!r} read instead"
                )
            return str(data[other])
    if written is not _ABSENT:
        notes.append(f"quality_reasoning {_shown(written)} is no text: ignored")
    return NO_REASONING


def _used_evidence(value: Any, notes: list[str]) -> dict[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return dict(value) if value is not None else None
    if (isinstance(value, str) and not value.strip()) or (
        isinstance(value, list | tuple) and not value
    ):
        notes.append(f"used_evidence {_shown(value)} is empty: ignored")
        return None
    notes.append(f"used_evidence is a {type(value).__name__}, not an object: kept as its items")
    return {"items": list(value) if isinstance(value, list | tuple) else [value]}


class SummarizerReply(_StateModel):
    """What the summarizer's model is asked to write, read from its reply.

    Only ``final_answer`` decides whether a reply is usable.  The side fields are read
    leniently (null, another type, an empty string) and what was ignored or coerced goes to
    ``notes``; the pipeline's own results (:data:`PIPELINE_RESULT_FIELDS`: a score, level
    probabilities) are never taken from a model, which would otherwise become the run's score.
    """

    final_answer: Text = Field(description='an option letter ("A") or a short answer')
    quality_reasoning: Text = Field(description="the evidence behind the answer")
    need_replan: bool = Field(default=False, description="the evidence cannot answer the query")
    replan_reason: str | None = Field(default=None, description="what evidence is missing")
    used_evidence: dict[str, Any] | None = Field(
        default=None, description="the evidence items the answer relied on"
    )
    notes: list[str] = Field(
        default_factory=list, description="what reading the reply ignored or coerced"
    )

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = _field_keys(data, (*cls.model_fields, *PIPELINE_RESULT_FIELDS))
        notes: list[str] = []
        for name in PIPELINE_RESULT_FIELDS:
            value = data.get(name)
            if value is not None and value is not False and value != "" and value != []:
                notes.append(
                    f"{name} {_shown(value)} ignored: the pipeline's to give, not the model's"
                )
        read: dict[str, Any] = {
            "quality_reasoning": _reasoning(data, notes),
            "need_replan": (
                _replan_flag(data["need_replan"], notes) if "need_replan" in data else False
            ),
            "replan_reason": _replan_reason(data.get("replan_reason"), notes),
            "used_evidence": _used_evidence(data.get("used_evidence"), notes),
        }
        if "final_answer" in data:
            read["final_answer"] = data["final_answer"]
        elif "answer" in data:
            read["final_answer"] = data["answer"]
        return {**read, "notes": notes}


class SummarizerOutput(_StateModel):
    """The pipeline's answer and why, or a request to plan again because evidence is missing.

    Built by the summarizer only: from the model's :class:`SummarizerReply` (explanation
    mode) or from its own fusion (scoring mode); never read from a model, so a number a model
    writes never becomes the score.  A score always says where it came from
    (``probability_source``); a stored run is read back as it was written.
    """

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
    notes: list[str] = Field(
        default_factory=list,
        description="what reading the model's reply ignored or coerced, and what the run could "
        "not add (a replan whose plan could not be made)",
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
    def _consistent(self, info: ValidationInfo) -> Self:
        if self.level_distribution is not None and self.probability_source is None:
            raise ValueError(
                'level_distribution needs probability_source ("logprobs" or the substitute)'
            )
        stored = isinstance(info.context, dict) and info.context.get("stored")
        if self.quality_score is not None and self.probability_source is None and not stored:
            raise ValueError(
                "quality_score needs probability_source: a score says where it came from"
            )
        if self.answer_unparseable and not self.unparseable_reason:
            raise ValueError("answer_unparseable needs unparseable_reason (what was answered)")
        if self.need_replan and self.replan_reason is None:
            log.warning(
                "summarizer asked to replan without a reason; recording 'No reason provided'"
            )
            self.replan_reason = "No reason provided"
        return self


# -- The state -------------------------------------------------------------------------------


class ReplanEntry(_StateModel):
    """One replanning round: why the Summarizer asked for it, and why it failed if it did."""

    iteration: int = Field(ge=1, description="the iteration count after this replan")
    reason: Text
    timestamp: UtcDatetime = Field(default_factory=_utc_now)
    failure: str | None = Field(
        default=None,
        description="why its new plan could not be made: the summarizer then "
        "answered with the previous plan and its evidence",
    )


@with_config(ConfigDict(extra="forbid"))
class AgenticIQAState(TypedDict):
    """The state of one run, as it grows through the pipeline.

    The inputs come first (query, image, optional reference); the Planner adds ``plan`` (or
    ``error``), the Executor adds ``executor_evidence``, the Summarizer ``summarizer_result``.
    When the Summarizer asks to replan, :func:`record_replan` counts the round and keeps the
    reason, and the Planner runs again, at most ``max_replan_iterations`` times; the previous
    plan and evidence stay until the new plan is made, and are answered with if it cannot be.
    Updates are applied with :func:`merge_state`; the state crosses processes with
    :func:`state_to_json`.
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
    # Executor subtasks given up on (``step#iteration`` -> why): their evidence is null
    step_errors: NotRequired[dict[str, str]]
    # A metric job's run: only these tools, on the whole image, with no plan and no VLM
    metric_tools: NotRequired[list[ToolName]]
    # "vlm": the VLM answers alone (an ablation): no plan asked for, no executor, no replan
    mode: NotRequired[Literal["agent", "vlm"]]


_STATE_KEYS = AgenticIQAState.__required_keys__ | AgenticIQAState.__optional_keys__
_STATE = TypeAdapter(AgenticIQAState)


def initial_state(
    query: str,
    image_path: str,
    reference_path: str | None = None,
    *,
    max_replan_iterations: int = DEFAULT_MAX_REPLAN_ITERATIONS,
    metric_tools: Sequence[str] | None = None,
    mode: Literal["agent", "vlm"] = "agent",
) -> AgenticIQAState:
    """A run's starting state, with the replanning counters set.

    ``metric_tools``: a metric job's run, which only scores the image with these tools.
    ``mode="vlm"``: the VLM answers the query alone, the ablation of the agent's parts.
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
    if mode == "vlm":
        state["mode"] = "vlm"
        state["max_replan_iterations"] = 0
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
        if name not in {"tool_logs", "notes"} and getattr(new, name) is not None
    }
    return old.model_copy(
        update={
            **changes,
            "tool_logs": [*old.tool_logs, *new.tool_logs],
            "notes": [*old.notes, *new.notes],
        }
    )


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
            iteration,
            MAX_REPLAN_HISTORY,
            [entry.iteration for entry in dropped],
        )
    return merge_state(state, {"iteration_count": iteration, "replan_history": history})


def state_to_json(state: AgenticIQAState) -> str:
    """The state as JSON (validated first, so whatever is written can be read back)."""
    return _STATE.dump_json(_STATE.validate_python(state)).decode()


def state_from_json(text: str | bytes) -> AgenticIQAState:
    """The state written by :func:`state_to_json`, with its nested models revived."""
    return _STATE.validate_json(text, context=STORED)


def missing_evidence(
    plan: Mapping[str, Any],
    quality_scores: Mapping[str, Any] | None,
    distortion_analysis: Mapping[str, Any] | None,
) -> str | None:
    """What the plan asked for but the evidence lacks (plain dicts, shared with the builtin).

    Tools cannot find an object, so for objects they score the whole image, filed under
    "Global": that answers every object's "tool scores missing" (the summarizer is told it is
    the whole image's, :func:`whole_image_objects`), as no plan could give more."""
    flags = plan.get("plan") or {}
    keys = _scope_keys(plan)
    if flags.get("tool_execution"):
        scores = quality_scores or {}
        missing = [key for key in keys if not scores.get(key) and not scores.get("Global")]
        if missing:
            return f"Missing tool scores for {', '.join(missing)}"
    if flags.get("distortion_analysis") and not distortion_analysis:
        return "Missing distortion analysis"
    return None


def replan_can_supply(
    plan: Mapping[str, Any],
    quality_scores: Mapping[str, Any] | None,
    tool_logs: Sequence[Mapping[str, Any]] | None,
) -> bool:
    """Whether a new plan could supply what :func:`missing_evidence` finds missing.

    Only tool scores for an object no tool was run for (the plan's objects missed the scope)
    can come from another plan.  Tools that ran and failed fail the same way under any plan
    (for objects they score the whole image, so a failure on "Global" counts for every object),
    and an analysis the model wrote nothing readable for is asked the same question again."""
    if not (plan.get("plan") or {}).get("tool_execution"):
        return False
    scores = quality_scores or {}
    if scores.get("Global"):
        return False
    tried = {
        name
        for entry in tool_logs or ()
        for name in (entry.get("object_name"), *(entry.get("requested_for") or ()))
    }
    if "Global" in tried:
        return False
    return any(key not in tried and not scores.get(key) for key in _scope_keys(plan))


def scored_on(region: str | None) -> str:
    """What a tool call scored, in words, for every output: a region's crop or the whole image
    (a call for objects, and every call logged before regions were cropped)."""
    return f"{region} (crop)" if region else "whole image"


#: What a tool log's ``error`` says after the tool's name when the tool is not installed here
#: (missing weight files, packages or models): the registry's wording, and the executor's for
#: a tool another stood in for.
CANNOT_RUN = " cannot run here: "


def stand_in_reason(requested: str, error: str | None) -> str:
    """Why ``requested`` did not run, from its log's ``error``, without "X cannot run here: "."""
    text = (error or "").strip()
    prefix = f"{requested}{CANNOT_RUN}"
    return text[len(prefix) :] if text.startswith(prefix) else text or "it did not run"


def stand_in_sentence(tool: str, requested: str, error: str | None) -> str:
    """ "PIQE stood in for BRISQUE (its parameter file ... is not installed: ...).": what the
    answer says of a call whose tool another replaced, for every summarizer and output."""
    return f"{tool} stood in for {requested} ({stand_in_reason(requested, error)})."


def stand_in_label(requested: str, error: str | None) -> str:
    """A tools table's note for such a call: "in place of BRISQUE (not installed)"."""
    text = (error or "").strip()
    if text.startswith(f"{requested}{CANNOT_RUN}"):
        return f"in place of {requested} (not installed)"
    if text.startswith(f"{requested} is full-reference"):
        return f"in place of {requested} (no reference image)"
    return f"in place of {requested} (it failed)" if text else f"in place of {requested}"


def stand_ins(tool_logs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tools that stood in for others and gave a score, once per (tool, tool wanted,
    reason), in log order: ``{"tool", "in_place_of", "reason", "distortions", "sentence"}``.
    Logs are plain dicts (a dumped :class:`ToolExecutionLog`, or a stored run's, whose tool
    is under "tool")."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in tool_logs:
        tool = entry.get("tool_name") or entry.get("tool")
        requested = entry.get("requested_tool")
        score = entry.get("normalized_score")
        if not (entry.get("fallback") and requested and tool and requested != tool):
            continue
        if score is None or not math.isfinite(float(score)):
            continue
        error = entry.get("error")
        key = (str(tool), str(requested), stand_in_reason(str(requested), error))
        if key not in found:
            found[key] = {
                "tool": key[0],
                "in_place_of": key[1],
                "reason": key[2],
                "distortions": [],
                "sentence": stand_in_sentence(key[0], key[1], error),
            }
        distortion = entry.get("distortion")
        if distortion and distortion not in found[key]["distortions"]:
            found[key]["distortions"].append(distortion)
    return list(found.values())


def whole_image_objects(
    plan: Mapping[str, Any], quality_scores: Mapping[str, Any] | None
) -> list[str]:
    """The objects in scope that only a whole-image score speaks for: no score of their own
    (no tool can find "the car"; a region is scored on its crop), and one under "Global".
    What the summarizer is told to judge from the image itself (plain dicts, as above)."""
    scores = quality_scores or {}
    if not scores.get("Global"):
        return []
    return [key for key in _scope_keys(plan) if key != "Global" and not scores.get(key)]


def _scope_keys(plan: Mapping[str, Any]) -> list[str]:
    scope = plan.get("query_scope")
    return list(scope) if isinstance(scope, list) and scope else ["Global"]
