"""Hold what the clients over a provider's SDK share: the checked settings, the key, the 429
handover to the rate limiter, and errors worded without the key.

:class:`~.openai.OpenAIClient` and :class:`~.anthropic.AnthropicClient` subclass
:class:`SDKClient`; each opens its own SDK (:meth:`SDKClient._open_sdk`) and describes its own
errors (:meth:`SDKClient._describe`).  The Batch APIs (:mod:`.batch_api`) word their errors
through the same :meth:`SDKClient.sdk_error`.

Every call is bounded (:mod:`.deadline`): ``timeout`` seconds per attempt in all, connect to
last byte; a body of at most :func:`~.deadline.response_cap` bytes for its ``max_tokens``; and
the step's deadline where one is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from .base import VLMConfigurationError, VLMError, classify_sdk_error
from .deadline import (
    BoundedTransport,
    CallDeadlineExceeded,
    CallLimits,
    ResponseTooLarge,
    StepDeadlineReached,
    bounded_call,
    check_step_deadline,
    response_cap,
)
from .ratelimit import Handover429
from .settings import BackendConfig


class SDKClient:
    """Check a backend's settings, read its key and open its SDK client, for a subclass."""

    #: The backend name the settings must give (``openai``, ``anthropic``).
    backend: str
    #: The provider as messages name it (``OpenAI``).
    provider: ClassVar[str]
    #: What opening the SDK client may raise, reported as a :class:`VLMError`.
    creation_errors: ClassVar[tuple[type[Exception], ...]]
    #: The SDK's connection error and HTTP status error, for :func:`~.base.classify_sdk_error`.
    connection_error: ClassVar[type[Exception]]
    status_error: ClassVar[type[Exception]]

    def __init__(self, config: BackendConfig) -> None:
        if config.backend != self.backend or not config.model:
            raise VLMConfigurationError(
                f"{type(self).__name__} needs an {self.backend} config: {config}"
            )
        self.config = config
        self.model = config.model
        self._api_key = config.read_api_key()
        # Behind the rate limiter a 429 skips the SDK's retries and pauses the fleet instead.
        self.handover_429 = Handover429()
        try:
            self._client = self._open_sdk()
        except self.creation_errors as exc:
            raise VLMError(self.scrub(f"cannot create the {self.provider} client: {exc}")) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.config.base_url!r})"

    @property
    def sdk(self) -> Any:
        """Return the SDK client itself (the Batch APIs send through it)."""
        return self._client

    def close(self) -> None:
        """Close the SDK client's connections."""
        self._client.close()

    def transport(self, limits: Any) -> BoundedTransport:
        """The SDK client's transport: httpx's, each call bounded (:mod:`.deadline`)."""
        return BoundedTransport(limits=limits)

    @contextmanager
    def bounded(self, max_tokens: int) -> Iterator[CallLimits]:
        """Bound the SDK call made in this block: ``timeout`` seconds per attempt in all, a
        body of at most :func:`~.deadline.response_cap` bytes for ``max_tokens``, and the
        step's deadline (whose error is raised here, past the SDK's retries)."""
        check_step_deadline()
        absolute = self.config.max_response_bytes
        limits = CallLimits(
            seconds=self.config.timeout,
            max_bytes=response_cap(max_tokens, absolute),
            max_tokens=max_tokens,
            absolute=absolute,
        )
        try:
            with bounded_call(limits):
                yield limits
        except StepDeadlineReached as reached:
            raise reached.error from None

    def _open_sdk(self) -> Any:
        """Open the SDK client with this backend's key, endpoint, timeout and retries."""
        raise NotImplementedError

    def _describe(self, exc: Exception) -> str:
        """Describe a failed request: the model, the endpoint, the status or the timeout."""
        raise NotImplementedError

    def scrub(self, message: str) -> str:
        """Mask the key, query values and any Authorization in ``message``.

        Servers quote the key in errors ("Incorrect API key provided: ..."), and echo the
        request's path and headers."""
        from agentic_iqa.redact import redact

        text = message.replace(self._api_key, "***") if self._api_key else message
        return redact(text) or text

    def sdk_error(self, exc: Exception, what: str | None = None) -> VLMError:
        """Return the :class:`VLMError` for an SDK exception, scrubbed; ``what`` prefixes it."""
        message = self._describe(exc)
        if isinstance(bound_cause(exc), ResponseTooLarge):  # neither transient nor fatal
            return VLMError(self.scrub(f"{what}: {message}" if what else message))
        return classify_sdk_error(
            exc,
            self.scrub(f"{what}: {message}" if what else message),
            connection_error=self.connection_error,
            status_error=self.status_error,
        )


def bound_cause(exc: BaseException) -> CallDeadlineExceeded | ResponseTooLarge | None:
    """The deadline or cap (:mod:`.deadline`) behind an SDK error, if one is: the SDKs raise
    their own error from it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, CallDeadlineExceeded | ResponseTooLarge):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
