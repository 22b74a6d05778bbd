"""Check a backend before anything is stored: the key, the endpoint, the model; and a probe.

A job submitted with a missing key used to fail every item with the same traceback; a typo in
a model name, every item with a 404.  :func:`preflight` asks each configured endpoint once, with
the SDK the backend uses, which models it serves: a missing key, an endpoint that does not
answer, a key it refuses or a model it does not serve is one line saying what to set, before
any job or run row exists.  An endpoint that lists no models (some compatible servers) is not
held against it.  :func:`probe` goes further for ``agentic-iqa check``: one tiny request, and
what came back (model, log-probabilities, latency).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..redact import redact
from .base import Role, VLMConfigurationError, VLMError, VLMRequest
from .settings import BackendConfig

#: Seconds to wait for an endpoint's model list.
TIMEOUT = 5.0


@dataclass(frozen=True)
class Endpoint:
    """What the model list said: reachable, and the models it serves (None: not listed)."""

    backend: str
    where: str
    models: tuple[str, ...] | None


def _where(config: BackendConfig) -> str:
    default = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}
    return redact(config.base_url) or default.get(config.backend, config.backend) or ""


def list_models(config: BackendConfig, *, timeout: float = TIMEOUT) -> Endpoint:
    """The endpoint's model list; :class:`VLMConfigurationError` when the key is missing or
    refused or the endpoint does not answer."""
    key = config.read_api_key()  # a missing key: VLMConfigurationError saying which variable
    where = _where(config)
    base_url, default_query = config.sdk_endpoint  # a ?key= goes to every request's query
    try:
        if config.backend == "openai":
            import openai

            client: Any = openai.OpenAI(
                api_key=key,
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                default_query=default_query or None,
            )
            errors: tuple[type[Exception], ...] = (openai.APIConnectionError,)
            status_error: type[Exception] = openai.APIStatusError
        else:
            import anthropic

            client = anthropic.Anthropic(
                api_key=key,
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                default_query=default_query or None,
            )
            errors, status_error = (anthropic.APIConnectionError,), anthropic.APIStatusError
    except Exception as exc:
        raise VLMConfigurationError(
            redact(f"{config.backend}: cannot create a client for {where}: {exc}") or ""
        ) from None
    try:
        page = client.models.list()
        models = tuple(sorted({getattr(model, "id", "") for model in page} - {""}))
    except errors as exc:
        raise VLMConfigurationError(
            f"{config.backend}: cannot reach {where} ({type(exc).__name__}); check the base "
            "URL (AGENTIC_IQA_VLM_BASE_URL) and that the server is up"
        ) from None
    except status_error as exc:
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            raise VLMConfigurationError(
                f"{config.backend}: {where} refused the key in {config.key_variable} "
                f"(HTTP {status}); set a valid key"
            ) from None
        return Endpoint(config.backend, where, None)  # no model list here: not checked
    finally:
        client.close()
    return Endpoint(config.backend, where, models or None)


def preflight(configs: Mapping[Role, BackendConfig], *, timeout: float = TIMEOUT) -> None:
    """Every remote role's key, endpoint and model, each endpoint asked once; one
    :class:`VLMConfigurationError` line for the first problem."""
    seen: dict[tuple[Any, ...], Endpoint] = {}
    for role, config in configs.items():
        if config.backend == "builtin":
            continue
        if not config.model:
            raise VLMConfigurationError(
                f"{role}: the {config.backend} backend needs a model "
                "(--model or AGENTIC_IQA_VLM_MODEL)"
            )
        key = (config.backend, config.base_url, config.key_variable)
        if key not in seen:
            seen[key] = list_models(config, timeout=timeout)
        endpoint = seen[key]
        if endpoint.models is not None and config.model not in endpoint.models:
            shown = ", ".join(endpoint.models[:8]) + (" ..." if len(endpoint.models) > 8 else "")
            raise VLMConfigurationError(
                f"{role}: {endpoint.where} does not serve the model {config.model!r} (it "
                f"serves: {shown}); set --model or AGENTIC_IQA_VLM_MODEL"
            )


@dataclass(frozen=True)
class Probe:
    role: str
    backend: str
    model: str | None
    where: str
    ok: bool
    answered_model: str | None = None
    reply: str | None = None
    logprobs: bool | None = None
    latency_s: float | None = None
    error: str | None = None


def probe(role: Role, config: BackendConfig) -> Probe:
    """One tiny request (answer with a letter, log-probabilities asked for) and what came back."""
    from . import create_client

    where = _where(config)
    if config.backend == "builtin":
        return Probe(role, "builtin", None, "this process", True, reply="(offline: no request)")
    try:
        preflight({role: config})
        client = create_client(role, {role: config}, response_cache=None)
        request = VLMRequest(
            task="quality_levels",
            system="Answer with one letter only.",
            user="Reply with the letter A.",
            json_output=False,
            answer_options=("A", "B"),
        )
        started = time.perf_counter()
        response = client.complete(request)
        latency = time.perf_counter() - started
    except (VLMError, OSError) as exc:
        return Probe(role, config.backend, config.model, where, False, error=redact(str(exc)))
    return Probe(
        role,
        config.backend,
        config.model,
        where,
        True,
        answered_model=response.model,
        reply=response.text[:40],
        logprobs=response.probability_source == "logprobs",
        latency_s=latency,
    )


__all__ = ["Endpoint", "Probe", "list_models", "preflight", "probe"]
