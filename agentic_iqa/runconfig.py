"""How a job is run, stored with it: so that every item is answered the way it was submitted.

A job's numbers mean something only if every item was computed the same way.  So at submit the
configuration that shapes an answer is captured (:func:`capture`) and stored with the job in the
same transaction as its items: per role the backend, model, base URL and sampling settings (the
*name* of the key's variable, never a key; a base URL with credentials in it is stored masked),
the prompts' version and digest, the replanning bound, the tools' device, fallback chain and
catalogue (normalisations, precisions) digest, the caches and rate limits, the project version.

Whoever runs an item of the job (a worker, ``eval resume`` on another shell) builds its clients
and tools from that stored configuration, whatever its own environment says
(:func:`backend_configs`, :func:`tool_settings`).  Where it cannot honour it (no key for the
job's backend, other prompts or another tool catalogue: a stale worker) it says why
(:class:`CannotHonour`) and runs nothing: an item is never answered on something else.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from iqa_tools.secret_env import is_set
from iqa_tools.storage.access import AccessPolicy

from . import __version__
from .redact import redact
from .vlm.base import Role
from .vlm.settings import ROLES, BackendConfig, load_backend_configs, load_rate_limits

#: The text a stored base URL has in place of a credential (see :func:`stored_base_url`).
MASK = "***"


class CannotHonour(Exception):
    """This process cannot run a job's items as the job was submitted; the message says why
    and what to do.  Nothing is run: the item stays queued until a process that can picks it."""


class ToolsConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    device: str = "auto"
    fallback_chain: list[str] = Field(default_factory=list)
    #: Per tool the job may run (a metric job's tools; else the tools offered for selection
    #: and the fallbacks), a digest of its catalogue entry (normalisation, precision, factory):
    #: another entry gives other scores.  Tools the job never runs are not pinned.
    catalog: dict[str, str] = Field(default_factory=dict)
    #: Precision each of those tools computes in (from the catalogue), for the record.
    precision: dict[str, str] = Field(default_factory=dict)


class RunConfig(BaseModel):
    """What a job's items are computed with (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: str = __version__
    #: ``PROMPT_VERSION:digest`` of the prompt templates (agentic_iqa.vlm.cache).
    prompts: str = ""
    max_replan_iterations: int = 2
    roles: dict[str, BackendConfig] = Field(default_factory=dict)
    #: Per role, whether a key was set when the job was submitted (never the key itself): a
    #: job submitted with one needs one wherever it runs; a local server may need none.
    keyed: dict[str, bool] = Field(default_factory=dict)
    tools: ToolsConfig = ToolsConfig()
    vlm_cache: bool = True
    #: The rate limits in force at submit (for the record: limits are the fleet's).
    rate_limits: dict[str, Any] = Field(default_factory=dict)
    #: A metric job: its tools, and no VLM at all.
    metric_tools: list[str] | None = None
    #: The model calls go through the provider's batch interface, in rounds (``--batch``).
    batch: bool = False
    #: What the job's items may read (its ``--root``, ``--image-dir``, ``--allow-urls`` and
    #: allow-list): every worker reads them under it; None for a job stored before it was kept.
    access: AccessPolicy | None = None

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.model_validate_json(text)

    def describe(self) -> dict[str, Any]:
        """Return the configuration as a report shows it (credentials were never in it).

        A builtin role names the builtin's own model: a job stored by an older version with
        ``--model`` and no backend holds a model name beside ``builtin`` that never answered,
        and ``builtin_model_ignored`` says so without naming it."""
        document = self.model_dump(mode="json")
        if self.metric_tools:
            document.pop("roles", None)
            return document
        for role, config in self.roles.items():
            document["roles"][role]["model"] = config.answering_model
        document["builtin_model_ignored"] = any(
            c.backend == "builtin" and c.model not in (None, c.answering_model)
            for c in self.roles.values()
        )
        return document

    def backends(self) -> list[str]:
        """``backend/model`` of each distinct role configuration (the model that answers it),
        for one-line summaries."""
        return sorted(
            {
                f"{c.backend}/{c.answering_model}" if c.answering_model else c.backend
                for c in self.roles.values()
            }
        )


def prompts_version() -> str:
    from .vlm.cache import PROMPT_VERSION, prompts_digest

    return f"{PROMPT_VERSION}:{prompts_digest()[:16]}"


