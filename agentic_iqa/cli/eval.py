"""Submit, resume and cancel dataset jobs from the command line (``agentic-iqa eval ...``).

The ``eval`` group is assembled here: its commands that start or stop a job live in this
module, :mod:`.estimate` prices one first, :mod:`.results` shows and exports what it gave;
:mod:`.local_run` runs a job in this process, :mod:`.progress` follows one.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import (
    err,
    explain_not_found,
    fail,
    format_duration,
    open_engine,
    out,
    read_broker_url,
    redact_url,
    resolve_job,
    summarize_error,
)
from .estimate import estimate
from .jobflags import JobFlags, ProgressEveryOption, base_spec, job_options, job_specs
from .local_run import hold_here, job_agents, run_here
from .progress import (
    DEFAULT_EVERY,
    follow_job,
)
from .results import export, export_rows, report, report_document, status
from .traces import show
from .tracking import check_trackers, later, log_job

eval_app = typer.Typer(
    help="Dataset evaluation jobs: submit, watch, resume, export, report.", no_args_is_help=True
)


def _summary(engine: Any, job_id: str) -> None:
    """Print, after waiting for a job: counts, elapsed time, where the results are, what to run next
    (on stderr: stdout holds only the job id, for scripts)."""
    from ..runtime.lifecycle import job_spec
    from ..runtime.progress import progress

    current = progress(engine, job_id)
    counts = current.counts
    short = job_id[:8]
    subset = job_spec(engine, job_id).subset.describe()
    tally = ", ".join(f"{counts.get(state, 0)} {state}" for state in ("done", "failed")) + "".join(
        f", {counts[state]} {state}"
        for state in ("cancelled", "queued", "pending")
        if counts.get(state)
    )
    lines = [
        f"job {short} ({current.name}{', ' + subset if subset else ''}) {current.status} after "
        f"{format_duration(current.elapsed)}: "
        f"{tally} of {current.total} items",
        f"results: job {job_id} in {redact_url(engine)}",
        "next:",
        f"  agentic-iqa eval status {short}",
        f"  agentic-iqa eval report {short} [--html report.html]",
        f"  agentic-iqa eval export {short} --format csv -o results.csv",
        f"  agentic-iqa runs list --job {short}",
    ]
    lines[1:1] = [f"warning: {warning}" for warning in current.warnings]
    for text in lines:
        err.print(escape(text), highlight=False, soft_wrap=True)


@job_options
def submit(flags: JobFlags) -> None:
    """Create a job from a manifest and start it (Celery workers, or locally without a broker).

    The job stores how it is run (backends, models and base URLs per role, prompts, tools,
    caches; never a key): every item runs so, wherever and whenever it runs.  A configuration
    that cannot work (a missing key, an endpoint that does not answer, an unknown model or
    tool) exits 2 with one line before anything is stored.  Exits 1 if the job is cancelled or
    stopped while this command waits for it (--wait, or a local run); Ctrl-C on a local run
    marks the job interrupted and says how to resume it (exit 130).

    Several --model or --dataset values make a sweep: one job per (model, dataset), all under
    one --group; each job id is printed on its own line, and `eval compare --group NAME` puts
    them in one table.  `eval estimate` takes the same flags: replace submit by estimate to
    learn what the job will cost first.

    --mlflow URI / --wandb PROJECT log each job this command waits for (run here, or with
    --wait) to an experiment tracker when it ends, as `eval report JOB --mlflow URI` does; a
    job handed to the workers without --wait is logged by that command once it has ended.
    """
    check_trackers(flags.mlflow, flags.wandb)  # a missing library fails before anything is stored
    track = {"mlflow": flags.mlflow, "wandb": flags.wandb}
    base = base_spec(flags)  # the whole job, checked once, before anything is captured
    broker = read_broker_url()
    if broker:  # a job the workers will never hear of must not be stored
        _check_broker(broker)
    planned = job_specs(flags, base, here=not broker)
    sweep, group, wait = planned.sweep, planned.group, flags.wait
    engine = _database()
    if not sweep and not planned.specs[0].batch:
        _submit_running(engine, planned.specs[0], broker, flags, track)
        return
    job_ids = [_submit_spec(engine, spec, single=not sweep) for spec in planned.specs]
    if sweep:
        err.print(
            f"group {group}: {len(job_ids)} jobs ({planned.models} models x "
            f"{planned.datasets} datasets); when they end: `agentic-iqa eval "
            f"compare --group {group}`",
            highlight=False,
            soft_wrap=True,
        )
    runnable = [job_id for job_id in job_ids if job_id is not None]
    failed = len(runnable) < len(job_ids)
    if broker:
        from workers.tasks import start_job

        for job_id in runnable:
            start_job(job_id)
        for job_id in runnable:
            if wait:
                follow_job(engine, job_id, flags.progress_every)
                _summary(engine, job_id)
                _log_ended_job(engine, job_id, **track)
                failed |= _ended_badly(engine, job_id, single=not sweep)
            else:
                err.print(
                    f"handed to the workers; follow it with `agentic-iqa eval status "
                    f"{job_id[:8]} --watch`",
                    highlight=False,
                    soft_wrap=True,
                )
                later(job_id, **track)
        if failed:
            raise typer.Exit(1)
        return
    # No broker: the job runs here, with the same steps, in a pool of threads.
    if wait:
        err.print(
            "note: no broker (AGENTIC_IQA_BROKER_URL is not set), so the job runs in this "
            "process and the command waits for it anyway: --wait changes nothing",
            highlight=False,
            soft_wrap=True,
        )
    for job_id in runnable:
        with contextlib.redirect_stdout(sys.stderr):
            run_here(engine, job_id, job_agents(), flags.workers, flags.progress_every)
        _summary(engine, job_id)
        _log_ended_job(engine, job_id, **track)
        failed |= _ended_badly(engine, job_id, single=not sweep)
    if failed:
        raise typer.Exit(1)


def _log_ended_job(engine: Any, job_id: str, *, mlflow: str | None, wandb: str | None) -> None:
    """Compute the report of a job this command waited for and log it to the trackers given
    (as ``eval report JOB --mlflow URI --wandb PROJECT`` does, with its default resampling)."""
    if mlflow is None and wandb is None:
        return
    from ..reports.figures import report_figures
    from ..reports.report_text import scored_label

    document, columns = report_document(engine, job_id)
    drawn = report_figures(document, columns, scored=scored_label(document))
    table = export_rows(engine, job_id)
    log_job(job_id, document, columns, drawn, table, mlflow=mlflow, wandb=wandb)


def _ended_badly(engine: Any, job_id: str, *, single: bool) -> bool:
    """Check a job as :func:`_end_of_wait` does: one job exits at once; a sweep's job says so and
    the others run (the command exits 1 at the end)."""
    if single:
        _end_of_wait(engine, job_id)
        return False
    try:
        _end_of_wait(engine, job_id)
    except typer.Exit:
        return True
    return False


def _submit_running(
    engine: Any, spec: Any, broker: str | None, flags: JobFlags, track: dict[str, str | None]
) -> None:
    """Submit one job whose items start as soon as its first rows are stored: here (no broker) or on
    the workers, while the rest of its rows are read; its id on stdout at once, its items and
    bad rows on stderr when every row is in; logged to the trackers in ``track`` when it ends
    (or, handed to the workers without --wait, how to log it later)."""
    from ..runtime.progress import progress
    from ..runtime.submission import Submission

    submission = Submission(engine, spec)
    job_id: str | None = None
    try:
        job_id = _submitted(engine, submission.started)
        print(job_id, flush=True)
        if broker:
            from workers.tasks import start_job

            start_job(job_id)
        elif flags.wait:
            err.print(
                "note: no broker (AGENTIC_IQA_BROKER_URL is not set), so the job runs in "
                "this process and the command waits for it anyway: --wait changes "
                "nothing",
                highlight=False,
                soft_wrap=True,
            )
        if not broker:
            with contextlib.redirect_stdout(sys.stderr):
                run_here(engine, job_id, job_agents(), flags.workers, flags.progress_every)
    except BaseException:
        if submission.reading:  # its rows after this one are never read: the job says so
            submission.stop()
            with contextlib.suppress(BaseException):
                submission.result()
            if job_id is not None:
                err.print(
                    f"job {job_id[:8]}: {progress(engine, job_id).error}",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )
        raise
    _submitted(engine, submission.result)
    tally = submission.tally
    _say_in_sample_left_out(spec, tally)
    if _items_stored(engine, job_id, spec, single=True, counts=(tally.items, tally.bad)) is None:
        return
    if broker and not flags.wait:
        err.print(
            f"handed to the workers; follow it with `agentic-iqa eval status {job_id[:8]} --watch`",
            highlight=False,
            soft_wrap=True,
        )
        later(job_id, **track)
        return
    if broker:
        follow_job(engine, job_id, flags.progress_every)
    _summary(engine, job_id)
    _log_ended_job(engine, job_id, **track)
    _end_of_wait(engine, job_id)


def _submit_spec(engine: Any, spec: Any, *, single: bool) -> str | None:
    """Store the job ``spec`` describes, print its id (stdout) and its items (stderr); None
    for a sweep's job with nothing to run (a single job exits 1 then)."""
    from ..runtime import submission

    tally = submission.Tally()
    job_id = _submitted(engine, lambda: submission.submit(engine, spec, tally=tally))
    print(job_id, flush=True)
    _say_in_sample_left_out(spec, tally)
    return _items_stored(engine, job_id, spec, single=single)


