"""Ask a vision-language model: one interface over OpenAI, Anthropic and a builtin backend.

:func:`create_client` picks the client a role is configured for, :func:`create_batch_api` the
batch interface of a remote backend.  Where each thing happens:

* :mod:`.base`: the request, the response, the client protocol and the errors;
  :mod:`.settings`: the backends' settings (``configs/model_backends.yaml`` and the
  environment).
* :mod:`.openai`, :mod:`.anthropic`: the online clients over each SDK, sharing
  :class:`~.sdk.SDKClient` (:mod:`.sdk`); :mod:`.builtin`: the local, free backend;
  :mod:`.images`: images as the requests carry them.
* :mod:`.batch_api` (the interface), :mod:`.openai_batch`, :mod:`.anthropic_batch`: the
  providers' batch APIs; :mod:`.batching`: a client whose calls are answered by batches.
* :mod:`.ratelimit`, :mod:`.cache`, :mod:`.usage`: the wrappers (the fleet's rate limits, the
  response cache, usage and latency); :mod:`.preflight`: checking a backend before a run.

SDKs are imported only when their backend is chosen, so a worker running the ``builtin`` backend
never loads ``openai`` or ``anthropic``.

A remote backend's client comes wrapped: a :class:`~.usage.RecordingClient` (usage and latency
of each call, for the step's collector) around a :class:`~.cache.CachingClient` when its
requests are deterministic and the response cache is on, around a
:class:`~.ratelimit.RateLimitedClient` (the fleet-wide limits of its backend and model). All
are transparent proxies, so ``isinstance(client, OpenAIClient)`` and ``client.config`` still
work. The builtin backend is neither cached nor recorded: it is local, deterministic and free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import Role, Task, VLMClient, VLMConfigurationError, VLMError, VLMRequest, VLMResponse
from .cache import CachingClient, ResponseCache, default_cache, is_deterministic
from .settings import ROLES, BackendConfig, load_backend_configs
from .usage import RecordingClient

if TYPE_CHECKING:
    from .batch_api import BatchAPI

__all__ = [
    "BackendConfig",
    "Role",
    "Task",
    "VLMClient",
    "VLMConfigurationError",
    "VLMError",
    "VLMRequest",
    "VLMResponse",
    "create_batch_api",
    "create_client",
    "load_backend_configs",
]


#: ``response_cache`` default: the configured cache (``vlm_cache``, ``tool_cache``).
CONFIGURED: Any = object()


def create_client(
    role: Role,
    configs: Mapping[Role, BackendConfig] | None = None,
    *,
    response_cache: ResponseCache | None = CONFIGURED,
    batch: bool = False,
) -> VLMClient:
    """Return the client for ``role``, from ``configs`` or ``configs/model_backends.yaml`` + env.

    ``response_cache``: None turns the response cache off for this client.  ``batch``: its
    calls are answered by provider batches (:mod:`.batching`) instead of online calls.
    """
    client = _backend_client(role, configs)
    if client.backend == "builtin":
        return client
    if batch:  # batches have their own, higher limits: the online limiter does not apply
        from .batching import BatchingClient

        client = BatchingClient(client, role)
    else:
        # ``limits`` (and its storage backends) load only for a remote backend: ``eval
        # status`` imports this package for the usage tables and sends no request.
        from .ratelimit import rate_limited

        # Innermost, so that a cache hit takes no turn of the fleet's rate limit.
        client = rate_limited(client)
    config: BackendConfig = client.config  # type: ignore[attr-defined]
    if is_deterministic(config):
        cache = default_cache() if response_cache is CONFIGURED else response_cache
        if cache is not None:
            client = CachingClient(client, cache, config)
    return RecordingClient(client, role)


def create_batch_api(config: BackendConfig) -> BatchAPI:
    """Return the batch interface of ``config``'s backend (a bare client: no cache, no rate
    limiter, which meter online calls)."""
    if config.backend == "openai":
        from .openai import OpenAIClient
        from .openai_batch import OpenAIBatchAPI

        return OpenAIBatchAPI(OpenAIClient(config))
    if config.backend == "anthropic":
        from .anthropic import AnthropicClient
        from .anthropic_batch import AnthropicBatchAPI

        return AnthropicBatchAPI(AnthropicClient(config))
    raise VLMConfigurationError(
        f"{config.backend} has no batch interface: it is local and free; drop --batch"
    )


def _backend_client(role: Role, configs: Mapping[Role, BackendConfig] | None) -> VLMClient:
    if role not in ROLES:
        raise VLMConfigurationError(f"unknown role {role!r}; expected one of {list(ROLES)}")
    if configs is None:
        configs = load_backend_configs()
    if role not in configs:
        raise VLMConfigurationError(f"no backend configuration for role {role!r}")
    config = configs[role]
    if config.backend == "openai":
        from .openai import OpenAIClient

        return OpenAIClient(config)
    if config.backend == "anthropic":
        from .anthropic import AnthropicClient

        return AnthropicClient(config)
    if config.backend == "builtin":
        from .builtin import BuiltinClient

        return BuiltinClient(config)
    raise VLMConfigurationError(f"unknown backend {config.backend!r} for role {role!r}")
