"""Say why a run read no answer, and warn when a job's model says it cannot see its images.

A reply that says it cannot see the image is no answer, whatever letter it names in general
terms (:mod:`agentic_iqa.options`); the summarizer records it as unread with a reason that says
so (``SummarizerOutput.unparseable_reason``).  One such item is the model's business; several
in one job mean the images are likely not reaching it: a text-only model, or a server (a proxy,
an OpenAI-compatible gateway) that drops the image parts of a request.  The job then says so, in
``eval status``, ``eval report`` and the line a local job ends with.

The warning is given from :data:`CANNOT_SEE_WARN_AT` such items on, whatever their share of
the job: while a job runs, three replies of a text-only model are enough to know it (its share
is then nearly all of what finished), and in a big job a server that drops a few images (the
large ones, say) is worth knowing even at a small share, since each such item counts as wrong.
Their share of the job's done items is shown beside the count, for the reader to weigh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: An unread answer whose model said it cannot see the image (``runs.unread``).
CANNOT_SEE: Final = "cannot see"
#: Any other unread answer: several letters or a hedge, none, cut off, the model chose none.
OTHER: Final = "other"
#: The kinds ``runs.unread`` holds (NULL: an answer was read, or the run gave none).
UNREAD_KINDS: Final = (CANNOT_SEE, OTHER)
#: Items whose model said it cannot see the image from which a job warns.
CANNOT_SEE_WARN_AT: Final = 3

#: How the summarizer's reason opens for a reply that says it cannot see the image: in
#: explanation mode the reason itself, in scoring mode its last attempt ("attempt 2: ...").
_CANNOT_SEE_OPENING = "the model says it cannot see the image"


def unread_kind(reason: str | None) -> str | None:
    """Return :data:`CANNOT_SEE` or :data:`OTHER` for why no answer was read, None for none.

    ``reason`` is the summarizer's ``unparseable_reason`` (or already a kind, as ``runs.unread``
    holds it, returned as it is)."""
    if reason is None:
        return None
    text = reason.strip().lstrip("'")  # a CSV cell neutralised for spreadsheets
    if not text:
        return None
    if text in UNREAD_KINDS:
        return text
    from ..options import UNREAD_REASONS

    opening = UNREAD_REASONS.get(CANNOT_SEE, _CANNOT_SEE_OPENING)
    if text.startswith(opening):
        return CANNOT_SEE
    # Scoring mode joins its attempts ("attempt 1: ...; attempt 2: <reason>: ..."), and stops
    # at the first reply that says it cannot see the image: that one is the last attempt, its
    # reason first or after what the attempt's first reply was ("attempt 1: <first>; <reason>:
    # ..." where a follow-up question was asked).
    last = text.rfind("; attempt ")
    tail = text[last + 2 :] if last >= 0 else text
    if tail.startswith("attempt "):
        _, _, after = tail.partition(": ")
        if after.startswith(opening) or f"; {opening}: " in after:
            return CANNOT_SEE
    return OTHER


def result_unread(result: Any) -> str | None:
    """Return the :func:`unread_kind` of a run's ``SummarizerOutput`` (None: an answer was read)."""
    if result is None or not getattr(result, "answer_unparseable", False):
        return None
    return unread_kind(getattr(result, "unparseable_reason", None)) or OTHER


def answering_model(configuration: Mapping[str, Any] | None) -> str | None:
    """Return ``backend/model`` of the role that answers (the summarizer's), from a job's
    configuration as a report shows it (``RunConfig.describe()``); None without one."""
    roles = (configuration or {}).get("roles") or {}
    role = roles.get("summarizer") or next(iter(roles.values()), None)
    if not role:
        return None
    model = role.get("model")
    return f"{role.get('backend')}/{model}" if model else str(role.get("backend"))


def cannot_see_warning(count: int, done: int, model: str | None) -> str | None:
    """Return the job's warning when ``count`` of its ``done`` items had a reply saying the
    model cannot see the image, from :data:`CANNOT_SEE_WARN_AT` on; else None."""
    if count < CANNOT_SEE_WARN_AT:
        return None
    percent = 100 * count / done if done else 0.0
    shown = f"{percent:.0f}" if percent >= 1 else f"{percent:.1g}"  # 0.0003% of a million
    share = f" ({shown}% of {done} done)" if done else ""
    who = f"the model ({model})" if model else "the model"
    return (
        f"{count} items{share}: {who} says it cannot see the image, so it may not be receiving "
        "the images (a text-only model, or a server or proxy that drops them): check that the "
        "model takes images and that its server passes them on (a request over the server's "
        "size limit: a lower `max_image_side` in configs/model_backends.yaml); these items "
        "count as unanswered"
    )
