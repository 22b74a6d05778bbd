"""Send requests through OpenAI's Batch API: a JSONL file in, an output and an error file out.

A request missing from both files after an ``expired``/``cancelled`` batch was never run.
Batches carry ``metadata``, so :meth:`OpenAIBatchAPI.recover` finds one created just before a
crash by our id in it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import openai

from .base import VLMConfigurationError, VLMError, VLMRequest
from .batch_api import (
    ENVELOPE,
    FIND_LOOKBACK,
    FIND_PAGE,
    NO_BATCHES,
    BatchLine,
    BatchResult,
    BatchState,
    ResultKind,
    check_lines,
    check_size,
    encode_json,
    not_ended_error,
    offline_sdk,
    permanent_status,
    state_counts,
    to_utc,
    unmatched_result,
    unreported_results,
)

_T = TypeVar("_T")


class _OpenAIKept(openai.OpenAIError):
    """Raised by the capturing transport; the SDK passes its own errors on unretried."""

    def __init__(self, body: bytes) -> None:
        super().__init__("request kept, not sent")
        self.body = body


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
    max_bytes = 200_000_000 - ENVELOPE

    def __init__(self, client: Any) -> None:
        self.client = client
        self.model: str = client.model
        self._sdk = client.sdk
        self._offline = offline_sdk(self._sdk, _OpenAIKept)
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
        check_lines(lines, self)
        data = b"".join(self._encode(line) for line in lines)
        check_size(len(data), self)
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
            if exc.status_code in NO_BATCHES:
                where = self.client.config.base_url or "api.openai.com"
                raise VLMConfigurationError(
                    self.client.scrub(
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
            raise not_ended_error(state)
        seen: set[str] = set()
        for file_id in (batch.output_file_id, batch.error_file_id):
            for line in self._lines(file_id):
                result = self._result(line, requests)
                seen.add(result.custom_id)
                yield result
        if batch.status == "failed":
            yield from unreported_results(requests, seen, "errored", state.error)
        elif batch.status in ("expired", "cancelled"):
            kind: ResultKind = "expired" if batch.status == "expired" else "canceled"
            yield from unreported_results(requests, seen, kind, None)
        else:
            yield from unreported_results(
                requests, seen, "errored", "missing from the batch's output"
            )

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
            return unmatched_result(custom_id)
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
                return BatchResult(custom_id, "errored", None, self.client.scrub(str(exc)))
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
            self.client.scrub(reason),
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
            counts=state_counts(
                total=total,
                succeeded=succeeded,
                errored=errored,
                expired=left if batch.status == "expired" else 0,
                canceled=left if batch.status == "cancelled" else 0,
                processing=0 if ended else left,
            ),
            expires_at=to_utc(batch.expires_at),
            error=self._rejection(batch),
            created_at=to_utc(batch.created_at),
        )

    def _rejection(self, batch: Any) -> str | None:
        """Why OpenAI refused the batch as a whole (status "failed")."""
        if batch.status != "failed":
            return None
        errors = batch.errors.data if batch.errors and batch.errors.data else []
        reasons = [
            f"line {e.line}: {e.message}" if e.line is not None else str(e.message) for e in errors
        ]
        return self.client.scrub("; ".join(reasons) or "the batch failed (no reason given)")

    def _call(self, what: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except openai.OpenAIError as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: Exception) -> VLMError:
        return self.client.sdk_error(exc, what)