def _say_in_sample_left_out(spec: Any, tally: Any) -> None:
    """Say how many rows ``--exclude-in-sample`` left out, and how many it could not check."""
    if not spec.exclude_in_sample:
        return
    err.print(
        f"--exclude-in-sample: {tally.in_sample} in-sample item(s) not submitted (images the "
        "builtin backend was fitted on)",
        highlight=False,
        soft_wrap=True,
    )
    if tally.in_sample_unreadable:
        err.print(
            f"[yellow]warning:[/] {tally.in_sample_unreadable} image(s) could not be read to "
            "check them against the builtin's fitted images: submitted",
            highlight=False,
            soft_wrap=True,
        )


def _submitted(engine: Any, stored: Callable[[], str]) -> str:
    """Return the job id ``stored`` returns; its error as one line and the exit code it calls for
    (2: fix the configuration or the database; 1: the manifest)."""
    from sqlalchemy.exc import SQLAlchemyError

    from iqa_tools.errors import StorageMisconfigured

    from ..jobs.manifest import ManifestFormatError
    from ..jobs.tools import MetricToolsError
    from ..vlm.base import VLMError

    try:
        return stored()
    except (MetricToolsError, VLMError, StorageMisconfigured) as exc:
        fail(str(exc), code=2)
    except (ManifestFormatError, OSError) as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:  # read-only, full, gone: nothing more was stored
        from .faults import disk_full

        advice = (
            "free some space, then submit again"
            if disk_full(exc)
            else "check AGENTIC_IQA_DATABASE_URL, that the server is up and can be written"
        )
        fail(
            f"the results database {redact_url(engine)} refused the job: "
            f"{summarize_error(exc)}; {advice}",
            code=2,
        )
    raise AssertionError("unreachable")  # fail raised


