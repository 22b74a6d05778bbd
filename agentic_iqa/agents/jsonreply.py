"""Reading what a model wrote, with the spec's retry policy: one tolerant reader for every role.

Hosted and served models wrap their JSON in code fences or a sentence, spell keys and values
their own way, stop at the token limit, answer with nothing or refuse.  The reader takes the
first JSON object wherever it stands in the reply (fences, prose around it, trailing commas);
the state models then accept other spellings of keys and values (:mod:`agentic_iqa.state`,
:mod:`agentic_iqa.vocabulary`) and ignore keys they do not know.  A reply that was cut off,
empty, refused or filtered is recognised as such (:func:`reply_problem`) and asked again.

Up to three attempts; after a reply that gives nothing usable the next attempt appends a
stricter instruction ("Return ONLY valid JSON").  After the last failure the caller gets
``None`` and the reasons, each saying what the reply was, and decides what that means for its
subtask.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from ..prompts import STRICT_JSON_SUFFIX, TRUNCATED_SUFFIX
from ..vlm.base import (
    VLMClient,
    VLMError,
    VLMRequest,
    VLMResponse,
    reply_problem,
    was_cut_off,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_ATTEMPTS = 3

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_REFUSAL = re.compile(
    r"^\s*(?:I'?m sorry|I am sorry|Sorry|I can(?:no|')t|I cannot|I'?m (?:not able|unable)|"
    r"I am (?:not able|unable)|I won'?t|As an AI)\b",
    re.I,
)


class InvalidReply(ValueError):
    """The reply is not a JSON object of the expected shape."""


def _without_comments(text: str) -> str:
    """Return ``text`` with JavaScript comments (``// ...`` to the end of the line, ``/* ... */``)
    taken out where they stand outside strings: models annotate their JSON with them."""
    kept: list[str] = []
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            kept.append(char)
            if char == "\\":
                kept.append(text[index + 1 : index + 2])
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            kept.append(char)
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = len(text) if end < 0 else end + 2
            continue
        else:
            kept.append(char)
        index += 1
    return "".join(kept)


def _candidates(text: str) -> Any:
    """Return ``text`` as written, then with trailing commas and then comments taken out."""
    yield text
    yield _TRAILING_COMMA.sub(r"\1", text)
    if "//" in text or "/*" in text:
        yield _TRAILING_COMMA.sub(r"\1", _without_comments(text))


def _objects_in(text: str) -> Any:
    """Every JSON value that starts at a ``{`` of ``text``, in order (trailing commas and
    comments forgiven)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        for candidate in _candidates(text[match.start() :]):
            try:
                value, _ = decoder.raw_decode(candidate)
            except json.JSONDecodeError:
                continue
            yield value
            break


def extract_json_object(text: str) -> dict[str, Any]:
    """Return the JSON object in ``text``: the whole reply, inside a code fence, or the first object
    standing in prose ("Here is the plan: {...} Hope this helps")."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return value
    places = [fenced.group(1) for fenced in _FENCE.finditer(stripped)] + [stripped]
    for place in places:
        for found in _objects_in(place):
            if isinstance(found, dict):
                return found
    if value is not None:
        raise InvalidReply(f"expected a JSON object, got {type(value).__name__}")
    if "{" not in stripped:
        raise InvalidReply(f"no JSON object in reply: {text[:200]!r}")
    raise InvalidReply(f"reply is not valid JSON: {text[:200]!r}")


def looks_like_refusal(text: str) -> bool:
    """Return a reply in prose that declines ("I'm sorry, I can't ..."), for the error message."""
    return "{" not in text and _REFUSAL.search(text) is not None


@dataclass
class Outcome(Generic[T]):
    """Hold what asking for JSON gave: the value (None: no usable reply), attempts, errors."""

    value: T | None
    attempts: int
    errors: list[str] = field(default_factory=list)


def ask_json(
    client: VLMClient,
    request: VLMRequest,
    parse: Callable[[dict[str, Any]], T],
    attempts: int = MAX_ATTEMPTS,
    stricter: str = STRICT_JSON_SUFFIX,
    salvage: Callable[[str], T | None] | None = None,
    rejected: Callable[[VLMResponse, Exception], T | None] | None = None,
) -> Outcome[T]:
    """Ask, read and validate; retry with a stricter prompt on a reply that gives nothing usable.

    ``stricter`` is appended to the system prompt of the retries (a caller whose ``parse``
    also rejects valid JSON, e.g. an answer that names no option, says what it wants); after a
    reply cut off at the token limit the retry also asks for a shorter one, unless
    ``salvage`` reads what the cut reply had already written into a usable value (an answer
    whose option was written before the cap).  ``rejected`` is told of a whole reply that
    ``parse`` rejected (the reply, the error) and may settle it instead of a retry (the
    summarizer's follow-up question: :mod:`.followup`).  Transport errors
    (:class:`VLMError`) are not retried here: the SDKs and the step's backoff retry them.
    """
    errors: list[str] = []
    current = request
    for attempt in range(1, attempts + 1):
        response = client.complete(current)
        problem = reply_problem(response)
        try:
            if problem is not None:
                kept = _salvaged(salvage, response)
                if kept is None:
                    raise InvalidReply(problem)
                return Outcome(kept, attempt, errors)
            return Outcome(parse(extract_json_object(response.text)), attempt, errors)
        except (InvalidReply, ValidationError, KeyError, TypeError, ValueError) as exc:
            detail = str(exc)[:300]
            if problem is None and looks_like_refusal(response.text):
                detail = f"the model declined: {response.text[:200]!r}"
            message = f"attempt {attempt}: {type(exc).__name__}: {detail}"
            errors.append(message)
            log.warning("%s reply rejected (%s)", request.task, message)
            settled = rejected(response, exc) if rejected is not None and problem is None else None
            if settled is not None:
                return Outcome(settled, attempt, errors)
            extra = TRUNCATED_SUFFIX if problem is not None and "cut off" in problem else ""
            current = replace(request, system=request.system + stricter + extra)
    log.error("%s: no valid reply after %d attempts", request.task, attempts)
    return Outcome(None, attempts, errors)


def _salvaged(salvage: Callable[[str], T | None] | None, response: VLMResponse) -> T | None:
    """Return what a reply cut at the token limit had already written, if the caller can use it."""
    if salvage is None or not was_cut_off(response):
        return None
    try:
        return salvage(response.text)
    except (InvalidReply, ValidationError, KeyError, TypeError, ValueError):
        return None


__all__ = [
    "InvalidReply",
    "Outcome",
    "VLMError",
    "ask_json",
    "extract_json_object",
    "looks_like_refusal",
    "reply_problem",
]
