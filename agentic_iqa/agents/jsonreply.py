"""Getting a validated JSON object out of a VLM, with the spec's retry policy.

Up to three attempts; after an answer that is not valid JSON (or not the expected shape) the
next attempt appends a stricter instruction ("Return ONLY valid JSON").  After the last failure
the caller gets ``None`` and the reasons, and decides what that means for its subtask.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from ..prompts import STRICT_JSON_SUFFIX
from ..vlm.base import VLMClient, VLMError, VLMRequest

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_ATTEMPTS = 3


class InvalidReply(ValueError):
    """The reply is not a JSON object of the expected shape."""


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``, tolerating code fences and prose around it."""
    stripped = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip(), flags=re.S)
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        start, end = stripped.find("{"), stripped.rfind("}")
        if start < 0 or end <= start:
            raise InvalidReply(f"no JSON object in reply: {text[:200]!r}") from None
        try:
            value = json.loads(stripped[start:end + 1])
        except json.JSONDecodeError as exc:
            raise InvalidReply(f"reply is not valid JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(value, dict):
        raise InvalidReply(f"expected a JSON object, got {type(value).__name__}")
    return value


@dataclass
class Outcome(Generic[T]):
    value: T | None
    attempts: int
    errors: list[str] = field(default_factory=list)


def ask_json(client: VLMClient, request: VLMRequest, parse: Callable[[dict[str, Any]], T],
             attempts: int = MAX_ATTEMPTS, stricter: str = STRICT_JSON_SUFFIX) -> Outcome[T]:
    """Ask, parse and validate; retry with a stricter prompt on a malformed reply.

    ``stricter`` is appended to the system prompt of the retries (a caller whose ``parse``
    also rejects valid JSON, e.g. an answer that names no option, says what it wants).
    Transport errors (:class:`VLMError`) are not retried here: the SDKs already retried them.
    """
    errors: list[str] = []
    current = request
    for attempt in range(1, attempts + 1):
        response = client.complete(current)
        try:
            return Outcome(parse(extract_json_object(response.text)), attempt, errors)
        except (InvalidReply, ValidationError, KeyError, TypeError, ValueError) as exc:
            message = f"attempt {attempt}: {type(exc).__name__}: {str(exc)[:300]}"
            errors.append(message)
            log.warning("%s reply rejected (%s)", request.task, message)
            current = replace(request, system=request.system + stricter)
    log.error("%s: no valid reply after %d attempts", request.task, attempts)
    return Outcome(None, attempts, errors)


__all__ = ["InvalidReply", "Outcome", "VLMError", "ask_json", "extract_json_object"]
