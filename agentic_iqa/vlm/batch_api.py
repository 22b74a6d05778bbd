"""Send VLM requests in batches: the interface both providers' batch APIs keep, and its parts.

A batch costs half the online price and answers within 24 hours.  Each request in it is the
very body the online call sends, byte for byte: built by the online client's ``_parameters``
and written by the SDK's own ``create()`` into an HTTP client that keeps it instead of sending
it (:func:`offline_sdk`).  Each answer is read by the online client's ``response_from``, so a
batched call and an online call of the same request give the same :class:`~.base.VLMResponse`.
Reading an answer needs its request (the answer options, JSON or not), which the provider does
not return: :meth:`BatchAPI.results` takes the submitted requests by ``custom_id``.

The providers live behind one interface (:class:`BatchAPI`, made by
:func:`agentic_iqa.vlm.create_batch_api`): OpenAI's Batch API in :mod:`.openai_batch`,
Anthropic's Message Batches in :mod:`.anthropic_batch`; this module holds what they share (the
line, state and result types, the limits checked before anything is sent, the results the
provider said nothing about).

An errored request is *permanent* when the request itself is bad (HTTP 400, 401, 403, 404,
413, 422: the same request fails again in any batch) and transient otherwise (429, 5xx, an
overloaded model): :attr:`BatchResult.permanent`.  Creating a batch is never retried by the
SDK: a create that timed out may have created it, and a second try would pay for it twice;
the runtime recovers or re-sends it instead.

No SQLAlchemy and no Celery here: storing ids and polling belong to the job runtime.  SDK
errors become :class:`~.base.VLMError` subclasses with the key and URL secrets scrubbed, never
chained (the SDK exception holds the request headers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import httpx2

from .base import VLMError, VLMRequest, VLMResponse

#: Anthropic's rule for a request's ``custom_id``, used for both providers.
CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Keys of :attr:`BatchState.counts`.
COUNT_KEYS = ("total", "succeeded", "errored", "expired", "canceled", "processing")
#: How many of the newest batches :meth:`BatchAPI.recover` looks through, how many a page.
FIND_LOOKBACK = 1000
FIND_PAGE = 100
#: Seconds a provider's clock may run behind ours: an Anthropic batch created up to this long
#: before its row was written may still be that row's.
CLOCK_SKEW = 60.0
#: HTTP statuses of an errored request that are not about the request (a rate limit, a
#: timeout, a conflict): sent again in the next round; any other 4xx is the request's fault.
TRANSIENT_4XX = frozenset({408, 409, 425, 429})
#: Statuses of an endpoint that has no batch interface (vLLM, Ollama, a plain proxy).
NO_BATCHES = frozenset({404, 405, 501})
#: Room left under a provider's byte limit for what wraps the lines (JSON brackets, the
#: multipart envelope), so that lines summing to ``max_bytes`` always fit.
ENVELOPE = 64 * 1024

ResultKind = Literal["succeeded", "errored", "expired", "canceled"]


@dataclass(frozen=True)
class BatchLine:
    """One request of a batch, named so that its result can be matched to it."""

    custom_id: str
    request: VLMRequest

    def __post_init__(self) -> None:
        if not CUSTOM_ID.match(self.custom_id):
            raise ValueError(f"custom_id {self.custom_id!r} must match {CUSTOM_ID.pattern}")


@dataclass(frozen=True)
class BatchState:
    """A batch as the provider last described it."""

    provider_id: str
    #: The provider's own word: OpenAI "validating", "in_progress", "finalizing", "completed",
    #: "failed", "expired", "cancelling", "cancelled"; Anthropic "in_progress", "canceling",
    #: "ended".
    status: str
    #: No more work will happen; the results (if any) can be read.
    ended: bool
    #: "total", "succeeded", "errored", "expired", "canceled", "processing".
    counts: dict[str, int]
    expires_at: datetime | None
    #: Why the batch as a whole was rejected (OpenAI "failed"), scrubbed of secrets.
    error: str | None = None
    #: When the provider created it (by the provider's clock).
    created_at: datetime | None = None


@dataclass(frozen=True)
class BatchResult:
    """What came back for one request."""

    custom_id: str
    kind: ResultKind
    #: Set when ``kind == "succeeded"``.
    response: VLMResponse | None
    #: The provider's reason otherwise (scrubbed).
    error: str | None
    #: An errored request that is bad in itself (HTTP 400, 401, 403, 404, 422...): sending it
    #: again in a later batch fails the same way and costs a round.
    permanent: bool = False


def permanent_status(status: int | None) -> bool:
    """Tell whether an errored request's HTTP status says the request itself is bad."""
    return status is not None and 400 <= status < 500 and status not in TRANSIENT_4XX


