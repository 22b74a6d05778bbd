"""The providers' batch interfaces, played by a local server around an online responder.

:class:`BatchServer` is the responder of a :class:`FakeAPIServer` (enter it with
``methods=BATCH_METHODS``, or use :func:`serve_batches`).  It speaks OpenAI's ``/v1/files`` and
``/v1/batches`` and Anthropic's ``/v1/messages/batches`` as the real SDKs call them, and passes
every other POST (the online ``/v1/chat/completions`` and ``/v1/messages``) to the online
responder.  Each batch line is answered by that same responder, called with the line's body as
an online request, so a deterministic model (e.g. :class:`~tests.conformance.simulated_model.
SimulatedModel`) answers a batch exactly as it answers online.

A batch stays in progress ``delay`` seconds; its lines are answered when it is first looked at
after that (or when it is cancelled).  ``fail`` lines come back errored (HTTP 400, or the
status the predicate gives), ``expire`` lines expired, and ``reject`` refuses whole batches
(OpenAI: status "failed" with ``errors.data``; Anthropic: HTTP 400 at create).  ``down`` makes
every batch path answer 503 (a provider out of reach); ``after_create`` is called with each
batch created, before the reply leaves (a test kills its client there).  The evidence for
tests: ``received`` (custom_id, body digest) per line of every batch created, ``billed`` per
line answered with HTTP 200, ``online_billed`` (digest) per online call answered, ``batches``
and ``files``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.policy import HTTP
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Recorded,
    Reply,
    anthropic_error,
    openai_error,
)

Protocol = Literal["openai", "anthropic"]
Responder = Callable[[Recorded], Reply]

#: The methods a FakeAPIServer must pass on for the batch interfaces.
BATCH_METHODS = ("POST", "GET", "DELETE")
#: The providers' completion window.
WINDOW_SECONDS = 24 * 3600
FAIL_MESSAGE = (
    "Could not process image: the image data provided is not a valid image or could not be decoded."
)
REJECT_MESSAGE = (
    "Enqueued token limit reached for this model in your organization. Please "
    "try submitting fewer tasks or waiting for existing batches to complete."
)
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
_CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Anthropic's error type for an HTTP status (as its API names them).
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_ONLINE_PATH = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
#: Request headers not passed on to the online responder (they describe the batch request).
_HOP_HEADERS = frozenset({"content-length", "content-type", "accept", "transfer-encoding"})


def digest(body: Any) -> str:
    """sha256 of a request body as canonical JSON: equal for equal requests, whichever way
    (online or in a batch) they were sent."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class Outcome:
    """What became of one line: ``kind`` succeeded/errored/expired/canceled, with the HTTP
    status and body the online responder gave (or the server made up)."""

    kind: str
    status: int | None = None
    body: Any = None


@dataclass
class FakeBatch:
    """One batch as the server keeps it; ``outcomes`` is None until its lines are answered."""

    id: str
    protocol: Protocol
    lines: list[tuple[str, dict[str, Any]]]
    headers: dict[str, str]
    created: float
    metadata: dict[str, str] = field(default_factory=dict)
    input_file_id: str | None = None
    rejection: list[dict[str, Any]] | None = None
    cancel_at: float | None = None
    outcomes: dict[str, Outcome] | None = None
    #: Polls seen since the cancel (the first shows "cancelling", the next "cancelled").
    polls_since_cancel: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def custom_ids(self) -> list[str]:
        return [custom_id for custom_id, _ in self.lines]