def tool_digests(settings: Any, tools: list[str] | None = None) -> dict[str, str]:
    """A digest of each tool's catalogue entry under these settings: ``tools`` (canonical
    names), else every default tool and the fallbacks."""
    catalog = _catalog(settings.metadata_path, tuple(settings.metadata_overrides))
    names = (
        tools
        if tools is not None
        else sorted({spec.name for spec in catalog if spec.default} | set(settings.fallback_chain))
    )
    digests = {}
    for name in names:
        spec = catalog.get(name)
        text = json.dumps(spec.model_dump(mode="json"), sort_keys=True, default=str)
        digests[spec.name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return digests


@functools.lru_cache(maxsize=8)
def _catalog(path: Any, overrides: tuple[Any, ...]) -> Any:
    from iqa_tools import load_catalog

    return load_catalog(path, list(overrides))


def stored_base_url(url: str | None) -> str | None:
    """The base URL as stored: credentials (a password, a key in the query) masked."""
    return redact(url) if url else url


def capture(
    *,
    max_replan_iterations: int,
    vlm_cache: bool,
    metric_tools: list[str] | None = None,
    roles: Mapping[Role, BackendConfig] | None = None,
    tool_settings: Any = None,
    batch: bool = False,
) -> RunConfig:
    """The configuration in force here and now (configs/*.yaml and ``AGENTIC_IQA_*``)."""
    from .config import load_tool_settings

    settings = tool_settings or load_tool_settings()
    digests = tool_digests(settings, list(metric_tools) if metric_tools else None)
    catalog = _catalog(settings.metadata_path, tuple(settings.metadata_overrides))
    precision = {name: catalog.get(name).precision for name in digests}
    configs = (
        dict(roles) if roles is not None else ({} if metric_tools else dict(load_backend_configs()))
    )
    stored: dict[str, BackendConfig] = {
        role: config.model_copy(update={"base_url": stored_base_url(config.base_url)})
        for role, config in configs.items()
    }
    keyed = {
        role: bool(config.key_variable and is_set(config.key_variable))
        for role, config in configs.items()
    }
    limits: dict[str, Any] = {}
    if not metric_tools:
        rate = load_rate_limits()
        limits = rate.model_dump(mode="json")
        limits["storage_url"] = redact(limits.get("storage_url"))
    return RunConfig(
        prompts=prompts_version(),
        max_replan_iterations=max_replan_iterations,
        roles=stored,
        keyed=keyed,
        tools=ToolsConfig(
            device=settings.device,
            fallback_chain=list(settings.fallback_chain),
            catalog=digests,
            precision=precision,
        ),
        vlm_cache=vlm_cache,
        rate_limits=limits,
        metric_tools=metric_tools,
        batch=batch,
    )


#: Role configurations this process was given by flags (``--base-url``): its environment as
#: much as its variables, so a local run honours a job whose stored URL masks their credential.
_FLAGGED_ROLES: dict[Role, BackendConfig] = {}


def hold_flagged_roles(roles: Mapping[Role, BackendConfig] | None) -> None:
    """Remember the roles the command line configured, for :func:`backend_configs` here."""
    _FLAGGED_ROLES.clear()
    _FLAGGED_ROLES.update(roles or {})


def backend_configs(config: RunConfig) -> dict[Role, BackendConfig]:
    """The job's role configurations, ready to build clients here; :class:`CannotHonour` when
    this process cannot (no key in the variable the job names; a masked base URL whose
    credential this environment does not hold)."""
    here: dict[Role, BackendConfig] | None = None
    resolved: dict[Role, BackendConfig] = {}
    for role in ROLES:
        wanted = config.roles.get(role)
        if wanted is None:
            raise CannotHonour(f"the job stores no backend for the {role}")
        if wanted.base_url and MASK in wanted.base_url:
            here = here if here is not None else {**load_backend_configs(), **_FLAGGED_ROLES}
            local = here.get(role)
            if local is None or stored_base_url(local.base_url) != wanted.base_url:
                raise CannotHonour(
                    f"the job's {role} base URL holds a credential ({wanted.base_url}) and this "
                    "environment's is not the same URL: set it (AGENTIC_IQA_VLM_BASE_URL) here"
                )
            wanted = wanted.model_copy(update={"base_url": local.base_url})
        if wanted.backend != "builtin":
            variable = wanted.key_variable
            missing = config.keyed.get(role) and not (variable and is_set(variable))
            try:
                wanted.read_api_key()
            except Exception:
                missing = True
            if missing:
                raise CannotHonour(
                    f"the job runs its {role} on {wanted.backend} ({wanted.model}) with a key, "
                    f"and {variable} is not set here: set it, or let a process that has it run "
                    "the job"
                )
        resolved[role] = wanted
    return resolved


def check_tools(config: RunConfig, settings: Any) -> Any:
    """Tool settings for the job's items here: the job's device and fallback chain; the same
    catalogue entries for the tools it runs, or :class:`CannotHonour` (another entry would give
    other scores: another version, other metadata overrides)."""
    wanted = config.tools.catalog
    try:
        here = tool_digests(settings, sorted(wanted)) if wanted else {}
    except Exception:  # a tool this process does not know at all
        here = {}
    differ = sorted(name for name, digest in wanted.items() if here.get(name) != digest)
    if differ:
        raise CannotHonour(
            f"this process's catalogue entries for {', '.join(differ)} are not the job's "
            "(another version of agentic-iqa or other metadata overrides): run the job where "
            "the tools are the ones it was submitted with"
        )
    return settings.model_copy(
        update={"device": config.tools.device, "fallback_chain": list(config.tools.fallback_chain)}
    )


def check_prompts(config: RunConfig) -> None:
    """:class:`CannotHonour` when this process's prompts are not the job's (a stale worker)."""
    here = prompts_version()
    if config.prompts and here != config.prompts:
        raise CannotHonour(
            f"this process's prompts ({here}) are not the job's ({config.prompts}): another "
            "version of agentic-iqa; upgrade (or downgrade) this worker"
        )


__all__ = [
    "MASK",
    "CannotHonour",
    "RunConfig",
    "ToolsConfig",
    "backend_configs",
    "capture",
    "check_prompts",
    "check_tools",
    "stored_base_url",
]
