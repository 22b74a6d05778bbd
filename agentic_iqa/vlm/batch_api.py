"""The providers' batch interfaces: OpenAI's Batch API and Anthropic's Message Batches.

A batch costs half the online price and answers within 24 hours.  Each request in it is the
very body the online call sends, byte for byte: built by the online client's ``_parameters``
and written by the SDK's own ``create()`` into an HTTP client that keeps it instead of sending
it.  Each answer is read by the online client's ``response_from``, so a batched call and an
online call of the same request give the same :class:`~.base.VLMResponse`.  Reading an answer
needs its request (the answer options, JSON or not), which the provider does not return:
:meth:`BatchAPI.results` takes the submitted requests by ``custom_id``.

Provider differences kept behind one interface (:class:`BatchAPI`):

* OpenAI takes a JSONL file (``files.create(purpose="batch")``) and returns an output file and
  an error file; a request missing from both after an ``expired``/``cancelled`` batch was never
  run.  Batches carry ``metadata``, so :meth:`BatchAPI.recover` finds one created just
  before a crash by our id in it.
* Anthropic takes the requests in the create call and streams one result per request.  Its
  batches carry no metadata and its list shows no custom_id: :meth:`BatchAPI.recover` finds a
  batch created just before a crash by its creation time and request count (the runtime then
  checks its results' custom_ids, which name our batch, before using them).

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
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

import anthropic
import httpx2
import openai

from .base import VLMConfigurationError, VLMError, VLMRequest, VLMResponse
from .settings import BackendConfig

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
_TRANSIENT_4XX = frozenset({408, 409, 425, 429})
#: Anthropic's error types of a request that fails again however often it is sent.
_ANTHROPIC_PERMANENT = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
    }
)
#: Statuses of an endpoint that has no batch interface (vLLM, Ollama, a plain proxy).
_NO_BATCHES = frozenset({404, 405, 501})
#: Room left under a provider's byte limit for what wraps the lines (JSON brackets, the
#: multipart envelope), so that lines summing to ``max_bytes`` always fit.
_ENVELOPE = 64 * 1024

ResultKind = Literal["succeeded", "errored", "expired", "canceled"]
_T = TypeVar("_T")


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
    """Whether an errored request's HTTP status says the request itself is bad."""
    return status is not None and 400 <= status < 500 and status not in _TRANSIENT_4XX


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


def batch_api(config: BackendConfig) -> BatchAPI:
    """The batch interface of ``config``'s backend (a bare client: no cache, no rate limiter,
    which meter online calls)."""
    if config.backend == "openai":
        from .openai import OpenAIClient

        return OpenAIBatchAPI(OpenAIClient(config))
    if config.backend == "anthropic":
        from .anthropic import AnthropicClient

        return AnthropicBatchAPI(AnthropicClient(config))
    raise VLMConfigurationError(
        f"{config.backend} has no batch interface: it is local and free; drop --batch"
    )


def encode_json(document: Any) -> bytes:
    """JSON as the SDKs put it on the wire (compact, UTF-8), so sizes are counted exactly."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )


# -- shared helpers ------------------------------------------------------------------------------


def _check_lines(lines: Sequence[BatchLine], api: BatchAPI) -> None:
    """A batch the caller should have split or deduplicated is a bug there, not a provider
    error: refused before anything is sent (or paid)."""
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


def _check_size(size: int, api: BatchAPI) -> None:
    """``size``: the sum of the lines' :meth:`BatchAPI.line_bytes`, as rendered."""
    if size > api.max_bytes:
        raise ValueError(
            f"{size} bytes exceed the {api.backend} batch limit of "
            f"{api.max_bytes} bytes; split them"
        )


def _counts(**values: int) -> dict[str, int]:
    return {key: int(values.get(key, 0)) for key in COUNT_KEYS}