class BatchServer:
    """A :class:`FakeAPIServer` responder adding the batch interfaces to ``online``.

    ``delay``: seconds from create until a batch ends.  ``fail``: custom_ids (a collection or
    a predicate) whose lines come back errored with ``fail_message``, HTTP 400 (a request the
    provider refuses for good) unless the predicate returns another status (an int: 429, 500,
    529 for a transient failure).  ``expire``: custom_ids (a collection or a predicate)
    never run, reported expired when the batch ends (OpenAI: in the error file with code
    ``batch_expired``, and the batch's status "expired").  ``reject``: every batch is refused
    as a whole (a string: the reason given).  ``processed_on_cancel``: how many of a batch's
    first lines are answered before a cancel takes hold (the rest are canceled; OpenAI leaves
    them out of both files).  ``supports_batches=False``: every batch and file path answers
    404, as vLLM or Ollama do.  ``shuffle``: results in a seeded random order, as providers do
    not keep the input order.  ``clock``: seconds, for ``delay``.  ``down``: every batch path
    answers 503.  ``after_create``: called with each batch created, outside the server's lock,
    before its reply is sent.
    """

    def __init__(
        self,
        online: Responder,
        *,
        delay: float = 0.0,
        fail: Collection[str] | Callable[[str], bool | int] = (),
        fail_message: str = FAIL_MESSAGE,
        expire: Collection[str] | Callable[[str], bool] = (),
        reject: bool | str = False,
        processed_on_cancel: int = 0,
        supports_batches: bool = True,
        shuffle: int | None = None,
        clock: Callable[[], float] = time.time,
        after_create: Callable[[FakeBatch], None] | None = None,
    ) -> None:
        self.online = online
        self.delay = delay
        self.fail = fail if callable(fail) else frozenset(fail).__contains__
        self.fail_message = fail_message
        self.expire = expire if callable(expire) else frozenset(expire).__contains__
        self.reject = REJECT_MESSAGE if reject is True else (reject or None)
        self.processed_on_cancel = processed_on_cancel
        self.supports_batches = supports_batches
        self.shuffle = shuffle
        self.clock = clock
        self.after_create = after_create
        self.down = False
        self.received: list[tuple[str, str]] = []
        self.billed: list[tuple[str, str]] = []
        self.online_billed: list[str] = []
        self.batches: dict[str, FakeBatch] = {}
        self.files: dict[str, StoredFile] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()

    # -- routing ---------------------------------------------------------------------------

    def __call__(self, request: Recorded) -> Reply:
        parts = urlsplit(request.path)
        path = re.sub(r"^.*?(?=/v1/)", "", parts.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        for method, pattern, handler in self._routes():
            found = re.fullmatch(pattern, path)
            if found and method == request.method:
                if not self.supports_batches:
                    return Reply(404, {"detail": "Not Found"})
                if self.down:
                    return Reply(
                        503,
                        {"error": {"type": "overloaded_error", "message": "Service Unavailable"}},
                    )
                with self._lock:
                    before = len(self.batches)
                    reply = handler(request, query, *found.groups())
                    created = list(self.batches.values())[before:]
                if self.after_create is not None:
                    for batch in created:
                        self.after_create(batch)
                return reply
        if request.method == "POST":
            return self._online(request)
        return Reply(404, {"detail": "Not Found"})

    def _routes(self) -> list[tuple[str, str, Callable[..., Reply]]]:
        return [
            ("POST", r"/v1/files", self._upload),
            ("GET", r"/v1/files/([^/]+)", self._file),
            ("GET", r"/v1/files/([^/]+)/content", self._file_content),
            ("POST", r"/v1/batches", self._openai_create),
            ("GET", r"/v1/batches", self._openai_list),
            ("GET", r"/v1/batches/([^/]+)", self._openai_retrieve),
            ("POST", r"/v1/batches/([^/]+)/cancel", self._openai_cancel),
            ("POST", r"/v1/messages/batches", self._anthropic_create),
            ("GET", r"/v1/messages/batches", self._anthropic_list),
            ("GET", r"/v1/messages/batches/([^/]+)", self._anthropic_retrieve),
            ("GET", r"/v1/messages/batches/([^/]+)/results", self._anthropic_results),
            ("POST", r"/v1/messages/batches/([^/]+)/cancel", self._anthropic_cancel),
        ]

    def _online(self, request: Recorded) -> Reply:
        reply = self.online(request)
        if reply.status == 200:
            with self._lock:
                self.online_billed.append(digest(request.body))
        return reply

    # -- OpenAI files ------------------------------------------------------------------------

    def _upload(self, request: Recorded, _query: dict[str, str]) -> Reply:
        fields = _multipart(request.raw, request.content_type)
        if "file" not in fields:
            return Reply(400, openai_error("Missing 'file' in the upload", "invalid_request_error"))
        filename, data = fields["file"]
        purpose = fields.get("purpose", ("", b""))[1].decode()
        stored = self._store(filename or "upload.jsonl", purpose, data)
        return Reply(200, stored.describe())

    def _store(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        stored = StoredFile(self._new_id("file-"), filename, purpose, data, int(self.clock()))
        self.files[stored.id] = stored
        return stored

    def _file(self, _request: Recorded, _query: dict[str, str], file_id: str) -> Reply:
        stored = self.files.get(file_id)
        return Reply(200, stored.describe()) if stored else _openai_missing("file", file_id)

    def _file_content(self, _request: Recorded, _query: dict[str, str], file_id: str) -> Reply:
        stored = self.files.get(file_id)
        if stored is None:
            return _openai_missing("file", file_id)
        return Reply(200, stored.data, content_type="application/octet-stream")

    # -- OpenAI batches ----------------------------------------------------------------------

    def _openai_create(self, request: Recorded, _query: dict[str, str]) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        stored = self.files.get(str(body.get("input_file_id")))
        if stored is None or stored.purpose != "batch":
            return Reply(
                400,
                openai_error(
                    f"Invalid input_file_id {body.get('input_file_id')!r}: no file with purpose "
                    "'batch'",
                    "invalid_request_error",
                ),
            )
        if body.get("endpoint") != _ONLINE_PATH["openai"] or body.get("completion_window") != "24h":
            return Reply(
                400,
                openai_error(
                    "Only endpoint /v1/chat/completions with completion_window 24h is served here",
                    "invalid_request_error",
                ),
            )
        lines, problems = _openai_lines(stored.data)
        batch = FakeBatch(
            self._new_id("batch_"),
            "openai",
            lines,
            _passed_on(request.headers),
            self.clock(),
            dict(body.get("metadata") or {}),
            stored.id,
        )
        if self.reject:
            problems.append(
                {
                    "code": "token_limit_exceeded",
                    "line": None,
                    "message": self.reject,
                    "param": None,
                }
            )
        batch.rejection = problems or None
        self.batches[batch.id] = batch
        if not batch.rejection:
            self._receive(batch)
        return Reply(200, self._openai_object(batch, status="validating"))

    def _openai_list(self, _request: Recorded, query: dict[str, str]) -> Reply:
        return Reply(200, self._page("openai", query.get("after"), query))

    def _openai_retrieve(self, _request: Recorded, _query: dict[str, str], batch_id: str) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None or batch.protocol != "openai":
            return _openai_missing("batch", batch_id)
        self._advance(batch)
        return Reply(200, self._openai_object(batch))

    def _openai_cancel(self, _request: Recorded, _query: dict[str, str], batch_id: str) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None or batch.protocol != "openai":
            return _openai_missing("batch", batch_id)
        self._cancel(batch)
        return Reply(200, self._openai_object(batch))

    def _openai_object(self, batch: FakeBatch, status: str | None = None) -> dict[str, Any]:
        status = status or self._openai_status(batch)
        outcomes = batch.outcomes or {}
        created = int(batch.created)
        ended_at = (
            int(self.clock()) if status in ("completed", "failed", "expired", "cancelled") else None
        )
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": _ONLINE_PATH["openai"],
            "errors": ({"object": "list", "data": batch.rejection} if status == "failed" else None),
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": created,
            "in_progress_at": created,
            "expires_at": created + WINDOW_SECONDS,
            "completed_at": ended_at if status == "completed" else None,
            "failed_at": ended_at if status == "failed" else None,
            "expired_at": ended_at if status == "expired" else None,
            "cancelling_at": int(batch.cancel_at) if batch.cancel_at else None,
            "cancelled_at": ended_at if status == "cancelled" else None,
            "request_counts": {
                "total": 0 if status == "failed" else len(batch.lines),
                "completed": sum(o.kind == "succeeded" for o in outcomes.values()),
                "failed": sum(o.kind == "errored" for o in outcomes.values()),
            },
            "metadata": batch.metadata or None,
        }

    def _openai_status(self, batch: FakeBatch) -> str:
        if batch.rejection:
            return "failed"
        if batch.cancel_at is not None:
            return "cancelled" if batch.polls_since_cancel > 0 else "cancelling"
        if batch.outcomes is None:
            return "in_progress"
        expired = any(o.kind == "expired" for o in batch.outcomes.values())
        return "expired" if expired else "completed"

    def _openai_files(self, batch: FakeBatch) -> None:
        """The output file (HTTP 200 answers) and the error file (the rest; canceled lines
        are in neither), as OpenAI writes them once a batch ends."""
        output, errors = [], []
        for custom_id in self._order(batch):
            outcome = batch.outcomes[custom_id]  # type: ignore[index]
            row: dict[str, Any] = {
                "id": self._new_id("batch_req_"),
                "custom_id": custom_id,
                "response": None,
                "error": None,
            }
            if outcome.kind == "expired":
                row["error"] = {"code": "batch_expired", "message": EXPIRED_MESSAGE}
            elif outcome.kind == "canceled":
                continue
            else:
                row["response"] = {
                    "status_code": outcome.status,
                    "request_id": self._new_id("req_"),
                    "body": outcome.body,
                }
            (output if outcome.kind == "succeeded" else errors).append(row)
        batch.output_file_id = self._jsonl_file(batch, "output", output)
        batch.error_file_id = self._jsonl_file(batch, "error", errors)

    def _jsonl_file(self, batch: FakeBatch, kind: str, rows: list[dict[str, Any]]) -> str | None:
        if not rows:
            return None
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
        return self._store(f"{batch.id}_{kind}.jsonl", "batch_output", data).id

    # -- Anthropic batches -------------------------------------------------------------------

    def _anthropic_create(self, request: Recorded, _query: dict[str, str]) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        requests = body.get("requests") or []
        problem = _anthropic_problem(requests) or self.reject
        if problem:
            return Reply(400, anthropic_error(problem, "invalid_request_error"))
        lines = [(entry["custom_id"], entry["params"]) for entry in requests]
        batch = FakeBatch(
            self._new_id("msgbatch_"), "anthropic", lines, _passed_on(request.headers), self.clock()
        )
        self.batches[batch.id] = batch
        self._receive(batch)
        return Reply(200, self._anthropic_object(batch, request))

    def _anthropic_list(self, request: Recorded, query: dict[str, str]) -> Reply:
        page = self._page("anthropic", query.get("after_id"), query, request)
        return Reply(200, page)

    def _anthropic_retrieve(
        self, request: Recorded, _query: dict[str, str], batch_id: str
    ) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None or batch.protocol != "anthropic":
            return _anthropic_missing(batch_id)
        self._advance(batch)
        return Reply(200, self._anthropic_object(batch, request))

    def _anthropic_cancel(self, request: Recorded, _query: dict[str, str], batch_id: str) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None or batch.protocol != "anthropic":
            return _anthropic_missing(batch_id)
        self._cancel(batch)
        return Reply(200, self._anthropic_object(batch, request))

    def _anthropic_results(
        self, _request: Recorded, _query: dict[str, str], batch_id: str
    ) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None or batch.protocol != "anthropic":
            return _anthropic_missing(batch_id)
        self._advance(batch)
        if self._anthropic_status(batch) != "ended":
            return Reply(
                404,
                anthropic_error(
                    f"Results for batch {batch_id} are not available yet", "not_found_error"
                ),
            )
        rows = [
            {"custom_id": custom_id, "result": _anthropic_result(batch.outcomes[custom_id])}
            for custom_id in self._order(batch)
        ]  # type: ignore[index]
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
        return Reply(200, data, content_type="application/x-jsonl")

    def _anthropic_object(self, batch: FakeBatch, request: Recorded) -> dict[str, Any]:
        status = self._anthropic_status(batch)
        outcomes = batch.outcomes if status == "ended" else {}
        counts = {
            kind: sum(o.kind == kind for o in (outcomes or {}).values())
            for kind in ("succeeded", "errored", "canceled", "expired")
        }
        counts["processing"] = len(batch.lines) - sum(counts.values())
        host = request.headers.get("host", "127.0.0.1")
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "created_at": _rfc3339(batch.created),
            "expires_at": _rfc3339(batch.created + WINDOW_SECONDS),
            "ended_at": _rfc3339(self.clock()) if status == "ended" else None,
            "cancel_initiated_at": _rfc3339(batch.cancel_at) if batch.cancel_at else None,
            "archived_at": None,
            "results_url": (
                f"http://{host}/v1/messages/batches/{batch.id}/results"
                if status == "ended"
                else None
            ),
        }

    def _anthropic_status(self, batch: FakeBatch) -> str:
        if batch.cancel_at is not None:
            return "ended" if batch.polls_since_cancel > 0 else "canceling"
        return "in_progress" if batch.outcomes is None else "ended"

    # -- both --------------------------------------------------------------------------------

    def _receive(self, batch: FakeBatch) -> None:
        self.received.extend((custom_id, digest(body)) for custom_id, body in batch.lines)

    def _page(
        self,
        protocol: Protocol,
        after: str | None,
        query: dict[str, str],
        request: Recorded | None = None,
    ) -> dict[str, Any]:
        """Newest first, ``limit`` at a time, after the id ``after``."""
        mine = [b for b in reversed(self.batches.values()) if b.protocol == protocol]
        ids = [b.id for b in mine]
        start = ids.index(after) + 1 if after in ids else 0
        limit = int(query.get("limit", 20))
        chosen = mine[start : start + limit]
        for batch in chosen:
            self._advance(batch)
        data = [
            self._openai_object(b) if protocol == "openai" else self._anthropic_object(b, request)
            for b in chosen
        ]  # type: ignore[arg-type]
        return {
            "object": "list",
            "data": data,
            "has_more": start + limit < len(mine),
            "first_id": chosen[0].id if chosen else None,
            "last_id": chosen[-1].id if chosen else None,
        }

    def _advance(self, batch: FakeBatch) -> None:
        """Looked at: a cancelled batch ends, a due one gets its answers."""
        if batch.cancel_at is not None:
            batch.polls_since_cancel += 1
            return
        if batch.rejection or batch.outcomes is not None:
            return
        if self.clock() - batch.created >= self.delay:
            self._answer(batch, len(batch.lines))

    def _cancel(self, batch: FakeBatch) -> None:
        """The first ``processed_on_cancel`` lines are answered; the rest are canceled."""
        self._advance(batch)
        if batch.rejection or batch.outcomes is not None or batch.cancel_at is not None:
            return
        batch.cancel_at = self.clock()
        self._answer(batch, self.processed_on_cancel)

    def _answer(self, batch: FakeBatch, how_many: int) -> None:
        outcomes: dict[str, Outcome] = {}
        for index, (custom_id, body) in enumerate(batch.lines):
            if index >= how_many:
                outcomes[custom_id] = Outcome("canceled")
            elif self.expire(custom_id):
                outcomes[custom_id] = Outcome("expired")
            elif failed := self.fail(custom_id):
                status = 400 if failed is True else int(failed)
                outcomes[custom_id] = Outcome(
                    "errored", status, self._failure(batch.protocol, status=status)
                )
            else:
                outcomes[custom_id] = self._run(batch, custom_id, body)
        batch.outcomes = outcomes
        if batch.protocol == "openai":
            self._openai_files(batch)

    def _run(self, batch: FakeBatch, custom_id: str, body: dict[str, Any]) -> Outcome:
        """One line, answered by the online responder as the online call would be."""
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            reply = self.online(
                Recorded(
                    "POST",
                    _ONLINE_PATH[batch.protocol],
                    dict(batch.headers),
                    body,
                    raw,
                    "application/json",
                )
            )
        except Exception as exc:  # a responder's bug shows as the line's error, not a hang
            return Outcome(
                "errored",
                500,
                self._failure(batch.protocol, f"{type(exc).__name__}: {exc}", status=500),
            )
        if reply.status != 200:
            return Outcome("errored", reply.status, reply.body)
        self.billed.append((custom_id, digest(body)))
        return Outcome("succeeded", 200, reply.body)

    def _failure(
        self, protocol: Protocol, message: str | None = None, *, status: int = 400
    ) -> dict[str, Any]:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        if protocol == "anthropic":
            return anthropic_error(message or self.fail_message, kind)
        return openai_error(
            message or self.fail_message,
            "invalid_request_error" if status < 500 else "server_error",
        )

    def _order(self, batch: FakeBatch) -> list[str]:
        ids = batch.custom_ids
        if self.shuffle is not None:
            random.Random(f"{self.shuffle}|{batch.id}").shuffle(ids)
        return ids

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"


