"""When a job stops early: policy as a pure function of what its runs met.

A backend that refuses every request (a wrong key, no access to the model, an unknown model or
endpoint) fails every item the same way; a job should say so once and stop, not record the same
failure ten thousand times and end "done".  A 400 (bad request) can also be one item's own (an
image the provider will not take), so it stops the job only when it keeps coming and nothing has
succeeded: the first :data:`BAD_REQUESTS_TO_STOP` items all failed with it.
"""

from __future__ import annotations

#: Statuses that no item will get past: unauthorised, forbidden, not found (a model's name).
STOP_AT_ONCE = frozenset({401, 403, 404})
#: Items failed by a 400, with none done, that stop a job.
BAD_REQUESTS_TO_STOP = 3


def stops_job(status: int | None, *, done: int, failed_alike: int) -> bool:
    """Whether a run failing with a fatal backend error of HTTP ``status`` (None: the backend is
    not configured, e.g. no key) stops its job, given the job's ``done`` items and the items
    already failed by the same status (this one included)."""
    if status is None or status in STOP_AT_ONCE:
        return True
    return status == 400 and done == 0 and failed_alike >= BAD_REQUESTS_TO_STOP


def stop_message(reason: str) -> str:
    """The one line a stopped job shows: what failed, and that resuming needs the cause fixed."""
    return (
        f"stopped: the backend refuses every request ({reason}); fix the cause (key, model, "
        "base URL, or the image store's credential), then `agentic-iqa eval resume` runs "
        "the items that did not finish"
    )
