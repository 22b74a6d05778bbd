"""An item's error as a person reads it: one sentence, what failed and what to do.

A run keeps its error as the step left it, for whoever debugs it: the planner's failure is a
JSON record (``PlannerError``: its type, message, details, the attempt), an exception may
arrive with its traceback, and an exception with no message of its own prints as
``SoftTimeLimitExceeded: SoftTimeLimitExceeded()``.  The item that run answers, which is what
``eval status``, the report and exports show, gets :func:`readable` of it instead; tracebacks
belong in the logs (``--debug``).
"""

from __future__ import annotations

import json
import re

from ..redact import redact
from .cells import text as _text

#: Longest item error kept (a tool's message can quote a whole array).
MAX_CHARS = 600

_EMPTY_REPR = re.compile(r"\b(\w+): \1\(\)")
#: What to do after a planning failure, by the planner's ``error_type``.
_PLAN_ADVICE = {
    "api_error": "the model's endpoint failed; check it (`agentic-iqa check`), then "
    "`agentic-iqa eval resume`",
    "validation_error": "the model's replies could not be read as a plan; try another model, "
    "or `agentic-iqa eval resume` to ask again",
    "internal_error": "`agentic-iqa eval resume` tries again; the log (--debug) has the details",
}
_TIME_LIMIT = (
    "ran past its worker's time limit (AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT for tool "
    "steps, AGENTIC_IQA_VLM_SOFT_TIME_LIMIT for model steps): raise it for inputs "
    "this large"
)


def readable(error: str | None) -> str | None:
    """``error`` as one readable sentence (None stays None): a planner's JSON record becomes
    its message and what to do, a traceback its last line, an exception without a message its
    meaning; anything else its first line; at most :data:`MAX_CHARS` characters."""
    if error is None or not error.strip():
        return error
    text = error.strip()
    planned = _planner_record(text)
    if planned is not None:
        text = planned
    elif text.startswith("Traceback (most recent call last)"):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        text = lines[-1]
    else:  # a message, and after it what only a debugger reads
        text = text.splitlines()[0].strip()
    if "SoftTimeLimitExceeded" in text and "time limit" not in text:
        step = text.split(" failed", 1)[0] if " failed" in text else "the step"
        text = f"{step} {_TIME_LIMIT}"
    text = _EMPTY_REPR.sub(lambda found: found.group(1), text)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1].rstrip() + "…"


def _planner_record(text: str) -> str | None:
    """The sentence for a planner's JSON failure record; None when ``text`` is none."""
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("message"), str):
        return None
    message = record["message"].strip().rstrip(".")
    advice = _PLAN_ADVICE.get(str(record.get("error_type")), _PLAN_ADVICE["internal_error"])
    prefix = "" if message.lower().startswith("plan") else "planning failed: "
    return f"{prefix}{message}; {advice}"


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def failure_reason(error: str | None) -> str:
    """An error message with its item-specific parts (quoted paths, numbers) blanked out.

    "image 'a.jpg' on line 7 not found" and "image 'b.jpg' on line 9 not found" are the same
    reason; the report counts reasons and keeps one full message as an example.  An error
    stored before items were given readable errors (a planner's JSON, a traceback) is read as
    :func:`~.errors.readable` says.
    """
    text = redact(readable(_text(error)))
    if not text:
        return "(no error message)"
    return _NUMBER.sub("N", _QUOTED.sub("'…'", text))[:200]
