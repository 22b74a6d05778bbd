"""Model calls answered through a provider's batch interface (``eval submit --batch``).

A multi-step agent cannot send its calls ahead: each depends on the answer before.  So a step
runs as usual until it asks for an answer that has not come yet; :class:`BatchingClient` then
notes the request in the step's :class:`BatchScope` and raises :class:`AwaitingBatch`, and the
runtime parks the run (its request waits for the next round's batch).  When the batch's answers
are in, the step runs again from its start: its calls are the same, in the same order, and each
is answered from the scope by its place in the step (``seq``), so the step's code never knows
the answer came hours later.  A request whose place holds another request (the code changed
between two versions) is asked again.

This module is free of the database: the runtime fills the scope from it and stores what it
asks for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .base import ClientProxy, VLMClient, VLMError, VLMRequest, VLMResponse
from .cache import request_key, response_from_json


class AwaitingBatch(BaseException):  # noqa: N818 (control flow, like GeneratorExit)
    """The step asked for answers that come from a batch: the run waits for them.

    A ``BaseException`` on purpose: the executor turns any ``Exception`` of a subtask into
    missing evidence, and waiting is not a failure.
    """

    def __init__(self, wanted: list[Wanted]) -> None:
        super().__init__(f"waiting for {len(wanted)} batch answer(s)")
        self.wanted = wanted


class BatchRequestFailed(VLMError):
    """The provider answered this request with an error (or let it expire) in every batch it
    was sent in: the call fails as an online call failing for good would."""


@dataclass(frozen=True)
class Answer:
    """What a batch brought for one place of a step: an answer, or the provider's reason."""

    request_key: str
    response_json: str | None
    error: str | None = None
    batch: str | None = None


@dataclass(frozen=True)
class Wanted:
    """A request a step asked for that has no answer yet."""

    seq: int
    role: str
    request_key: str
    request_json: str


@dataclass
class BatchScope:
    """The answers a step may use, by place, and the requests it asked for beyond them."""

    answers: Mapping[int, Answer] = field(default_factory=dict)
    wanted: list[Wanted] = field(default_factory=list)
    next_seq: int = 0


_scope: ContextVar[BatchScope | None] = ContextVar("agentic_iqa_batch_scope", default=None)


@contextmanager
def batch_scope(scope: BatchScope) -> Iterator[BatchScope]:
    """Answer this context's batched calls from ``scope`` (one step of one run)."""
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def request_to_json(request: VLMRequest) -> str:
    """What a remote backend needs to build the request again (its ``context`` is the builtin
    backend's alone)."""
    return json.dumps(
        {
            "task": request.task,
            "system": request.system,
            "user": request.user,
            "images": [str(path) for path in request.images],
            "json_output": request.json_output,
            "answer_options": list(request.answer_options) if request.answer_options else None,
        }
    )


def request_from_json(text: str) -> VLMRequest:
    document: dict[str, Any] = json.loads(text)
    options = document.get("answer_options")
    return VLMRequest(
        task=document["task"],
        system=document["system"],
        user=document["user"],
        images=tuple(_location(path) for path in document["images"]),
        json_output=document["json_output"],
        answer_options=tuple(options) if options else None,
    )


def _location(text: str) -> Path | str:
    """A stored image location: an object's URL stays text, a path becomes a Path."""
    from iqa_tools.storage import is_url

    return text if is_url(text) else Path(text)


class BatchingClient(ClientProxy):
    """Answers a role's calls from the step's :class:`BatchScope` (see the module docstring);
    outside a scope (``agentic-iqa check``, a probe) it calls the model online."""

    def __init__(self, inner: VLMClient, role: str) -> None:
        super().__init__(inner)
        self.role = role

    def complete(self, request: VLMRequest) -> VLMResponse:
        scope = _scope.get()
        if scope is None:
            return self.inner.complete(request)
        seq = scope.next_seq
        scope.next_seq += 1
        key = request_key(self.inner.config, request)  # type: ignore[attr-defined]
        answer = scope.answers.get(seq)
        if answer is not None and answer.request_key == key:
            if answer.response_json is not None:
                return replace(
                    response_from_json(answer.response_json), cached=False, batch=answer.batch
                )
            if answer.error is not None:
                raise BatchRequestFailed(answer.error)
        scope.wanted.append(Wanted(seq, self.role, key, request_to_json(request)))
        raise AwaitingBatch(scope.wanted)


def response_json(response: VLMResponse) -> str:
    """A batch answer as stored: the response cache's own form, plus why the model stopped."""
    from .cache import response_to_json

    document = json.loads(response_to_json(response))
    document["finish_reason"] = response.finish_reason
    document["refusal"] = response.refusal
    return json.dumps(document)


__all__ = [
    "Answer",
    "AwaitingBatch",
    "BatchRequestFailed",
    "BatchScope",
    "BatchingClient",
    "Wanted",
    "batch_scope",
    "request_from_json",
    "request_to_json",
    "response_json",
]
