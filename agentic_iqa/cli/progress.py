"""Follow a job's progress on the command line: rate, ETA, a bar, or the plain line a log gets.

A progress bar is drawn only on a terminal: with stderr in a file (``nohup``, Slurm) rich
prints nothing until the job ends, so a long job's log would stay silent for hours.  There the
CLI writes :func:`progress_line` every ``--progress-every`` seconds instead
(:func:`printing_progress`), and the bar on a terminal (:func:`follow_job`) shows the same
rate and ETA (:func:`pace_text`).  The text is made by pure functions of numbers (no clock
read, no database, no rich) so that tests can call them directly; the followers read the
database and import rich in their bodies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .common import err

#: Seconds between two progress lines in a log (``--progress-every``): at least one a minute.
DEFAULT_EVERY = 30.0
#: The smallest ``--progress-every`` accepted (a log line every tenth of a second at most).
MIN_EVERY = 0.1


def rate(items: int, seconds: float) -> float | None:
    """Return items per second over ``seconds``; None before any item ended (no rate to tell
    yet)."""
    if items <= 0 or seconds <= 0:
        return None
    return items / seconds


def eta_seconds(remaining: int, per_second: float | None) -> float | None:
    """Return seconds until ``remaining`` items end at ``per_second``; 0 when none remain, None when
    the rate is unknown."""
    if remaining <= 0:
        return 0.0
    if not per_second or per_second <= 0:
        return None
    return remaining / per_second


def rate_text(per_second: float | None) -> str:
    """Return "3.4 items/s" from one item a second up, "12.0 items/min" below it (a slow agent job
    reads "0.02 items/s" badly)."""
    if per_second is None:
        return "no item ended yet"
    if per_second >= 1:
        return f"{per_second:.1f} items/s"
    return f"{per_second * 60:.1f} items/min"


def clock(seconds: float) -> str:
    """Return a duration a person reads at a glance: "45s", "3m 20s", "2h 05m", "1d 03h"."""
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
    """Return "ETA 3m 20s", or "ETA unknown" while there is no rate."""
    return "ETA unknown" if seconds is None else f"ETA {clock(seconds)}"


def pace_text(per_second: float | None, remaining: int) -> str:
    """Return rate and ETA, as the bar and the log line show them: "14.2 items/min, ETA 19m 43s"."""
    return f"{rate_text(per_second)}, {eta_text(eta_seconds(remaining, per_second))}"


def progress_line(
    job_id: str,
    counts: Mapping[str, int],
    *,
    elapsed: float,
    per_second: float | None,
    stalled: int = 0,
) -> str:
    """Return one line for a log: "job 1a2b3c4d: 120/400 finished (118 done, 2 failed) after 8m 27s,
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


def describe_pace(current: Any, seen: float | None = None) -> str:
    """Return rate and ETA, or the stalled count instead of an ETA that would be a lie (and no ETA
    for a job whose process is gone).  ``seen``: items per second while this process followed
    the job; by default (or before any item ended) the job's own rate since it was submitted."""
    per_second = seen if seen is not None else (current.throughput if current.finished else None)
    text = rate_text(per_second)
    if current.stalled:
        return text + (
            f", {current.stalled} stalled (no progress for a lease: being re-sent, "
            "or no worker is running; with none, `agentic-iqa eval resume "
            f"{current.job_id[:8]}` continues it)"
        )
    remaining = current.total - current.finished
    if current.orphaned or current.interrupted or not remaining:
        return text
    return f"{text}, {eta_text(eta_seconds(remaining, per_second))}"


def job_bar(console: Any) -> Any:
    """Return the terminal bar a followed job is drawn in: done of total, pace, time elapsed.

    A rich ``Progress`` on ``console``; its task's ``rate`` field holds the pace and ETA.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
    )


def follow_job(engine: Any, job_id: str, every: float = DEFAULT_EVERY) -> None:
    """Follow a job the workers run until it ends: a bar with rate and ETA on a terminal,
    else a plain line every ``every`` seconds (a bar in a log file prints only at the end)."""
    import time

    from ..runtime.progress import Progress as JobProgress
    from ..runtime.progress import progress, wait

    if not err.is_terminal:
        with printing_progress(engine, job_id, every):
            wait(engine, job_id)
        return
    first = progress(engine, job_id)
    pace = Pace(time.monotonic(), first.finished)
    with job_bar(err) as bar:
        task = bar.add_task(
            f"job {job_id[:8]}",
            total=first.total,
            completed=first.finished,
            rate=describe_pace(first),
        )

        def show(current: JobProgress) -> None:
            seen = pace.per_second(current.finished, time.monotonic())
            bar.update(
                task,
                total=current.total,
                completed=current.finished,
                rate=describe_pace(current, seen),
            )

        wait(engine, job_id, on_progress=show)


@contextlib.contextmanager
def printing_progress(engine: Any, job_id: str, every: float) -> Iterator[None]:
    """While the block runs, a plain progress line on stderr every ``every`` seconds, read
    from the database (what a log file under nohup or Slurm shows of a job)."""
    import threading
    import time

    from sqlalchemy.exc import SQLAlchemyError

    from ..runtime.progress import progress

    pace = Pace(time.monotonic(), progress(engine, job_id).finished)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(every):
            try:
                current = progress(engine, job_id)
            except SQLAlchemyError:  # a busy or failing database costs a line, not the job
                continue
            line = progress_line(
                job_id,
                current.counts,
                elapsed=current.elapsed,
                per_second=pace.per_second(current.finished, time.monotonic()),
                stalled=current.stalled,
            )
            err.print(line, markup=False, highlight=False, soft_wrap=True)

    thread = threading.Thread(target=report, name="iqa-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
