"""VLM backends behind one interface; :func:`create_client` picks the one a role is configured for.

SDKs are imported only when their backend is chosen, so a worker running the ``builtin`` backend
never loads ``openai`` or ``anthropic``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import Role, Task, VLMClient, VLMConfigurationError, VLMError, VLMRequest, VLMResponse
from .settings import ROLES, BackendConfig, load_backend_configs

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


def create_client(role: Role, configs: Mapping[Role, BackendConfig] | None = None) -> VLMClient:
    """The client for ``role``, from ``configs`` or else ``configs/model_backends.yaml`` + env."""
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
