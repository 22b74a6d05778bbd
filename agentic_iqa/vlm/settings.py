"""Which VLM backend each role uses, from ``configs/model_backends.yaml`` and the environment.

Precedence, lowest first: the file's ``defaults`` section, the role's own section,
``AGENTIC_IQA_VLM_{BACKEND,MODEL,BASE_URL}`` (all roles), then ``AGENTIC_IQA_<ROLE>_<FIELD>`` for
any field (e.g. ``AGENTIC_IQA_SUMMARIZER_TEMPERATURE``). An empty variable sets the field to null.

Rate limits per backend+model (the ``limits`` section, :func:`load_rate_limits`) are read from
the same file, with ``AGENTIC_IQA_RATE_LIMIT_<FIELD>`` overriding every model's value.

The settings never hold an API key, only the *name* of the variable that holds it
(``api_key_env``); the key is read when a client is created, so settings can be logged, pickled
into Celery tasks and shown in errors without leaking it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentic_iqa.config import config_file
from iqa_tools.secret_env import file_given, read_variable, with_redis_password

from .base import Role, VLMConfigurationError

Backend = Literal["builtin", "openai", "anthropic"]

ROLES: tuple[Role, ...] = get_args(Role)

#: Key variable used when ``api_key_env`` is null.
DEFAULT_API_KEY_ENV: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}

#: Sent as the key to OpenAI-compatible local servers (vLLM, Ollama, LM Studio) that need none;
#: the SDK refuses to start without some key.
NO_KEY_PLACEHOLDER = "not-needed"

GLOBAL_ENV_FIELDS = ("backend", "model", "base_url", "follow_up")

#: The name the builtin backend answers as (``vlm.builtin.MODEL_NAME``): what a report names
#: for a builtin role, whatever model name was stored beside it.
BUILTIN_MODEL = "builtin-v1"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class BackendConfig(BaseModel):
    """How one role (planner, executor or summarizer) reaches its model."""

    # hide_input_in_errors: a key pasted into api_key_env by mistake must not be echoed back.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    backend: Backend = "builtin"
    model: str | None = Field(default=None, description="model name; required for remote backends")
    temperature: float | None = Field(
        default=0.0, ge=0.0, le=2.0, description="null: the server's default (not sent)"
    )
    base_url: str | None = Field(default=None, description="null: the vendor's public endpoint")
    api_key_env: str | None = Field(
        default=None, description="name of the variable holding the key; null: vendor default"
    )
    timeout: float = Field(
        default=120.0, gt=0, description="seconds per HTTP attempt in all, connect to last byte"
    )
    max_retries: int = Field(
        default=2, ge=0, description="SDK retries on 408/409/429/5xx (429: the limiter's)"
    )
    max_image_side: int = Field(default=1024, ge=16, description="longest side sent, in pixels")
    max_tokens: int = Field(default=4096, ge=1, description="upper bound on the reply's length")
    max_response_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="most bytes an answer's body may have, whatever max_tokens allows",
    )
    follow_up: bool | None = Field(
        default=None,
        description="after a reply that commits to no option readably, ask the model once "
        "more which option it chose (its reply quoted, no image); null: on for hosted models, "
        "off for builtin",
    )

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(
                "must be the NAME of an environment variable (letters, digits, _), not a key"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _usable_url(cls, value: str | None) -> str | None:
        """A base URL the SDKs can use: http(s), a host, a valid port, no fragment (its value
        is never echoed: it may hold a key)."""
        if value is None:
            return value
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - raises on a port that is not a number in range
        except ValueError:
            raise ValueError("not a URL (a bad port or bracket)") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// URL with a host, e.g. http://localhost:8000/v1"
            ) from None
        if parts.fragment:
            raise ValueError("must not have a #fragment") from None
        return value.strip()

    @model_validator(mode="after")
    def _remote_needs_model(self) -> BackendConfig:
        if self.backend != "builtin" and not self.model:
            raise ValueError(f"backend {self.backend!r} needs a model name")
        return self

    @property
    def answering_model(self) -> str | None:
        """The model that answers this role: the builtin's own for ``builtin`` (a model name
        stored beside it never ran), else ``model``."""
        return BUILTIN_MODEL if self.backend == "builtin" else self.model

    @property
    def asks_follow_up(self) -> bool:
        """Whether an unreadable multiple-choice reply is asked about once more: ``follow_up``
        as set, else on for a hosted model (the builtin's replies are always readable)."""
        return self.follow_up if self.follow_up is not None else self.backend != "builtin"

    @property
    def sdk_endpoint(self) -> tuple[str | None, dict[str, str]]:
        """``(base_url, default_query)`` for the SDKs: see :func:`split_base_url`."""
        return split_base_url(self.base_url)

    @property
    def key_variable(self) -> str | None:
        """The variable the key is read from (None for ``builtin``)."""
        return self.api_key_env or DEFAULT_API_KEY_ENV.get(self.backend)

    def read_api_key(self) -> str:
        """The key from the environment (or the file ``<variable>_FILE`` names), read now so it
        is never stored in the settings.

        OpenAI with a ``base_url`` (a local OpenAI-compatible server) may go without one.
        """
        variable = self.key_variable
        key = (read_variable(variable) or "") if variable else ""
        if key:
            return key
        if self.backend == "openai" and self.base_url:
            return NO_KEY_PLACEHOLDER
        raise VLMConfigurationError(
            f"{self.backend} backend: the API key variable {variable} is not set (or empty)"
        )


def split_base_url(url: str | None) -> tuple[str | None, dict[str, str]]:
    """A base URL as the SDKs take it: without its query string, whose parameters go to the
    SDK's ``default_query``; the values and password are registered with :mod:`..redact`.

    The SDKs append paths to the base URL as text: ``http://h/v1?key=K`` would be asked for
    ``/v1/?key=Kchat/completions``. Split, every request gets ``/v1/chat/completions?key=K``.
    """
    if not url:
        return url, {}
    from agentic_iqa.redact import register_secret

    parts = urlsplit(url)
    register_secret(parts.password)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    for value in query.values():
        register_secret(value)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), query


