"""Run a dataset job in this process from the command line, and stop it cleanly.

:func:`run_here` runs the job's open items with a bar on a terminal (a plain line in a log);
a Ctrl-C or SIGTERM marks the job interrupted and says how to resume it, a full disk marks it
so and says how much space to free.  :func:`hold_here` makes this process the job's holder
before a resume, waiting out another process's leases or taking them over.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import typer

from .common import (
    err,
    fail,
)
from .progress import (
    DEFAULT_EVERY,
    Pace,
    job_bar,
    pace_text,
    printing_progress,
)


def job_agents() -> Any:
    """Return the agents per job configuration: each item runs as its job was submitted."""
    from ..agents.team import AgentsCache

    return AgentsCache()


def run_here(
    engine: Any,
    job_id: str,
    agents: Any,
    workers: int,
    every: float = DEFAULT_EVERY,
    restart: Sequence[str] = (),
) -> None:
    """Run the job's open items here: a bar with rate and ETA on a terminal, else a plain
    progress line every ``every`` seconds.  ``restart``: runs a resume found in flight."""
    import time

    from ..runtime.local import run_local
    from ..runtime.progress import progress

    if not err.is_terminal:
        with (
            _stopping_on_ctrl_c(engine, job_id) as interrupted,
            _stopping_on_a_full_disk(engine, job_id),
            printing_progress(engine, job_id, every),
        ):
            run_local(
                engine, job_id, agents, workers=workers, restart=restart, on_interrupt=interrupted
            )
        return
    current = progress(engine, job_id)
    pace = Pace(time.monotonic(), current.finished)
    with job_bar(err) as bar:
        task = bar.add_task(
            f"job {job_id[:8]} (local, {workers} threads)",
            total=current.total,
            completed=current.finished,
            rate=pace_text(None, current.total - current.finished),
        )

        done = current.finished

        def ended(count: int) -> None:
            nonlocal done
            done += count
            bar.update(
                task,
                completed=done,
                rate=pace_text(pace.per_second(done, time.monotonic()), current.total - done),
            )

        with (
            _stopping_on_ctrl_c(engine, job_id) as interrupted,
            _stopping_on_a_full_disk(engine, job_id, bar.stop),
        ):
            run_local(
                engine,
                job_id,
                agents,
                workers=workers,
                on_progress=ended,
                restart=restart,
                on_interrupt=interrupted,
            )


@contextlib.contextmanager
def _stopping_on_ctrl_c(engine: Any, job_id: str) -> Iterator[Callable[[], None]]:
    """Stop a job run here on Ctrl-C or SIGTERM: the job is marked interrupted at once (by the run,
    or here if it came before the run began) and one line says how to resume it; the command
    ends with 130 (143 for SIGTERM) once the items in flight have ended, or at once on a second
    signal (those items are then left to the resume)."""
    import os
    import signal
    import threading

    from ..runtime.local import Terminated, note_interrupted, signal_name

    said = False

    def interrupted() -> None:
        nonlocal said
        said = True
        err.print(
            f"interrupted: `agentic-iqa eval resume {job_id[:8]}` continues it (the "
            "items in flight end first; a second Ctrl-C stops at once)",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )

    def terminated(_signum: int, _frame: Any) -> None:
        raise Terminated

    # Signal handlers belong to the main thread (a CliRunner in another one runs without).
    here = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminated) if here else None
    try:
        yield interrupted
    except KeyboardInterrupt as interrupt:
        code = 143 if isinstance(interrupt, Terminated) else 130
        if not said:
            note_interrupted(engine, job_id, signal_name(interrupt))
            interrupted()
        if any(
            thread.name.startswith("iqa-job") and thread.is_alive()
            for thread in threading.enumerate()
        ):  # the second signal: stop now
            sys.stderr.flush()
            os._exit(code)
        raise typer.Exit(code) from None
    finally:
        if here:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _stopping_on_a_full_disk(engine: Any, job_id: str, before: Any = None) -> Iterator[None]:
    """Stop a job run here on a full disk: the job is marked so (status says "interrupted
    (disk full)", not an ETA) and one line says how much space to free and how to resume."""
    from ..runtime.local import note_disk_full
    from ..runtime.space import megabytes, space_mark, space_needed
    from .faults import disk_full

    reserve = _reserve_space(engine)
    mark = space_mark(engine, job_id)  # what each item adds is measured from here
    try:
        yield
    except Exception as exc:
        if not disk_full(exc):
            raise
        if before is not None:
            before()
        if reserve is not None:  # room for the note that says why the job stopped
            reserve.unlink(missing_ok=True)
        needed = space_needed(engine, job_id, mark, held=RESERVE_BYTES)
        note_disk_full(engine, job_id, needed)
        amount = f" (about {megabytes(needed)} more)" if needed else ""
        fail(
            f"job {job_id[:8]} stopped: the disk holding the results database is full; "
            f"free space{amount}, then `agentic-iqa eval resume {job_id[:8]}` continues "
            "it where it stopped",
            code=2,
        )
    finally:
        if reserve is not None:
            reserve.unlink(missing_ok=True)


#: Bytes held beside a SQLite database while a job runs here (:func:`_reserve_space`).
RESERVE_BYTES = 256 << 10


def _reserve_space(engine: Any) -> Path | None:
    """Return a little space held on the disk of a SQLite database while a job runs here, given back
    when that disk fills, so that the job can still be marked as stopped by a full disk (a
    disk filled to the last page takes no write, not even that note)."""
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if not database or database == ":memory:":
        return None
    path = Path(f"{database}.reserve")
    try:
        path.write_bytes(bytes(RESERVE_BYTES))
    except OSError:  # already full, or not ours to write: the note may then fail, as before
        path.unlink(missing_ok=True)
        return None
    return path


#: Seconds between two countdown lines while a resume waits for leases (not on a terminal).
LEASE_LINE_EVERY = 10.0


def hold_here(engine: Any, job_id: str, *, take_over: bool = False, yes: bool = False) -> None:
    """Make this process the job's holder before anything changes, or exit 1 with one line.

    A holder of this host that is gone (killed) is taken over at once.  One that is alive here
    means another process runs the job: two resumes would race for the same items.  One this
    host cannot see (another machine, or workers) is waited for, a countdown to its last lease,
    until the leases run out; if they are renewed meanwhile, their holder is alive.
    ``take_over``: go on now, after a confirmation (``yes``: none).
    """
    import time

    from ..runtime import local
    from ..runtime.progress import progress

    if progress(engine, job_id).disk_full:  # its leases outlive a full disk's stop
        return
    found = local.take_over(engine, job_id)
    if found.taken:
        if found.live and found.holder is not None:
            err.print(
                f"job {job_id[:8]}: {found.holder.describe()}, which ran it, is gone; "
                f"taking over its {found.live} runs in flight now",
                highlight=False,
                soft_wrap=True,
            )
        return
    short = job_id[:8]
    holder = found.holder.describe() if found.holder is not None else "another process"
    if take_over:
        alive = " and it is still running" if found.state == "alive" else ""
        if not yes and not typer.confirm(
            f"job {short}: {found.live} runs hold a live lease of {holder}{alive}; taking "
            "over runs them here too, and what it is computing now is done twice. Take "
            "over?",
            err=True,
        ):
            fail(f"job {short} left to {holder}", code=1)
        local.take_over(engine, job_id, force=True)
        return

    def busy(renewed: bool) -> None:
        why = "; they are being renewed" if renewed else ""
        fail(
            f"job {short} is being run by another process ({found.live} runs hold a live "
            f"lease of {holder}{why}): let it finish, or follow it with `agentic-iqa eval "
            f"status {short} --watch`; once it is gone, `agentic-iqa eval resume {short}` "
            "continues it (`--take-over` runs it here now)",
            code=1,
        )

    if found.state == "alive":
        busy(renewed=False)
    first_until, last_line = found.until, -LEASE_LINE_EVERY
    with err.status("") if err.is_terminal else contextlib.nullcontext() as shown:
        while not found.taken:
            if found.until and first_until and found.until > first_until:
                busy(renewed=True)
            left = found.seconds_left
            text = (
                f"job {short}: {found.live} runs hold a lease of {holder}, which this host "
                f"cannot check; waiting {left:.0f} s for it to run out (`--take-over` goes "
                "on now)"
            )
            if shown is not None:
                shown.update(text)
            elif time.monotonic() - last_line >= LEASE_LINE_EVERY:
                err.print(text, highlight=False, soft_wrap=True, markup=False)
                last_line = time.monotonic()
            time.sleep(min(1.0, max(0.05, left)))
            found = local.take_over(engine, job_id)
