"""Send requests through Anthropic's Message Batches: the requests in the create call, one
result streamed per request.

Its batches carry no metadata and its list shows no custom_id: :meth:`AnthropicBatchAPI.recover`
finds a batch created just before a crash by its creation time and request count (the runtime
then checks its results' custom_ids, which name our batch, before using them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anthropic

from .base import VLMConfigurationError, VLMError, VLMRequest
from .batch_api import (
    CLOCK_SKEW,
    COUNT_KEYS,
    ENVELOPE,
    FIND_LOOKBACK,
    FIND_PAGE,
    NO_BATCHES,
    BatchLine,
    BatchResult,
    BatchState,
    check_lines,
    check_size,
    encode_json,
    not_ended_error,
    offline_sdk,
    state_counts,
    to_utc,
    unmatched_result,
    unreported_results,
)

_T = TypeVar("_T")


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


class _AnthropicKept(anthropic.AnthropicError):
    """Raised by the capturing transport; the SDK passes its own errors on unretried."""

    def __init__(self, body: bytes) -> None:
        super().__init__("request kept, not sent")
        self.body = body


class AnthropicBatchAPI:
    """Anthropic's Message Batches over the online client's SDK object."""

    backend = "anthropic"
    max_requests = 100_000
    #: The create request's 256 MB, less the room for ``{"requests":[...]}``.
    max_bytes = 256_000_000 - ENVELOPE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.model: str = client.model
        self._sdk = client.sdk
        self._offline = offline_sdk(self._sdk, _AnthropicKept)
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
        check_lines(lines, self)
        requests = [self._request(line) for line in lines]
        check_size(sum(len(encode_json(request)) + 1 for request in requests), self)
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
                created = to_utc(batch.created_at)
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
            if exc.status_code in NO_BATCHES:
                where = self.client.config.base_url or "api.anthropic.com"
                raise VLMConfigurationError(
                    self.client.scrub(
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
            raise not_ended_error(state)
        seen: set[str] = set()
        entries = self._call(
            f"reading the results of batch {provider_id}",
            lambda: self._sdk.messages.batches.results(provider_id),
        )
        for entry in self._guarded(entries, f"reading the results of batch {provider_id}"):
            result = self._result(entry, requests)
            seen.add(result.custom_id)
            yield result
        yield from unreported_results(requests, seen, "errored", "missing from the batch's results")

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
            return unmatched_result(custom_id)
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
                self.client.scrub(reason),
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
            counts=state_counts(total=sum(values.values()), **values),
            expires_at=to_utc(batch.expires_at),
            created_at=to_utc(batch.created_at),
        )

    def _call(self, what: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except anthropic.AnthropicError as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: Exception) -> VLMError:
        return self.client.sdk_error(exc, what)