class BatchAPI(Protocol):
    """One provider's batch interface, for one backend+model.

    ``submit`` refuses (ValueError, nothing sent) an empty batch, repeated custom_ids, more
    than ``max_requests`` lines or lines whose ``line_bytes`` sum past ``max_bytes``.
    ``results`` takes the submitted requests by custom_id (an answer is read as its online
    call's, which depends on the request) and yields one result per request, those the
    provider left out included.  ``recover`` finds a batch whose creation was never recorded
    (a crash between create and the commit of its id): by the ``metadata`` submitted with it
    (OpenAI), else by ``request_count`` among the batches created since ``created_after`` that
    are not ``taken`` (recorded already), the oldest first (Anthropic).
    ``close`` releases the HTTP clients.
    """

    backend: str
    model: str
    max_requests: int
    max_bytes: int

    def submit(self, lines: Sequence[BatchLine], *, metadata: Mapping[str, str]) -> BatchState: ...

    def retrieve(self, provider_id: str) -> BatchState: ...

    def results(
        self, provider_id: str, requests: Mapping[str, VLMRequest]
    ) -> Iterator[BatchResult]: ...

    def cancel(self, provider_id: str) -> BatchState: ...

    def find(self, key: str, value: str) -> BatchState | None: ...

    def recover(
        self,
        metadata: Mapping[str, str],
        *,
        created_after: datetime,
        request_count: int,
        taken: Collection[str],
    ) -> BatchState | None: ...

    def check_supported(self) -> None: ...

    def line_bytes(self, line: BatchLine) -> int: ...

    def close(self) -> None: ...


def encode_json(document: Any) -> bytes:
    """Encode JSON as the SDKs put it on the wire (compact, UTF-8), so sizes are counted exactly."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )


def check_lines(lines: Sequence[BatchLine], api: BatchAPI) -> None:
    """Refuse lines the caller should have split or deduplicated, before anything is sent.

    Such a batch is a bug there, not a provider error, and is refused before it is paid."""
    if not lines:
        raise ValueError("a batch needs at least one line")
    if len(lines) > api.max_requests:
        raise ValueError(
            f"{len(lines)} lines exceed the {api.backend} batch limit of "
            f"{api.max_requests} requests; split them"
        )
    ids = [line.custom_id for line in lines]
    if len(set(ids)) != len(ids):
        raise ValueError("custom_id values must be unique within a batch")


def check_size(size: int, api: BatchAPI) -> None:
    """Refuse a batch of ``size`` bytes (its lines' :meth:`BatchAPI.line_bytes`) over the limit."""
    if size > api.max_bytes:
        raise ValueError(
            f"{size} bytes exceed the {api.backend} batch limit of "
            f"{api.max_bytes} bytes; split them"
        )


def state_counts(**values: int) -> dict[str, int]:
    """Return :attr:`BatchState.counts` from the counts given, 0 for those not."""
    return {key: int(values.get(key, 0)) for key in COUNT_KEYS}


def to_utc(value: datetime | int | float | None) -> datetime | None:
    """Return ``value`` (a datetime or a Unix time) as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return datetime.fromtimestamp(value, UTC)


def offline_sdk(sdk: Any, kept: type[Exception]) -> Any:
    """Return a copy of ``sdk`` whose HTTP client sends nothing: each request's body comes back
    in ``kept``, so a batch line holds exactly what the online call would send."""

    def keep(request: httpx2.Request) -> httpx2.Response:
        raise kept(request.read())

    return sdk.with_options(
        http_client=httpx2.Client(transport=httpx2.MockTransport(keep)), max_retries=0
    )


def not_ended_error(state: BatchState) -> VLMError:
    """Return the error for reading the results of a batch that has not ended."""
    return VLMError(
        f"batch {state.provider_id} has not ended (status {state.status}); "
        "its results cannot be read yet"
    )


def unmatched_result(custom_id: str) -> BatchResult:
    """Return the errored result of a ``custom_id`` the batch did not name."""
    return BatchResult(
        custom_id,
        "errored",
        None,
        "the provider returned a result for a request this batch did not name",
    )


def unreported_results(
    requests: Mapping[str, VLMRequest], seen: set[str], kind: ResultKind, reason: str | None
) -> Iterator[BatchResult]:
    """Yield one result for each request the provider said nothing about."""
    for custom_id in requests:
        if custom_id not in seen:
            yield BatchResult(custom_id, kind, None, reason)
