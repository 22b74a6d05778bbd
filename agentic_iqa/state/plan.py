"""Define the Planner's models: what it is asked, its plan, and a failed attempt.

The plan is read tolerantly (keys spelled another way, flags written as a list, a tool named
inside a sentence) and checked strictly: a plan that validates is one the Executor can follow.
"""

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    AliasChoices,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..config import configured_catalog
from .fields import (
    Distortion,
    ObjectName,
    StateModel,
    Text,
    ToolName,
    UtcDatetime,
    distortion_lists,
    field_keys,
    is_global,
    one_of,
    snake_case,
    utc_now,
)

log = logging.getLogger(__name__)

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


def _image_path(value: str) -> str:
    """Return a local image file that exists, or an object's URL (``s3://bucket/key.jpg``), whose
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


class PlannerInput(StateModel):
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


class PlanControlFlags(StateModel):
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
        return field_keys(data, [*cls.model_fields, "tool_execute"])


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
    """Return a list of names, from a list or from one string of several ("Blurs, Noise")."""
    if isinstance(value, str):
        return [name for name in re.split(r"\s*[,;]\s*", value.strip()) if name]
    return list(value) if isinstance(value, tuple) else value


def _flags_named(value: Any) -> Any:
    """Return ``plan`` written as the list of the subtasks to run (["distortion_detection",
    "tool_execution"], or the same as one string) read as the four flags, the listed ones on;
    anything else is left for the flags' own validation."""
    names = _split_names(value) if isinstance(value, str | list | tuple) else None
    if names is None or not all(isinstance(name, str) for name in names):
        return value
    on = {
        {"tool_execute": "tool_execution"}.get(snake_case(name), snake_case(name)) for name in names
    }
    if not on <= set(_PLAN_FLAGS):
        return value
    return {flag: flag in on for flag in _PLAN_FLAGS}


def _one_tool(value: Any) -> Any:
    """Return ``required_tool`` given as a list: its first name (the field holds one tool)."""
    if not isinstance(value, list | tuple):
        return value
    names = [name for name in value if not (isinstance(name, str) and _is_none(name))]
    if len(names) > 1:
        log.warning("plan: required_tool lists %s; the first is required", names)
    return names[0] if names else None


def _family(value: Any) -> tuple[str, ...]:
    """Return the members of the tool family ``value`` names ("WaDIQaM": WaDIQaM_FR, WaDIQaM_NR), or
    (): a family is no one tool, and no unknown one either."""
    if not isinstance(value, str):
        return ()
    from iqa_tools.catalog import lookup_key

    return configured_catalog().families.get(lookup_key(value), ())


def _unknown_tool(value: Any) -> bool:
    """Tell whether ``value`` names a tool, but none the catalogue knows (in any spelling): a
    catalogue name inside a longer one ("IL-NIQE", "CLIP-IQA+") is not that tool."""
    if not isinstance(value, str) or _is_none(value):
        return False
    from ..query import catalogue_tool

    return catalogue_tool(value, configured_catalog()) is None


#: The plan's fields that the input decides: a model's reply may leave them out when the
#: validation context gives "defaults" (the planner does, from the query and the images).
_INPUT_FIELDS = ("reference_mode", "distortion_source", "query_scope")


def _with_defaults(
    data: Mapping[str, Any], defaults: Mapping[str, Any], filled: list[str]
) -> dict[str, Any]:
    """Return ``data`` with the fields the input decides and the four flags taken from ``defaults``
    where the model left them out (or wrote null; a null scope is already the whole image), so a
    plan short of them is still a plan; each field filled is appended to ``filled``."""
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
        for key, value in field_keys(
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


class PlannerOutput(StateModel):
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
    uncatalogued_tools: list[Text] = Field(
        default_factory=list,
        description='tools the query names that the tool catalogue lacks, as written ("IL-NIQE", '
        '"LPIPS-VGG"): no other tool is run as them, tools are selected instead, and the answer '
        "says so",
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
        data = field_keys(data, cls.model_fields)
        if isinstance(data, Mapping) and "plan" not in data:
            # The four flags written beside the other keys instead of under "plan".
            flags = field_keys(data, [*PlanControlFlags.model_fields, "tool_execute"])
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
                if isinstance(tool, str) and not data.get("uncatalogued_tools"):
                    data["uncatalogued_tools"] = [tool.strip()]
            data["required_tool"] = None
            if isinstance(data["plan"], Mapping):
                data["plan"] = {**data["plan"], "tool_selection": True, "tool_execution": True}
        return data

    @field_validator("query_type", mode="before")
    @classmethod
    def _query_type(cls, value: Any) -> Any:
        return one_of(
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
        return one_of(
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
        return one_of(
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
        return one_of(
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
            names = [v for v in value if not is_global(v)]
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
        value = distortion_lists(value, "plan distortions")
        return value or None

    @field_validator("excluded_tools", mode="before")
    @classmethod
    def _excluded_tools(cls, value: Any, info: ValidationInfo) -> Any:
        """Read names in any spelling, as a list or one string; drop (log) unknown ones: a tool the
        catalogue lacks cannot be run anyway."""
        if value is None or (isinstance(value, str) and _is_none(value)):
            return []
        names = _split_names(value)
        if not isinstance(names, list) or (
            isinstance(info.context, dict) and info.context.get("stored")
        ):
            return names
        kept = []
        for name in names:
            if isinstance(name, str) and name.strip() in configured_catalog():
                kept.append(configured_catalog().resolve(name.strip()))
            else:
                log.warning("plan: excluded tool %r is no tool of the catalogue; ignored", name)
        return list(dict.fromkeys(kept))

    @field_validator("uncatalogued_tools", mode="before")
    @classmethod
    def _uncatalogued_tools(cls, value: Any) -> Any:
        """Read names as a list or one string; anything else (a model's stray field) is none."""
        if value is None or (isinstance(value, str) and _is_none(value)):
            return []
        names = _split_names(value)
        if not isinstance(names, list):
            return []
        return [name.strip() for name in names if isinstance(name, str) and name.strip()]

    @field_validator("required_tool", mode="before")
    @classmethod
    def _blank_tool_is_none(cls, value: Any, info: ValidationInfo) -> Any:
        """Read a blank or "none" as no tool; a name the catalogue does not know is looked for as a
        tool inside the text ("the NIQE metric"), else dropped (logged): a model's wording must
        not void its plan, and a required tool is only ever a real one."""
        if not isinstance(value, str):
            return value
        value = value.strip()
        if _is_none(value):
            return None
        if isinstance(info.context, dict) and info.context.get("stored"):
            return value
        from ..query import catalogue_tool

        named = catalogue_tool(value, configured_catalog())
        if named is None and not _family(value):
            log.warning("plan: required_tool %r is no tool of the catalogue; ignored", value)
        return named


class PlannerError(StateModel):
    """A failed Planner attempt, with what the retry logic and a debugging human need."""

    error_type: Text = Field(description='"validation_error", "api_error" or "internal_error"')
    message: str = Field(description="what went wrong, for a human")
    details: dict[str, Any] | None = Field(default=None, description="extra context (JSON)")
    retry_count: int = Field(default=0, ge=0, description="retries attempted before this one")
    timestamp: UtcDatetime = Field(default_factory=utc_now, description="when it failed (UTC)")
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
