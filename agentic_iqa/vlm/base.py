"""The one small interface every VLM backend implements, for all three roles.

A request carries both the prompt text (what a remote model reads) and the structured context it
was rendered from (what the offline ``builtin`` backend reasons over), so every backend answers the
same question and downstream code never knows which one ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["planner", "executor", "summarizer"]

#: What the request asks for; remote backends ignore it, the builtin backend dispatches on it.
Task = Literal[
    "plan",  # planner: query -> PlannerOutput JSON
    "distortion_detection",  # executor subtask
    "distortion_analysis",  # executor subtask
    "tool_selection",  # executor subtask
    "answer",  # summarizer, explanation mode: final answer + reasoning JSON
    "quality_levels",  # summarizer, scoring mode: pick one of five levels (logprobs)
    "answer_follow_up",  # summarizer: which option an unreadable reply chose (one letter)
]


class VLMError(Exception):
    """A backend could not produce an answer (after its own retries).

    ``status`` is the HTTP status when the server answered; ``retry_after`` the seconds it
    asked us to wait (a 429's ``Retry-After``), so a limiter can pause the model fleet-wide.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class TransientVLMError(VLMError):
    """A failure worth retrying later: timeout, connection error, HTTP 408/409/429/5xx."""


class FatalVLMError(VLMError):
    """The backend refuses requests like this one whatever the item: a bad key (401), no access
    (403), an unknown model or endpoint (404), a malformed request (400).  Neither a retry nor
    the next item will do better, so a job stops on it (see :mod:`agentic_iqa.jobs.policy`)
    with this one message instead of failing every item the same way."""


TRANSIENT_STATUS = frozenset({408, 409, 429})
FATAL_STATUS = frozenset({400, 401, 403, 404})


def is_transient_status(status: int | None) -> bool:
    return status is not None and (status in TRANSIENT_STATUS or status >= 500)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a server asked us to wait: ``retry-after-ms``, ``retry-after`` (seconds or an
    HTTP date); None when absent or unreadable."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    try:
        if "retry-after-ms" in lowered:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        if "retry-after" in lowered:
            value = lowered["retry-after"]
            try:
                return max(0.0, float(value))
            except ValueError:
                from datetime import UTC, datetime
                from email.utils import parsedate_to_datetime

                when = parsedate_to_datetime(value)
                return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def classify_sdk_error(
    exc: Exception,
    message: str,
    *,
    connection_error: type[Exception],
    status_error: type[Exception],
) -> VLMError:
    """Timeouts, lost connections and 408/409/429/5xx are worth retrying later; the rest not.

    ``message`` must already be free of secrets: the SDK exception is never chained.  The HTTP
    status and a ``Retry-After`` travel on the error.
    """
    if isinstance(exc, connection_error):  # the SDKs' timeout errors subclass it
        return TransientVLMError(message)
    status = getattr(exc, "status_code", None) if isinstance(exc, status_error) else None
    response = getattr(exc, "response", None)
    retry_after = retry_after_seconds(getattr(response, "headers", None))
    kind = (
        TransientVLMError
        if is_transient_status(status)
        else FatalVLMError
        if status in FATAL_STATUS
        else VLMError
    )
    return kind(message, status=status, retry_after=retry_after)


class VLMConfigurationError(FatalVLMError):
    """The backend is misconfigured (unknown backend, missing API key variable, bad base_url)."""


@dataclass(frozen=True)
class VLMRequest:
    task: Task
    system: str
    user: str
    #: Local paths, or objects' URLs (``s3://bucket/key``) kept as text.
    images: tuple[Path | str, ...] = ()
    #: The structured inputs the prompt was rendered from (query, distortion_set, tools ...).
    context: Mapping[str, Any] = field(default_factory=dict)
    #: Ask for a JSON object as the answer.
    json_output: bool = True
    #: Answer letters whose log-probabilities the caller wants (e.g. ("A", "B", "C", "D", "E")).
    answer_options: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Usage:
    """Tokens of one call as the SDK reports them (None: the server did not say)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Input tokens served from the provider's prompt cache (billed at a discount).
    cached_tokens: int | None = None


@dataclass(frozen=True)
class VLMResponse:
    text: str
    model: str
    #: Log-probability of each requested answer option, when the backend can give them.
    option_logprobs: dict[str, float] | None = None
    #: Where ``option_logprobs`` came from: "logprobs", or a named substitute.
    probability_source: str | None = None
    #: Tokens this call cost, when the backend reports them.
    usage: Usage | None = None
    #: True when the answer came from our response cache (no call was made).
    cached: bool = False
    #: Why the model stopped, in OpenAI's words: "stop", "length" (cut off at the token
    #: limit), "content_filter", "refusal"; None when the backend did not say.
    finish_reason: str | None = None
    #: The model's refusal message, when it declined to answer.
    refusal: str | None = None
    #: The provider's batch id when the answer came from a batch (``eval submit --batch``).
    batch: str | None = None


#: Finish reasons of a reply that stopped at the token limit (OpenAI's and Anthropic's words).
_CUT_OFF = frozenset({"length", "max_tokens"})


def was_cut_off(response: VLMResponse) -> bool:
    """The reply stopped at the token limit and was not refused: what it wrote is all there
    is, and an answer it had already committed to may still be read from it."""
    return (response.finish_reason or "").lower() in _CUT_OFF and not response.refusal


def reply_problem(response: VLMResponse) -> str | None:
    """What is wrong with a reply as a whole, before reading it: cut off at the token limit,
    blocked by a content filter, refused, or empty.  None for an ordinary reply."""
    reason = (response.finish_reason or "").lower()
    if response.refusal:
        return f"the model refused: {response.refusal[:200]!r}"
    if reason in {"content_filter", "content-filter", "safety"}:
        return "the reply was blocked by the provider's content filter"
    if reason == "refusal":
        return f"the model refused: {response.text[:200]!r}"
    if was_cut_off(response):
        return (
            f"the reply was cut off at the token limit ({len(response.text)} characters "
            f"came back: {response.text[:120]!r}); if it keeps happening, raise the role's "
            "max_tokens (configs/model_backends.yaml or AGENTIC_IQA_<ROLE>_MAX_TOKENS)"
        )
    if not response.text.strip():
        return "the reply was empty"
    return None


@runtime_checkable
class VLMClient(Protocol):
    """Anything that answers a :class:`VLMRequest`."""

    backend: str
    model: str

    def complete(self, request: VLMRequest) -> VLMResponse: ...


class ClientProxy:
    """A transparent wrapper around a backend client, like ``wrapt.ObjectProxy``.

    Attributes the wrapper does not define (``config``, ``close`` ...) come from the wrapped
    client, and ``isinstance(proxy, OpenAIClient)`` stays true, so callers that inspect the
    backend keep working whatever wraps it.
    """

    def __init__(self, inner: VLMClient) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.model = inner.model

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: D105
        return self.inner.__class__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def complete(self, request: VLMRequest) -> VLMResponse:
        return self.inner.complete(request)