#: Model names that only one backend serves: OpenAI's (gpt-4o, chatgpt-4o-latest, o1, o3-mini,
#: o4-mini) and Anthropic's (claude-...).  Any other name (Qwen/Qwen2.5-VL-7B-Instruct, llava)
#: could be served by anything, so it never picks a backend.
_MODEL_BACKENDS: tuple[tuple[re.Pattern[str], Backend], ...] = (
    (re.compile(r"^(?:gpt-|chatgpt-|o\d+(?:-|$))", re.I), "openai"),
    (re.compile(r"^claude-", re.I), "anthropic"),
)


def backend_of_model(model: str) -> Backend | None:
    """The backend an unambiguous model name belongs to (see :data:`_MODEL_BACKENDS`), else
    None."""
    name = model.strip()
    return next((backend for pattern, backend in _MODEL_BACKENDS if pattern.match(name)), None)


def load_backend_configs(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    notes: list[str] | None = None,
) -> dict[Role, BackendConfig]:
    """One :class:`BackendConfig` per role; without a file every role uses ``builtin``.

    ``overrides`` (field -> value) apply to every role last, above the environment: the CLI's
    ``--backend``/``--model``/``--base-url``.

    A model named by ``--model`` or a variable where no flag or variable names the backend
    would be ignored by the builtin backend, and a job would report a model that never
    answered: the backend is then inferred from an unambiguous name (gpt-*, o1/o3/o4-*,
    chatgpt-*: openai; claude-*: anthropic), said in ``notes`` (else logged), or refused with
    :class:`VLMConfigurationError` naming ``--backend``."""
    explicit = path is not None
    source = Path(path) if path is not None else config_file("model_backends.yaml")
    document = _read_yaml(source, required=explicit)
    unknown = set(document) - {"defaults", "limits", *ROLES}
    if unknown:
        raise VLMConfigurationError(f"{source}: unknown sections {sorted(unknown)}")
    defaults = _section(document, "defaults", source)
    configs: dict[Role, BackendConfig] = {}
    for role in ROLES:
        values = {
            **defaults,
            **_section(document, role, source),
            **_env_overrides(role),
            **(overrides or {}),
        }
        if values.get("backend", "builtin") == "builtin" and values.get("model"):
            values["backend"] = _backend_for_model(
                role, str(values["model"]), overrides or {}, notes
            )
        try:
            configs[role] = BackendConfig(**values)
        except ValidationError as exc:
            raise VLMConfigurationError(
                f"{role} backend settings ({source} and AGENTIC_IQA_* variables): " + _describe(exc)
            ) from None
    return configs


def _origin(role: Role, field: str, overrides: Mapping[str, Any]) -> str | None:
    """Where a field's value came from: the flag, the variable, or None (the file)."""
    if field in overrides:
        return f"--{field.replace('_', '-')}"
    for variable in (
        f"AGENTIC_IQA_{role.upper()}_{field.upper()}",
        f"AGENTIC_IQA_VLM_{field.upper()}",
    ):
        if variable in os.environ:
            return variable
    return None


