"""Ask the model once more which option it chose, when its reply commits to none readably.

A reply such as "Both the blur and the blocking are visible; the blocking dominates the sky"
may mean an option without naming it in a form a careful grader reads.  Guessing would put a
letter in the model's mouth; counting it wrong charges the model for its form, not its content.
So the same model is shown its own reply, quoted, with the question and its options, and asked
for exactly one letter, or NONE (:data:`~agentic_iqa.prompts.FOLLOW_UP_SYSTEM`).  No image is
sent: the model clarifies what it wrote, it does not look again, and the request costs a few
hundred input tokens.  VLMEvalKit asks a separate judge model to extract the choice; here the
model that answered clarifies its own answer.

The follow-up is asked once, and its reply is read with the same rules as any reply
(:func:`agentic_iqa.options.read_option`): never guessed.  It is an ordinary call of the role's
client, so it is cached, rate-limited, recorded with its tokens and cost (task
``answer_follow_up``) and, in a batch job, sent in the next round.  It is on for hosted models
and off for the builtin backend (whose replies are always readable), unless the role's
``follow_up`` setting says otherwise (``--no-follow-up``, ``AGENTIC_IQA_VLM_FOLLOW_UP``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..options import UNREAD_REASONS, read_option, says_it_cannot_see
from ..prompts import FOLLOW_UP_SYSTEM, FOLLOW_UP_USER, render
from ..vlm.base import VLMClient, VLMRequest, reply_problem

#: The task a follow-up request is recorded under (``vlm_calls.task``).
FOLLOW_UP_TASK: Final = "answer_follow_up"
#: Characters of the first reply quoted back; a longer reply keeps its start and its end,
#: where answers stand.
QUOTED_CHARS = 4000

_NONE = re.compile(r"[\s*_`\"'.()\[\]]*none[\s*_`\"'.!()\[\]]*", re.IGNORECASE)


@dataclass(frozen=True)
class FollowUp:
    """What the follow-up gave: the option's letter, or why it gave none."""

    letter: str | None
    #: Why there is no letter, in words (None when there is one).
    reason: str | None
    #: The follow-up's reply as it came (for the run's record).
    reply: str


def asks_follow_up(client: VLMClient) -> bool:
    """Return whether ``client``'s role asks an unreadable reply about once more (its
    configuration's ``asks_follow_up``; a client without one, such as a bare builtin, never)."""
    config = getattr(client, "config", None)
    return bool(getattr(config, "asks_follow_up", False))


def quoted(reply: str) -> str:
    """Return ``reply`` as it is quoted back: whole, or its start and end when it is long."""
    if len(reply) <= QUOTED_CHARS:
        return reply
    half = QUOTED_CHARS // 2
    return f"{reply[:half]}\n[...]\n{reply[-half:]}"


def follow_up_request(query: str, options: Mapping[str, str], reply: str) -> VLMRequest:
    """Return the follow-up request: the question, its options and the reply quoted, no image."""
    listed = "\n".join(f"{letter}. {text}".rstrip() for letter, text in options.items())
    return VLMRequest(
        task=FOLLOW_UP_TASK,
        system=render(FOLLOW_UP_SYSTEM, letters=", ".join(options)),
        user=render(FOLLOW_UP_USER, query=query, options=listed, reply=quoted(reply)),
        context={"query": query, "options": dict(options), "reply": reply},
        json_output=False,
        answer_options=tuple(options),
    )


def read_follow_up(text: str, options: Mapping[str, str]) -> FollowUp:
    """Read a follow-up's reply with the rules of any reply: a letter, or why there is none
    (NONE, a reply that says it cannot see the image, one naming several)."""
    if _NONE.fullmatch(text):
        return FollowUp(None, "asked once more, the model chose none of the options", text)
    if says_it_cannot_see(text):
        return FollowUp(None, UNREAD_REASONS["cannot see"], text)
    reading = read_option(text, options)
    if reading.letter is None:
        return FollowUp(None, f"asked once more: {reading.reason}", text)
    return FollowUp(reading.letter, None, text)


def ask_follow_up(
    client: VLMClient, query: str, options: Mapping[str, str], reply: str
) -> FollowUp:
    """Ask ``client`` once which option ``reply`` chose, and read its answer (never guessed).

    A transport failure (:class:`~agentic_iqa.vlm.base.VLMError`) propagates, as for any call
    of the step; a refused, filtered, empty or cut-off follow-up is no answer, with why."""
    response = client.complete(follow_up_request(query, options, reply))
    problem = reply_problem(response)
    if problem is not None:
        return FollowUp(None, f"asked once more: {problem}", response.text)
    return read_follow_up(response.text.strip(), options)


__all__ = [
    "FOLLOW_UP_TASK",
    "FollowUp",
    "ask_follow_up",
    "asks_follow_up",
    "follow_up_request",
    "quoted",
    "read_follow_up",
]