def serve_batches(online: Responder, **options: Any) -> tuple[FakeAPIServer, BatchServer]:
    """A server with the batch interfaces around ``online`` (enter it with ``with``);
    ``options`` are :class:`BatchServer`'s."""
    batches = BatchServer(online, **options)
    return FakeAPIServer(batches, methods=BATCH_METHODS), batches


# -- reading requests and writing replies ----------------------------------------------------


def _multipart(raw: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """``name -> (filename, bytes)`` of a multipart/form-data body."""
    message = message_from_bytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw, policy=HTTP
    )
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():  # type: ignore[attr-defined]
        name = part.get_param("name", header="content-disposition")
        if name:
            payload = part.get_payload(decode=True) or b""
            fields[str(name)] = (part.get_filename(), payload)
    return fields


def _openai_lines(data: bytes) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """The lines of a batch input file, and what OpenAI's validation would refuse in it."""
    lines: list[tuple[str, dict[str, Any]]] = []
    problems: list[dict[str, Any]] = []
    models: set[str] = set()
    for number, text in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not text.strip():
            continue
        problem = None
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            row, problem = {}, "This line is not parseable as valid JSON."
        custom_id = row.get("custom_id")
        if problem is None and not isinstance(custom_id, str):
            problem = "Missing required parameter: 'custom_id'."
        elif problem is None and any(custom_id == seen for seen, _ in lines):
            problem = f"The custom_id '{custom_id}' is duplicated."
        elif problem is None and (
            row.get("method") != "POST" or row.get("url") != _ONLINE_PATH["openai"]
        ):
            problem = "The url and method must be POST /v1/chat/completions."
        if problem is None:
            models.add(str((row.get("body") or {}).get("model")))
            lines.append((custom_id, row.get("body") or {}))
        else:
            problems.append(
                {"code": "invalid_request", "line": number, "message": problem, "param": None}
            )
    if len(models) > 1:
        problems.append(
            {
                "code": "mismatched_model",
                "line": None,
                "param": "body.model",
                "message": "All requests in a batch must use the same model.",
            }
        )
    if not lines and not problems:
        problems.append(
            {
                "code": "empty_file",
                "line": None,
                "param": None,
                "message": "The batch input file is empty.",
            }
        )
    return lines, problems