def _said(origin: str, value: str) -> str:
    """``--model gpt-4o`` or ``AGENTIC_IQA_VLM_MODEL=gpt-4o``: a value as it was given."""
    return f"{origin} {value}" if origin.startswith("--") else f"{origin}={value}"


def _backend_for_model(
    role: Role, model: str, overrides: Mapping[str, Any], notes: list[str] | None
) -> str:
    """The backend for a role whose backend is ``builtin`` and whose ``model`` is set.

    A model from the file beside ``backend: builtin`` stays as it is (the builtin ignores
    it, and reports name the builtin's own model).  A model from the flag or a variable was
    meant to answer: with the backend chosen as ``builtin`` by a flag or variable that is a
    contradiction; with no backend chosen, an unambiguous name picks it."""
    model_origin = _origin(role, "model", overrides)
    if model_origin is None:
        return "builtin"
    named = _said(model_origin, model)
    backend_origin = _origin(role, "backend", overrides)
    if backend_origin is not None:
        raise VLMConfigurationError(
            f"{named} with the builtin backend ({_said(backend_origin, 'builtin')}): the "
            "builtin answers from its own measurements and runs no model; give --backend "
            f"openai or --backend anthropic for {model}, or leave out {model_origin}"
        )
    inferred = backend_of_model(model)
    if inferred is None:
        flag = model_origin == "--model"
        raise VLMConfigurationError(
            f"{named} names no backend, and the builtin backend runs no model: "
            + (
                "add --backend openai (OpenAI, or an OpenAI-compatible server with --base-url) "
                "or --backend anthropic"
                if flag
                else "set AGENTIC_IQA_VLM_BACKEND=openai (OpenAI, or an OpenAI-compatible server "
                "with AGENTIC_IQA_VLM_BASE_URL) or anthropic"
            )
            + " (only gpt-*, o1/o3/o4-*, chatgpt-* and claude-* names choose one themselves)"
        )
    note = (
        f"note: {named} without "
        f"{'--backend' if model_origin == '--model' else 'AGENTIC_IQA_VLM_BACKEND'}: "
        f"using the {inferred} backend (from the model's name)"
    )
    if notes is None:
        import logging

        logging.getLogger(__name__).warning(note)
    elif note not in notes:
        notes.append(note)
    return inferred


def _read_yaml(source: Path, *, required: bool) -> dict[str, Any]:
    if not source.is_file():
        if required:
            raise VLMConfigurationError(f"backend configuration file not found: {source}")
        return {}
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise VLMConfigurationError(f"cannot read {source}: {exc}") from None
    if not isinstance(document, dict):
        raise VLMConfigurationError(f"{source}: expected a mapping of sections")
    return document


def _section(document: Mapping[str, Any], name: str, source: Path) -> dict[str, Any]:
    section = document.get(name) or {}
    if not isinstance(section, dict):
        raise VLMConfigurationError(f"{source}: section {name!r} must be a mapping")
    return dict(section)


def _env_overrides(role: Role) -> dict[str, Any]:
    """Global variables first, so the role's own variables win over them."""
    overrides: dict[str, Any] = {}
    names = [(f"AGENTIC_IQA_VLM_{field.upper()}", field) for field in GLOBAL_ENV_FIELDS]
    names += [(f"AGENTIC_IQA_{role.upper()}_{f.upper()}", f) for f in BackendConfig.model_fields]
    for variable, field in names:
        if field == "base_url" and file_given(variable):  # it may hold a key
            overrides[field] = (read_variable(variable) or "").strip() or None
        elif variable in os.environ:
            value = os.environ[variable].strip()
            overrides[field] = value if value else None
    return overrides