def _items_stored(
    engine: Any, job_id: str, spec: Any, *, single: bool, counts: tuple[int, int] | None = None
) -> str | None:
    """Say how many items the job has and how many rows were bad (stderr); None for a sweep's
    job with nothing to run (a single job exits 1 then).  ``counts``: (items, bad rows) as its
    submit stored them; by default the job's items now (none has run yet)."""
    from ..runtime.progress import progress

    current = progress(engine, job_id)
    total, bad = counts or (current.total, current.counts.get("failed", 0))
    named = "" if single else f" ({current.name})"
    err.print(
        f"job {job_id}{named}: {total} items ({bad} bad rows recorded as failed)",
        highlight=False,
        soft_wrap=True,
    )
    if total and bad == total:
        _summary(engine, job_id)
        message = (
            f"job {job_id}: every item is a bad row, nothing to run; the first: "
            f"{_first_failure(engine, job_id)}"
        )
        if single:
            fail(message)
        from ..redact import redact

        err.print(
            f"[bold red]error:[/] {escape(redact(message) or '')}", highlight=False, soft_wrap=True
        )
        return None
    if spec.mos_range is None and (negative := _negative_mos_count(engine, job_id)):
        err.print(
            f"[yellow]warning:[/] {negative} items have a negative MOS; if the scale has "
            "no negative scores, declare it with --mos-range LOW HIGH so such rows are "
            "reported as bad",
            highlight=False,
            soft_wrap=True,
        )
    return job_id