def _anthropic_problem(requests: Any) -> str | None:
    """What Anthropic would refuse in a create request, or None."""
    if not isinstance(requests, list) or not requests:
        return "requests: at least one request is required"
    seen: set[str] = set()
    for index, entry in enumerate(requests):
        custom_id = entry.get("custom_id") if isinstance(entry, dict) else None
        if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
            return f"requests.{index}.custom_id: String should match pattern '{_CUSTOM_ID.pattern}'"
        if custom_id in seen:
            return f"requests.{index}.custom_id: Duplicate custom_id '{custom_id}'"
        seen.add(custom_id)
        params = entry.get("params")
        missing = [
            key
            for key in ("model", "max_tokens", "messages")
            if not isinstance(params, dict) or key not in params
        ]
        if missing:
            return f"requests.{index}.params.{missing[0]}: Field required"
    return None


def _anthropic_result(outcome: Outcome) -> dict[str, Any]:
    if outcome.kind == "succeeded":
        return {"type": "succeeded", "message": outcome.body}
    if outcome.kind == "errored":
        body = (
            outcome.body
            if isinstance(outcome.body, dict) and "error" in outcome.body
            else anthropic_error(str(outcome.body), "api_error")
        )
        return {"type": "errored", "error": {**body, "type": "error"}}
    return {"type": outcome.kind}


def _passed_on(headers: dict[str, str]) -> dict[str, str]:
    """The create request's headers as an online call of a line would carry them (the key
    and version headers, not the batch body's length)."""
    return {name: value for name, value in headers.items() if name not in _HOP_HEADERS}


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _openai_missing(kind: str, object_id: str) -> Reply:
    return Reply(
        404, openai_error(f"No {kind} found with id '{object_id}'.", "invalid_request_error")
    )


def _anthropic_missing(batch_id: str) -> Reply:
    return Reply(404, anthropic_error(f"batch {batch_id} not found", "not_found_error"))


__all__ = ["BATCH_METHODS", "BatchServer", "FakeBatch", "digest", "serve_batches"]
