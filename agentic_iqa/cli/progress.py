"""A followed job's progress as text: rate, ETA and the plain line a log file gets.

A progress bar is drawn only on a terminal: with stderr in a file (``nohup``, Slurm) rich
prints nothing until the job ends, so a 400-item job's log stayed silent for hours.  There the
CLI writes :func:`progress_line` every ``--progress-every`` seconds instead, and the bar on a
terminal shows the same rate and ETA (:func:`pace_text`).  Pure functions of numbers (no clock
read, no database, no rich) so that tests can call them directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Seconds between two progress lines in a log (``--progress-every``): at least one a minute.
DEFAULT_EVERY = 30.0
#: The smallest ``--progress-every`` accepted (a log line every tenth of a second at most).
MIN_EVERY = 0.1


def rate(items: int, seconds: float) -> float | None:
    """Items per second over ``seconds``; None before any item ended (no rate to tell yet)."""
    if items <= 0 or seconds <= 0:
        return None
    return items / seconds


def eta_seconds(remaining: int, per_second: float | None) -> float | None:
    """Seconds until ``remaining`` items end at ``per_second``; 0 when none remain, None when
    the rate is unknown."""
    if remaining <= 0:
        return 0.0
    if not per_second or per_second <= 0:
        return None
    return remaining / per_second


def rate_text(per_second: float | None) -> str:
    """ "3.4 items/s" from one item a second up, "12.0 items/min" below it (a slow agent job
    reads "0.02 items/s" badly)."""
    if per_second is None:
        return "no item ended yet"
    if per_second >= 1:
        return f"{per_second:.1f} items/s"
    return f"{per_second * 60:.1f} items/min"


def clock(seconds: float) -> str:
    """A duration a person reads at a glance: "45s", "3m 20s", "2h 05m", "1d 03h"."""
    whole = max(0, round(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def eta_text(seconds: float | None) -> str:
    """ "ETA 3m 20s", or "ETA unknown" while there is no rate."""
    return "ETA unknown" if seconds is None else f"ETA {clock(seconds)}"


def pace_text(per_second: float | None, remaining: int) -> str:
    """Rate and ETA, as the bar and the log line show them: "14.2 items/min, ETA 19m 43s"."""
    return f"{rate_text(per_second)}, {eta_text(eta_seconds(remaining, per_second))}"


def progress_line(
    job_id: str,
    counts: Mapping[str, int],
    *,
    elapsed: float,
    per_second: float | None,
    stalled: int = 0,
) -> str:
    """One line for a log: "job 1a2b3c4d: 120/400 finished (118 done, 2 failed) after 8m 27s,
    14.2 items/min, ETA 19m 43s".  With stalled items the ETA would be a lie: their count
    replaces it."""
    total = sum(counts.values())
    ended = {state: counts.get(state, 0) for state in ("done", "failed")}
    if counts.get("cancelled"):
        ended["cancelled"] = counts["cancelled"]
    finished = sum(ended.values())
    tally = ", ".join(f"{count} {state}" for state, count in ended.items())
    head = f"job {job_id[:8]}: {finished}/{total} finished ({tally}) after {clock(elapsed)}"
    if stalled:
        return f"{head}, {rate_text(per_second)}, {stalled} stalled: no ETA"
    return f"{head}, {pace_text(per_second, total - finished)}"


@dataclass
class Pace:
    """The rate at which items end while this process follows a job: counted from when it
    started following, not from the job's creation (a resumed job's first day would make
    today's rate look tiny)."""

    started: float
    finished_then: int

    def per_second(self, finished: int, now: float) -> float | None:
        return rate(finished - self.finished_then, now - self.started)