def _utc(value: datetime | int | float | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return datetime.fromtimestamp(value, UTC)


class _OpenAIKept(openai.OpenAIError):
    """Raised by the capturing transport; the SDK passes its own errors on unretried."""

    def __init__(self, body: bytes) -> None:
        super().__init__("request kept, not sent")
        self.body = body


class _AnthropicKept(anthropic.AnthropicError):
    """Raised by the capturing transport; the SDK passes its own errors on unretried."""

    def __init__(self, body: bytes) -> None:
        super().__init__("request kept, not sent")
        self.body = body


def _offline_sdk(sdk: Any, kept: type[_OpenAIKept | _AnthropicKept]) -> Any:
    """A copy of ``sdk`` whose HTTP client sends nothing: each request's body comes back
    in ``kept``, so a batch line holds exactly what the online call would send."""

    def keep(request: httpx2.Request) -> httpx2.Response:
        raise kept(request.read())

    return sdk.with_options(
        http_client=httpx2.Client(transport=httpx2.MockTransport(keep)), max_retries=0
    )


def _not_ended(state: BatchState) -> VLMError:
    return VLMError(
        f"batch {state.provider_id} has not ended (status {state.status}); "
        "its results cannot be read yet"
    )


def _unmatched(custom_id: str) -> BatchResult:
    return BatchResult(
        custom_id,
        "errored",
        None,
        "the provider returned a result for a request this batch did not name",
    )


def _rest(
    requests: Mapping[str, VLMRequest], seen: set[str], kind: ResultKind, reason: str | None
) -> Iterator[BatchResult]:
    """One result for each request the provider said nothing about."""
    for custom_id in requests:
        if custom_id not in seen:
            yield BatchResult(custom_id, kind, None, reason)


# -- OpenAI --------------------------------------------------------------------------------------

#: Statuses after which an OpenAI batch does no more work.
_OPENAI_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
#: Error codes OpenAI gives requests its batch never ran.
_OPENAI_UNRUN: dict[str, ResultKind] = {"batch_expired": "expired", "batch_cancelled": "canceled"}
_CHAT_ENDPOINT = "/v1/chat/completions"


class OpenAIBatchAPI:
    """OpenAI's Batch API over the online client's SDK object (same endpoint, key, timeout,
    retries)."""

    backend = "openai"
    max_requests = 50_000
    #: The input file's 200 MB, less the room for the multipart envelope.
    max_bytes = 200_000_000 - _ENVELOPE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.model: str = client.model
        self._sdk = client._client
        self._offline = _offline_sdk(self._sdk, _OpenAIKept)
        #: For the create call: a retry after a timeout could create a second batch.
        self._once = self._sdk.with_options(max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIBatchAPI({self.client!r})"

    def close(self) -> None:
        self._offline.close()
        self.client.close()

    def line_bytes(self, line: BatchLine) -> int:
        """The line's length in the input file.  Counted on our own JSON of the body: the
        SDK writes the same text in another key order, and is far slower to ask."""
        return len(self._line(line, encode_json(self.client._parameters(line.request))))

    def _encode(self, line: BatchLine) -> bytes:
        """One JSONL line of the input file, holding the online call's body as its bytes."""
        return self._line(line, self._online_body(line.request))

    def _line(self, line: BatchLine, body: bytes) -> bytes:
        head = encode_json({"custom_id": line.custom_id, "method": "POST", "url": _CHAT_ENDPOINT})
        return head[:-1] + b',"body":' + body + b"}\n"

    def _online_body(self, request: VLMRequest) -> bytes:
        """The body the online ``complete()`` sends for ``request``, as the SDK writes it
        (key order included, so the batch line holds the same bytes)."""
        parameters = self.client._parameters(request)
        try:
            self._offline.chat.completions.create(**parameters)
        except _OpenAIKept as kept:
            return kept.body
        except openai.OpenAIError as exc:
            raise self._error("writing a batch line", exc) from None
        raise VLMError("the OpenAI SDK wrote no request")  # pragma: no cover

    def submit(self, lines: Sequence[BatchLine], *, metadata: Mapping[str, str]) -> BatchState:
        _check_lines(lines, self)
        data = b"".join(self._encode(line) for line in lines)
        _check_size(len(data), self)
        name = f"agentic-iqa-{uuid.uuid4().hex}.jsonl"
        uploaded = self._call(
            "uploading the batch file",
            lambda: self._sdk.files.create(file=(name, data, "application/jsonl"), purpose="batch"),
        )
        batch = self._call(
            "creating the batch",
            lambda: self._once.batches.create(
                input_file_id=uploaded.id,
                endpoint=_CHAT_ENDPOINT,
                completion_window="24h",
                metadata=dict(metadata),
            ),
        )
        return self._state(batch)

    def retrieve(self, provider_id: str) -> BatchState:
        return self._state(self._batch(provider_id))

    def cancel(self, provider_id: str) -> BatchState:
        return self._state(
            self._call(
                f"cancelling batch {provider_id}", lambda: self._sdk.batches.cancel(provider_id)
            )
        )

    def find(self, key: str, value: str) -> BatchState | None:
        """The newest of the last :data:`FIND_LOOKBACK` batches whose ``metadata[key]`` is
        ``value``."""

        def search() -> Any:
            for seen, batch in enumerate(self._sdk.batches.list(limit=FIND_PAGE)):
                if seen >= FIND_LOOKBACK:
                    return None
                if (batch.metadata or {}).get(key) == value:
                    return batch
            return None

        found = self._call("listing batches", search)
        return None if found is None else self._state(found)

    def recover(
        self,
        metadata: Mapping[str, str],
        *,
        created_after: datetime,
        request_count: int,
        taken: Collection[str],
    ) -> BatchState | None:
        """By the metadata sent with it (exact: our batch id is in it)."""
        key, value = next(iter(metadata.items()))
        found = self.find(key, value)
        return None if found is None or found.provider_id in taken else found

    def check_supported(self) -> None:
        try:
            self._sdk.batches.list(limit=1)
        except openai.APIStatusError as exc:
            if exc.status_code in _NO_BATCHES:
                where = self.client.config.base_url or "api.openai.com"
                raise VLMConfigurationError(
                    self.client._scrub(
                        f"{where} has no batch interface (GET /v1/batches answered HTTP "
                        f"{exc.status_code}); drop --batch to send the calls one by one"
                    )
                ) from None
            raise self._error("checking the batch interface", exc) from None
        except openai.OpenAIError as exc:
            raise self._error("checking the batch interface", exc) from None

    def results(
        self, provider_id: str, requests: Mapping[str, VLMRequest]
    ) -> Iterator[BatchResult]:
        batch = self._batch(provider_id)
        state = self._state(batch)
        if not state.ended:
            raise _not_ended(state)
        seen: set[str] = set()
        for file_id in (batch.output_file_id, batch.error_file_id):
            for line in self._lines(file_id):
                result = self._result(line, requests)
                seen.add(result.custom_id)
                yield result
        if batch.status == "failed":
            yield from _rest(requests, seen, "errored", state.error)
        elif batch.status in ("expired", "cancelled"):
            kind: ResultKind = "expired" if batch.status == "expired" else "canceled"
            yield from _rest(requests, seen, kind, None)
        else:
            yield from _rest(requests, seen, "errored", "missing from the batch's output")

    def _lines(self, file_id: str | None) -> Iterator[dict[str, Any]]:
        if not file_id:
            return
        text = self._call(f"reading file {file_id}", lambda: self._sdk.files.content(file_id).text)
        for number, row in enumerate(text.splitlines(), start=1):
            if not row.strip():
                continue
            try:
                yield json.loads(row)
            except json.JSONDecodeError:
                raise VLMError(f"line {number} of batch file {file_id} is not JSON") from None

    def _result(self, line: Mapping[str, Any], requests: Mapping[str, VLMRequest]) -> BatchResult:
        from openai.types.chat import ChatCompletion

        custom_id = str(line.get("custom_id"))
        request = requests.get(custom_id)
        if request is None:
            return _unmatched(custom_id)
        response = line.get("response") or {}
        error = line.get("error") or {}
        body = response.get("body") or {}
        if not error and response.get("status_code") == 200:
            try:
                completion = ChatCompletion.model_validate(body)
                return BatchResult(
                    custom_id, "succeeded", self.client.response_from(completion, request), None
                )
            except (VLMError, ValueError) as exc:
                return BatchResult(custom_id, "errored", None, self.client._scrub(str(exc)))
        if not error and isinstance(body, dict):
            error = body.get("error") or {}
        kind = _OPENAI_UNRUN.get(str(error.get("code")), "errored")
        status = response.get("status_code")
        message = error.get("message") or "no reason given"
        reason = f"HTTP {status}: {message}" if status else str(message)
        return BatchResult(
            custom_id,
            kind,
            None,
            self.client._scrub(reason),
            permanent=kind == "errored" and permanent_status(status),
        )

    def _batch(self, provider_id: str) -> Any:
        return self._call(
            f"reading batch {provider_id}", lambda: self._sdk.batches.retrieve(provider_id)
        )

    def _state(self, batch: Any) -> BatchState:
        counts = batch.request_counts
        total = counts.total if counts else 0
        succeeded = counts.completed if counts else 0
        errored = counts.failed if counts else 0
        ended = batch.status in _OPENAI_ENDED
        left = max(0, total - succeeded - errored)
        return BatchState(
            provider_id=batch.id,
            status=batch.status,
            ended=ended,
            counts=_counts(
                total=total,
                succeeded=succeeded,
                errored=errored,
                expired=left if batch.status == "expired" else 0,
                canceled=left if batch.status == "cancelled" else 0,
                processing=0 if ended else left,
            ),
            expires_at=_utc(batch.expires_at),
            error=self._rejection(batch),
            created_at=_utc(batch.created_at),
        )

    def _rejection(self, batch: Any) -> str | None:
        """Why OpenAI refused the batch as a whole (status "failed")."""
        if batch.status != "failed":
            return None
        errors = batch.errors.data if batch.errors and batch.errors.data else []
        reasons = [
            f"line {e.line}: {e.message}" if e.line is not None else str(e.message) for e in errors
        ]
        return self.client._scrub("; ".join(reasons) or "the batch failed (no reason given)")

    def _call(self, what: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except openai.OpenAIError as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: Exception) -> VLMError:
        from .openai import _classify

        return _classify(exc, self.client._scrub(f"{what}: {self.client._describe(exc)}"))


# -- Anthropic -----------------------------------------------------------------------------------


class AnthropicBatchAPI:
    """Anthropic's Message Batches over the online client's SDK object."""

    backend = "anthropic"
    max_requests = 100_000
    #: The create request's 256 MB, less the room for ``{"requests":[...]}``.
    max_bytes = 256_000_000 - _ENVELOPE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.model: str = client.model
        self._sdk = client._client
        self._offline = _offline_sdk(self._sdk, _AnthropicKept)
        #: For the create call: a retry after a timeout could create a second batch.
        self._once = self._sdk.with_options(max_retries=0)

    def __repr__(self) -> str:
        return f"AnthropicBatchAPI({self.client!r})"

    def close(self) -> None:
        self._offline.close()
        self.client.close()

    def line_bytes(self, line: BatchLine) -> int:
        """The request's JSON in the create body, with the comma that separates it.  Counted
        on our own JSON of the body: the SDK writes the same text in another key order, and
        is far slower to ask."""
        params = self.client._parameters(line.request)
        return len(encode_json({"custom_id": line.custom_id, "params": params})) + 1

    def _request(self, line: BatchLine) -> dict[str, Any]:
        return {"custom_id": line.custom_id, "params": json.loads(self._online_body(line.request))}

    def _online_body(self, request: VLMRequest) -> bytes:
        """The body the online ``complete()`` sends for ``request``, as the SDK writes it
        (key order included, so the batch body holds the same bytes)."""
        parameters = self.client._parameters(request)
        try:
            self._offline.messages.create(**parameters)
        except _AnthropicKept as kept:
            return kept.body
        except anthropic.AnthropicError as exc:
            raise self._error("writing a batch line", exc) from None
        raise VLMError("the Anthropic SDK wrote no request")  # pragma: no cover

    def submit(self, lines: Sequence[BatchLine], *, metadata: Mapping[str, str]) -> BatchState:
        """``metadata`` is not sent: Message Batches have none (see :meth:`recover`)."""
        _check_lines(lines, self)
        requests = [self._request(line) for line in lines]
        _check_size(sum(len(encode_json(request)) + 1 for request in requests), self)
        batch = self._call(
            "creating the batch", lambda: self._once.messages.batches.create(requests=requests)
        )
        return self._state(batch)

    def retrieve(self, provider_id: str) -> BatchState:
        return self._state(
            self._call(
                f"reading batch {provider_id}",
                lambda: self._sdk.messages.batches.retrieve(provider_id),
            )
        )

    def cancel(self, provider_id: str) -> BatchState:
        return self._state(
            self._call(
                f"cancelling batch {provider_id}",
                lambda: self._sdk.messages.batches.cancel(provider_id),
            )
        )

    def find(self, key: str, value: str) -> BatchState | None:
        """Always None: Message Batches carry no metadata to find one by (see
        :meth:`recover`)."""
        return None

    def recover(
        self,
        metadata: Mapping[str, str],
        *,
        created_after: datetime,
        request_count: int,
        taken: Collection[str],
    ) -> BatchState | None:
        """The oldest batch not ``taken`` with ``request_count`` requests created since
        ``created_after`` (less :data:`CLOCK_SKEW`).  The list shows neither metadata nor
        custom_ids, so this is a candidate: the caller checks its results' custom_ids."""
        since = created_after if created_after.tzinfo else created_after.replace(tzinfo=UTC)
        floor = since - timedelta(seconds=CLOCK_SKEW)

        def search() -> Any:
            oldest, when = None, None
            for seen, batch in enumerate(self._sdk.messages.batches.list(limit=FIND_PAGE)):
                created = _utc(batch.created_at)
                if seen >= FIND_LOOKBACK or (created is not None and created < floor):
                    break  # newest first: the rest are older still
                if batch.id in taken or self._state(batch).counts["total"] != request_count:
                    continue
                if oldest is None or (created is not None and when is not None and created <= when):
                    oldest, when = batch, created
            return oldest

        found = self._call("listing batches", search)
        return None if found is None else self._state(found)

    def check_supported(self) -> None:
        try:
            self._sdk.messages.batches.list(limit=1)
        except anthropic.APIStatusError as exc:
            if exc.status_code in _NO_BATCHES:
                where = self.client.config.base_url or "api.anthropic.com"
                raise VLMConfigurationError(
                    self.client._scrub(
                        f"{where} has no batch interface (GET /v1/messages/batches answered HTTP "
                        f"{exc.status_code}); drop --batch to send the calls one by one"
                    )
                ) from None
            raise self._error("checking the batch interface", exc) from None
        except anthropic.AnthropicError as exc:
            raise self._error("checking the batch interface", exc) from None

    def results(
        self, provider_id: str, requests: Mapping[str, VLMRequest]
    ) -> Iterator[BatchResult]:
        state = self.retrieve(provider_id)
        if not state.ended:
            raise _not_ended(state)
        seen: set[str] = set()
        entries = self._call(
            f"reading the results of batch {provider_id}",
            lambda: self._sdk.messages.batches.results(provider_id),
        )
        for entry in self._guarded(entries, f"reading the results of batch {provider_id}"):
            result = self._result(entry, requests)
            seen.add(result.custom_id)
            yield result
        yield from _rest(requests, seen, "errored", "missing from the batch's results")

    def _guarded(self, entries: Iterable[Any], what: str) -> Iterator[Any]:
        """The streamed results, with a connection lost midway turned into a VLMError, and
        the stream closed however the reading ends."""
        iterator = iter(entries)
        try:
            while True:
                entry = self._call(what, lambda: next(iterator, None))
                if entry is None:
                    return
                yield entry
        finally:
            close = getattr(entries, "close", None)
            if callable(close):
                close()

    def _result(self, entry: Any, requests: Mapping[str, VLMRequest]) -> BatchResult:
        custom_id = entry.custom_id
        request = requests.get(custom_id)
        if request is None:
            return _unmatched(custom_id)
        result = entry.result
        if result.type == "succeeded":
            return BatchResult(
                custom_id, "succeeded", self.client.response_from(result.message, request), None
            )
        if result.type == "errored":
            error = result.error.error
            reason = f"{error.type}: {error.message}"
            return BatchResult(
                custom_id,
                "errored",
                None,
                self.client._scrub(reason),
                permanent=error.type in _ANTHROPIC_PERMANENT,
            )
        return BatchResult(custom_id, result.type, None, None)

    def _state(self, batch: Any) -> BatchState:
        counts = batch.request_counts
        values = {key: getattr(counts, key, 0) for key in COUNT_KEYS if key != "total"}
        return BatchState(
            provider_id=batch.id,
            status=batch.processing_status,
            ended=batch.processing_status == "ended",
            counts=_counts(total=sum(values.values()), **values),
            expires_at=_utc(batch.expires_at),
            created_at=_utc(batch.created_at),
        )

    def _call(self, what: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except anthropic.AnthropicError as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: Exception) -> VLMError:
        from .anthropic import _classify

        return _classify(exc, self.client._scrub(f"{what}: {self.client._describe(exc)}"))
