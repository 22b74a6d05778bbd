"""VLM backends behind one interface; :func:`create_client` picks the one a role is configured for.

SDKs are imported only when their backend is chosen, so a worker running the ``builtin`` backend
never loads ``openai`` or ``anthropic``.

A remote backend's client comes wrapped: a :class:`~.usage.RecordingClient` (usage and latency
of each call, for the step's collector) around a :class:`~.cache.CachingClient` when its
requests are deterministic and the response cache is on, around a
:class:`~.ratelimit.RateLimitedClient` (the fleet-wide limits of its backend and model). All
are transparent proxies, so ``isinstance(client, OpenAIClient)`` and ``client.config`` still
work. The builtin backend is
neither cached nor recorded: it is local, deterministic and free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Role, Task, VLMClient, VLMConfigurationError, VLMError, VLMRequest, VLMResponse
from .cache import CachingClient, ResponseCache, default_cache, is_deterministic
from .settings import ROLES, BackendConfig, load_backend_configs
from .usage import RecordingClient

__all__ = [
    "BackendConfig",
    "Role",
    "Task",
    "VLMClient",
    "VLMConfigurationError",
    "VLMError",
    "VLMRequest",
    "VLMResponse",
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
    """The client for ``role``, from ``configs`` or else ``configs/model_backends.yaml`` + env.

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