def datasets(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The public datasets `eval submit --dataset NAME --root DIR` reads in their own format:
    the files each needs under DIR, its splits, its opinion scale and direction."""
    from dataclasses import asdict

    from ..datasets import dataset_names, get_dataset

    infos = [get_dataset(name).info for name in dataset_names()]
    if as_json:
        print(json.dumps([asdict(info) for info in infos], indent=2))
        return
    for info in infos:
        scale = (
            f"MOS {info.mos_range[0]:g}-{info.mos_range[1]:g}, "
            f"{'higher' if info.higher_is_better else 'lower'} is better"
            if info.mos_range
            else "multiple choice"
        )
        out.print(
            f"[bold]{escape(info.name)}[/] ({escape(info.title)}): {escape(scale)}; "
            f"splits {escape(', '.join(info.splits))} (default {escape(info.default_split)})"
            f"\n  reads {escape(info.files)}\n  {escape(info.url)}",
            highlight=False,
            soft_wrap=True,
        )


def _check_broker(url: str) -> None:
    """Exit 2 with one line when the broker does not answer (within a few seconds)."""
    from kombu import Connection

    from ..redact import redact

    try:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=3
            )
    except Exception as exc:
        from .faults import broker_refused_credentials

        if broker_refused_credentials(exc):
            fail(
                f"the broker at {redact(url)} refused its credentials ({summarize_error(exc)}): "
                "fix the user or password in AGENTIC_IQA_BROKER_URL",
                code=2,
            )
        fail(
            f"the broker at {redact(url)} does not answer ({type(exc).__name__}: "
            f"{summarize_error(exc)}); start it, or unset AGENTIC_IQA_BROKER_URL to run the job "
            "here",
            code=2,
        )


def _database() -> Any:
    """Return the results database, migrated (created when it is a SQLite file not there yet: a job
    is about to be stored); one line and exit 2 when it cannot be opened."""
    from sqlalchemy.exc import SQLAlchemyError as DatabaseError

    try:
        return open_engine(create=True)
    except DatabaseError as exc:
        fail(f"the results database cannot be opened: {summarize_error(exc)}", code=2)


def _negative_mos_count(engine: Any, job_id: str) -> int:
    """Return items with a MOS below zero: legal without --mos-range, but often a sign of a typo."""
    from sqlalchemy import func, select

    from ..db.engine import read_scope
    from ..db.models import JobItem

    with read_scope(engine) as session:
        return int(
            session.scalar(select(func.count()).where(JobItem.job_id == job_id, JobItem.mos < 0))
            or 0
        )


def _first_failure(engine: Any, job_id: str) -> str:
    from ..db.engine import read_scope
    from ..db.items import failed_items
    from ..redact import redact

    with read_scope(engine) as session:
        failed = failed_items(session, job_id, limit=1)
        return redact(failed[0].error or "(no reason recorded)") if failed else "(none)"


def _end_of_wait(engine: Any, job_id: str) -> None:
    """Say, after waiting for a job, when it was cancelled or every item failed,
    with exit code 1 (a script must not read an empty table as a result)."""
    from ..runtime.progress import progress

    current = progress(engine, job_id)
    if current.total and current.counts.get("failed", 0) == current.total:
        fail(
            f"job {job_id}: every item failed ({current.total}); the first: "
            f"{_first_failure(engine, job_id)}"
        )
    if current.status == "cancelled" and current.error:
        fail(f"job {job_id} {current.error}")
    if current.status == "cancelled":
        fail(
            f"job {job_id} was cancelled: {current.finished} of {current.total} items "
            "finished; `agentic-iqa eval resume` continues it"
        )


def resume(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1)] = 2,
    wait: Annotated[bool, typer.Option("--wait")] = False,
    progress_every: ProgressEveryOption = DEFAULT_EVERY,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help="run it here now, even while another process may hold its leases (asks first)",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask (with --take-over)")] = False,
) -> None:
    """Re-queue only unfinished or failed items; finished items are never recomputed.

    The items run as the job was submitted (its stored backends, models, prompts and tools),
    whatever this shell's environment says; run here, a job this process cannot run so (no key
    for its backend) exits 2 with what to set, before anything changes.

    Run here, a job whose process on this host is gone (killed) is taken over at once; one
    whose leases are held by a process this host cannot see is waited for until its leases
    run out (a countdown), or taken over now with ``--take-over``.
    """
    from ..db.jobs import JobNotFound
    from ..runtime import lifecycle

    engine = open_engine()
    job = resolve_job(engine, job)
    broker = read_broker_url()
    if broker:  # a job reopened for workers that will never hear of it would wait for ever
        _check_broker(broker)
    else:
        _can_run_here(engine, job)
        hold_here(engine, job, take_over=take_over, yes=yes)
    try:
        reopened, unfinished = lifecycle.resume(engine, job)
    except JobNotFound as exc:
        fail(explain_not_found(engine, exc))
    err.print(
        f"job {job}: {reopened} items reopened, {len(unfinished)} unfinished runs restarted",
        highlight=False,
        soft_wrap=True,
    )
    if read_broker_url():
        from workers.tasks import start_job

        start_job(job, unfinished)
        if wait:
            follow_job(engine, job, progress_every)
            _summary(engine, job)
            _end_of_wait(engine, job)
        return
    agents = job_agents()
    with contextlib.redirect_stdout(sys.stderr):
        run_here(engine, job, agents, workers, progress_every, restart=unfinished)
    _summary(engine, job)
    _end_of_wait(engine, job)


def _can_run_here(engine: Any, job_id: str) -> None:
    """Exit 2 with the reason when this process cannot run the job as it was submitted."""
    from ..db.about import job_spec
    from ..db.engine import read_scope
    from ..runconfig import CannotHonour, backend_configs, check_prompts
    from ..vlm.base import VLMConfigurationError
    from ..vlm.preflight import preflight

    with read_scope(engine) as session:  # the job's record says how it runs
        config = job_spec(session, job_id).config
    if config is None:
        return  # a job stored before configurations were kept: it runs as the environment says
    try:
        check_prompts(config)
        if not config.metric_tools:
            preflight(backend_configs(config))
    except (CannotHonour, VLMConfigurationError) as exc:
        fail(f"job {job_id[:8]} cannot run here: {exc}", code=2)


def cancel(job: Annotated[str, typer.Argument(help="job id or a unique prefix of one")]) -> None:
    """Stop a job: waiting items are cancelled, running ones end as cancelled.

    A batch job's open batches are cancelled at the provider too (what they answered so far is
    kept for a resume); one that cannot be now (the provider unreachable, no key here) is
    cancelled by the next round tick: the workers' supervisor, or this command run again.

    A job that already ended (done or cancelled) is left alone and the command exits 1, so a
    script that expects its cancel to have stopped something learns that it did not.
    """
    from ..db import jobs as store
    from ..db.batch_requests import is_batch_job
    from ..db.engine import session_scope
    from ..db.jobs import get_job
    from ..runtime import batches as rounds

    engine = open_engine()
    job = resolve_job(engine, job)
    try:
        with session_scope(engine) as session:  # status read and cancel in one transaction
            status = get_job(session, job).status
            batched = is_batch_job(session, job)
            cancelled = store.cancel(session, job) if status == "running" else None
    except store.JobNotFound as exc:
        fail(str(exc))
    stopped = (
        rounds.cancel(engine, job)
        if batched and status in ("running", "cancelled")
        else rounds.Cancelled()
    )
    if cancelled is None and not stopped.cancelled:
        fail(
            f"job {job} already finished ({status}); nothing to cancel"
            + "".join(f"; batch {why}" for why in stopped.deferred)
        )
    if cancelled is not None:
        from ..runtime.lifecycle import settle_if_idle

        settle_if_idle(engine, job)  # its figures for `eval list`, once
        out.print(
            f"job {job} cancelled ({cancelled} waiting items)", highlight=False, soft_wrap=True
        )
    for provider_id in stopped.cancelled + (stopped.cancelling if cancelled is not None else []):
        out.print(
            f"batch {provider_id} cancelled at the provider (what it answered so far is "
            "kept for a resume)",
            highlight=False,
            soft_wrap=True,
        )
    for why in stopped.deferred:
        out.print(
            f"batch not cancelled at the provider yet ({why}): the next round tick "
            f"cancels it (the workers' supervisor, or `eval cancel {job}` again)",
            highlight=False,
            soft_wrap=True,
        )


# In the order `eval --help` lists them (calibrate, compare and list are added by the package).
eval_app.command("submit")(submit)
eval_app.command("datasets")(datasets)
eval_app.command("estimate")(estimate)
eval_app.command("status")(status)
eval_app.command("resume")(resume)
eval_app.command("cancel")(cancel)
eval_app.command("show")(show)
eval_app.command("export")(export)
eval_app.command("report")(report)