def _describe(exc: ValidationError) -> str:
    """Pydantic's errors without the offending values (one might be a key)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    )


class RateLimitConfig(BaseModel):
    """What one backend+model may be sent, by the whole fleet together (``limits`` section).

    The per-minute figures are enforced over windows of ``window_seconds``, scaled: 600
    requests/min with ``window_seconds: 10`` allows 100 per 10 s, which smooths bursts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int | None = Field(default=None, ge=1, description="null: no limit")
    tokens_per_minute: int | None = Field(
        default=None, ge=1, description="estimated tokens (prompt chars / 4 + images + max_tokens)"
    )
    max_concurrent: int | None = Field(default=None, ge=1, description="calls in flight at once")
    window_seconds: int = Field(default=60, ge=1, le=3600)
    tokens_per_image: int = Field(default=1000, ge=0, description="token estimate of one image")
    max_attempts: int = Field(default=5, ge=1, description="calls per request, 429 retries in")
    backoff_base: float = Field(default=1.0, gt=0, description="seconds; doubles per attempt")
    backoff_max: float = Field(default=60.0, gt=0, description="cap of one backoff, in seconds")
    max_wait: float = Field(
        default=120.0, gt=0, description="seconds a call may wait for its turn before failing"
    )
    slot_seconds: float | None = Field(
        default=None,
        gt=0,
        description="a concurrency slot expires after this (a killed process frees it); "
        "null: timeout x (max_retries + 1) + 30",
    )

    def per_window(self, per_minute: int) -> int:
        """The per-minute figure scaled to one window (at least 1)."""
        return max(1, per_minute * self.window_seconds // 60)


class RateLimits(BaseModel):
    """Rate limits of every backend+model, and where the fleet shares them."""

    model_config = ConfigDict(frozen=True)

    defaults: RateLimitConfig = RateLimitConfig()
    #: Keyed ``backend/model``, e.g. ``openai/gpt-4o``; merged over ``defaults``.
    models: dict[str, RateLimitConfig] = Field(default_factory=dict)
    #: Environment overrides (``AGENTIC_IQA_RATE_LIMIT_<FIELD>``), applied to every model.
    overrides: dict[str, Any] = Field(default_factory=dict)
    #: ``redis://...`` shared by every process, or ``memory://`` (this process only).
    storage_url: str = "memory://"
    key_prefix: str = "agentic_iqa:vlm"

    def for_model(self, backend: str, model: str | None) -> RateLimitConfig:
        values = self.defaults.model_dump(exclude_unset=True)
        specific = self.models.get(f"{backend}/{model}")
        if specific is not None:
            values.update(specific.model_dump(exclude_unset=True))
        values.update(self.overrides)
        return RateLimitConfig(**values)

    @property
    def shared(self) -> bool:
        return self.storage_url.startswith(("redis://", "rediss://", "unix://"))


def load_rate_limits(path: str | Path | None = None) -> RateLimits:
    """The ``limits`` section of ``model_backends.yaml`` plus environment overrides.

    Storage: ``AGENTIC_IQA_RATE_LIMIT_URL``, else the Celery broker when it is Redis (so every
    worker shares the limits), else in-process.
    """
    source = Path(path) if path is not None else config_file("model_backends.yaml")
    section = _section(_read_yaml(source, required=path is not None), "limits", source)
    defaults = section.pop("defaults", None) or {}
    prefix = "AGENTIC_IQA_RATE_LIMIT_"
    overrides: dict[str, Any] = {}
    for name in RateLimitConfig.model_fields:
        value = os.environ.get(prefix + name.upper())
        if value is not None:
            overrides[name] = value.strip() or None
    try:
        limits = RateLimits(
            defaults=RateLimitConfig(**defaults),
            models={key: RateLimitConfig(**(value or {})) for key, value in section.items()},
            overrides=RateLimitConfig(**overrides).model_dump(include=set(overrides)),
            storage_url=_rate_limit_storage(),
        )
    except (ValidationError, TypeError) as exc:
        detail = _describe(exc) if isinstance(exc, ValidationError) else str(exc)
        raise VLMConfigurationError(
            f"rate limits ({source} and {prefix}* variables): {detail}"
        ) from None
    return limits


def _rate_limit_storage() -> str:
    explicit = (read_variable("AGENTIC_IQA_RATE_LIMIT_URL") or "").strip()
    if explicit:
        return with_redis_password(explicit) or explicit
    from agentic_iqa.config import PipelineSettings

    broker = PipelineSettings.load().broker_url or ""
    return broker if broker.startswith(("redis://", "rediss://", "unix://")) else "memory://"


#: The providers' own endpoints, where a role without a ``base_url`` goes.
_VENDOR_HOSTS = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}


def endpoint_host(config: BackendConfig) -> str:
    """``host[:port]`` of the endpoint: no scheme, path, user or password."""
    if not config.base_url:
        return _VENDOR_HOSTS.get(config.backend, config.backend)
    parts = urlsplit(config.base_url)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port else host


def endpoint_key(config: BackendConfig) -> str:
    """The whole endpoint as a cache key names it: scheme, host, port and path (``/ok/v1`` and
    ``/ok2/v1`` on one host are two servers), never the user, password or query string."""
    if not config.base_url:
        return _VENDOR_HOSTS.get(config.backend, config.backend)
    parts = urlsplit(config.base_url)
    host = (parts.hostname or "").lower()
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme.lower()}://{host}{port}{parts.path.rstrip('/')}"
