"""``agentic-iqa eval ...``: dataset jobs from the command line: submit, estimate, watch,
resume, cancel, export, report, calibrate."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.markup import escape

from .common import (
    _broker,
    _duration,
    _engine,
    _fail,
    _first_line,
    _found_nothing,
    _job_id,
    _safe_url,
    _write_figures,
    _write_page,
    err,
    out,
)
from .jobflags import JobFlags, ProgressEveryOption, base_spec, job_options, job_specs
from .progress import (
    DEFAULT_EVERY,
    Pace,
    eta_seconds,
    eta_text,
    pace_text,
    progress_line,
    rate_text,
)

eval_app = typer.Typer(
    help="Dataset evaluation jobs: submit, watch, resume, export, report.", no_args_is_help=True
)


def _summary(engine: Any, job_id: str) -> None:
    """After waiting for a job: counts, elapsed time, where the results are, what to run next
    (on stderr: stdout holds only the job id, for scripts)."""
    from ..runtime import lifecycle

    current = lifecycle.progress(engine, job_id)
    counts = current.counts
    short = job_id[:8]
    subset = lifecycle.job_spec(engine, job_id).subset.describe()
    tally = ", ".join(f"{counts.get(state, 0)} {state}" for state in ("done", "failed")) + "".join(
        f", {counts[state]} {state}"
        for state in ("cancelled", "queued", "pending")
        if counts.get(state)
    )
    lines = [
        f"job {short} ({current.name}{', ' + subset if subset else ''}) {current.status} after "
        f"{_duration(current.elapsed)}: "
        f"{tally} of {current.total} items",
        f"results: job {job_id} in {_safe_url(engine)}",
        "next:",
        f"  agentic-iqa eval status {short}",
        f"  agentic-iqa eval report {short} [--html report.html]",
        f"  agentic-iqa eval export {short} --format csv -o results.csv",
        f"  agentic-iqa runs list --job {short}",
    ]
    for text in lines:
        err.print(escape(text), highlight=False, soft_wrap=True)


def _pace(current: Any, seen: float | None = None) -> str:
    """Rate and ETA, or the stalled count instead of an ETA that would be a lie (and no ETA
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


def _progress_bar(engine: Any, job_id: str, every: float = DEFAULT_EVERY) -> None:
    """Follow a job the workers run until it ends: a bar with rate and ETA on a terminal,
    else a plain line every ``every`` seconds (a bar in a log file prints only at the end)."""
    import time

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..runtime import lifecycle

    if not err.is_terminal:
        with _progress_lines(engine, job_id, every):
            lifecycle.wait(engine, job_id)
        return
    first = lifecycle.progress(engine, job_id)
    pace = Pace(time.monotonic(), first.finished)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        task = bar.add_task(
            f"job {job_id[:8]}", total=first.total, completed=first.finished, rate=_pace(first)
        )

        def show(current: lifecycle.Progress) -> None:
            seen = pace.per_second(current.finished, time.monotonic())
            bar.update(
                task, total=current.total, completed=current.finished, rate=_pace(current, seen)
            )

        lifecycle.wait(engine, job_id, on_progress=show)


@contextlib.contextmanager
def _progress_lines(engine: Any, job_id: str, every: float) -> Iterator[None]:
    """While the block runs, a plain progress line on stderr every ``every`` seconds, read
    from the database (what a log file under nohup or Slurm shows of a job)."""
    import threading
    import time

    from sqlalchemy.exc import SQLAlchemyError

    from ..runtime import lifecycle

    pace = Pace(time.monotonic(), lifecycle.progress(engine, job_id).finished)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(every):
            try:
                current = lifecycle.progress(engine, job_id)
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


def _agents() -> Any:
    """The agents per job configuration: each item runs as its job was submitted."""
    from ..pipeline import AgentsCache

    return AgentsCache()


@eval_app.command("submit")
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
    """
    base = base_spec(flags)  # the whole job, checked once, before anything is captured
    broker = _broker()
    if broker:  # a job the workers will never hear of must not be stored
        _check_broker(broker)
    planned = job_specs(flags, base, here=not broker)
    sweep, group, wait = planned.sweep, planned.group, flags.wait
    engine = _database()
    if not sweep and not planned.specs[0].batch:
        _submit_running(engine, planned.specs[0], broker, flags)
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
                _progress_bar(engine, job_id, flags.progress_every)
                _summary(engine, job_id)
                failed |= _ended_badly(engine, job_id, single=not sweep)
            else:
                err.print(
                    f"handed to the workers; follow it with `agentic-iqa eval status "
                    f"{job_id[:8]} --watch`",
                    highlight=False,
                    soft_wrap=True,
                )
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
            _run_local(engine, job_id, _agents(), flags.workers, flags.progress_every)
        _summary(engine, job_id)
        failed |= _ended_badly(engine, job_id, single=not sweep)
    if failed:
        raise typer.Exit(1)


def _ended_badly(engine: Any, job_id: str, *, single: bool) -> bool:
    """:func:`_end_of_wait`: one job exits at once; a sweep's job says so and the others run
    (the command exits 1 at the end)."""
    if single:
        _end_of_wait(engine, job_id)
        return False
    try:
        _end_of_wait(engine, job_id)
    except typer.Exit:
        return True
    return False


def _submit_running(engine: Any, spec: Any, broker: str | None, flags: JobFlags) -> None:
    """One job whose items start as soon as its first rows are stored: here (no broker) or on
    the workers, while the rest of its rows are read; its id on stdout at once, its items and
    bad rows on stderr when every row is in."""
    from ..runtime import lifecycle

    submission = lifecycle.Submission(engine, spec)
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
                _run_local(engine, job_id, _agents(), flags.workers, flags.progress_every)
    except BaseException:
        if submission.reading:  # its rows after this one are never read: the job says so
            submission.stop()
            with contextlib.suppress(BaseException):
                submission.result()
            if job_id is not None:
                err.print(
                    f"job {job_id[:8]}: {lifecycle.progress(engine, job_id).error}",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )
        raise
    _submitted(engine, submission.result)
    tally = submission.tally
    if _items_stored(engine, job_id, spec, single=True, counts=(tally.items, tally.bad)) is None:
        return
    if broker and not flags.wait:
        err.print(
            f"handed to the workers; follow it with `agentic-iqa eval status {job_id[:8]} --watch`",
            highlight=False,
            soft_wrap=True,
        )
        return
    if broker:
        _progress_bar(engine, job_id, flags.progress_every)
    _summary(engine, job_id)
    _end_of_wait(engine, job_id)


def _submit_spec(engine: Any, spec: Any, *, single: bool) -> str | None:
    """Store the job ``spec`` describes, print its id (stdout) and its items (stderr); None
    for a sweep's job with nothing to run (a single job exits 1 then)."""
    from ..runtime import lifecycle

    job_id = _submitted(engine, lambda: lifecycle.submit(engine, spec))
    print(job_id, flush=True)
    return _items_stored(engine, job_id, spec, single=single)


def _submitted(engine: Any, stored: Callable[[], str]) -> str:
    """The job id ``stored`` returns; its error as one line and the exit code it calls for
    (2: fix the configuration or the database; 1: the manifest)."""
    from sqlalchemy.exc import SQLAlchemyError

    from iqa_tools.errors import StorageMisconfigured

    from ..jobs.manifest import ManifestFormatError
    from ..jobs.tools import MetricToolsError
    from ..vlm.base import VLMError

    try:
        return stored()
    except (MetricToolsError, VLMError, StorageMisconfigured) as exc:
        _fail(str(exc), code=2)
    except (ManifestFormatError, OSError) as exc:
        _fail(str(exc))
    except SQLAlchemyError as exc:  # read-only, full, gone: nothing more was stored
        from .faults import disk_full

        advice = (
            "free some space, then submit again"
            if disk_full(exc)
            else "check AGENTIC_IQA_DATABASE_URL, that the server is up and can be written"
        )
        _fail(
            f"the results database {_safe_url(engine)} refused the job: "
            f"{_first_line(exc)}; {advice}",
            code=2,
        )
    raise AssertionError("unreachable")  # _fail raised


def _items_stored(
    engine: Any, job_id: str, spec: Any, *, single: bool, counts: tuple[int, int] | None = None
) -> str | None:
    """Say how many items the job has and how many rows were bad (stderr); None for a sweep's
    job with nothing to run (a single job exits 1 then).  ``counts``: (items, bad rows) as its
    submit stored them; by default the job's items now (none has run yet)."""
    from ..runtime import lifecycle

    current = lifecycle.progress(engine, job_id)
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
            _fail(message)
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


def _place(text: str | None) -> Path | str | None:
    """A folder given on the command line: a path, or an object store's URL kept as is."""
    from iqa_tools.storage import is_url

    if text is None or is_url(text):
        return text
    return Path(text)


@eval_app.command("datasets")
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
            _fail(
                f"the broker at {redact(url)} refused its credentials ({_first_line(exc)}): "
                "fix the user or password in AGENTIC_IQA_BROKER_URL",
                code=2,
            )
        _fail(
            f"the broker at {redact(url)} does not answer ({type(exc).__name__}: "
            f"{_first_line(exc)}); start it, or unset AGENTIC_IQA_BROKER_URL to run the job "
            "here",
            code=2,
        )


def _database() -> Any:
    """The results database, migrated (created when it is a SQLite file not there yet: a job
    is about to be stored); one line and exit 2 when it cannot be opened."""
    from sqlalchemy.exc import SQLAlchemyError as DatabaseError

    try:
        return _engine(create=True)
    except DatabaseError as exc:
        _fail(f"the results database cannot be opened: {_first_line(exc)}", code=2)


def _vlm_summary(engine: Any, job_id: str) -> dict[str, Any]:
    from ..db import reads
    from ..db.engine import read_scope

    with read_scope(engine) as session:
        return reads.vlm_summary(session, job_id)


@eval_app.command("estimate")
@job_options
def estimate(
    flags: JobFlags,
    measure: Annotated[
        int,
        typer.Option(
            "--measure",
            min=1,
            metavar="N",
            help="how many of the job's items to run for real, drawn at random from them",
        ),
    ] = 5,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run a few of the job's items for real and extrapolate calls, tokens, cost and time.

    Takes every flag `eval submit` takes, read by the same code (--sample and --seed, --offset
    and --limit choose the job's rows as they would), so `eval estimate ARGS` estimates
    `eval submit ARGS`; --wait, --name, --group and --progress-every change nothing here.  A
    sweep is estimated job by job.

    The --measure items run here as the job would run them, --workers at once, in a scratch
    SQLite database that is deleted afterwards (the results database is not touched), with the
    VLM response cache and the tool score cache off so the figures are those of a cold run.
    The first wave of items carries the warm-up (imports, model loads) the job pays once; the
    items after it give the pace, so --measure should exceed --workers.  With --batch the
    items still run online (a batch can take hours); their calls are priced again at each
    provider's batch discount.
    """
    base = base_spec(flags)
    planned = job_specs(flags, base, here=True)
    results = [_estimate_job(spec, flags, measure) for spec in planned.specs]
    if as_json:
        print(
            json.dumps(
                results[0]
                if len(results) == 1
                else {
                    "group": planned.group,
                    "jobs": results,
                    "wall_seconds": sum(result["wall_seconds"] for result in results),
                },
                indent=2,
            )
        )
        return
    for spec, result in zip(planned.specs, results, strict=True):
        _print_estimate(spec, result, named=planned.sweep)
    if planned.sweep:
        out.print(
            f"the sweep: {len(results)} jobs, about "
            f"{_duration(sum(result['wall_seconds'] for result in results))} one after "
            "another here",
            highlight=False,
            soft_wrap=True,
        )


def _estimate_job(spec: Any, flags: JobFlags, measure: int) -> dict[str, Any]:
    """One job's estimate: ``measure`` of its items run here, cold, as many at once as the
    job will run, each timed as it ends, then extrapolated
    (:func:`agentic_iqa.jobs.estimate.extrapolate`)."""
    import os
    import tempfile
    import time

    from ..config import PipelineSettings
    from ..db import dispose_engines, make_engine, reads, upgrade
    from ..db.engine import read_scope
    from ..jobs.estimate import SamplePace, batch_pricing, extrapolate, sample_items
    from ..jobs.manifest import ManifestFormatError
    from ..runtime import lifecycle
    from ..vlm.usage import PriceTable

    source = spec.manifest if spec.manifest is not None else f"dataset {spec.dataset}"
    try:
        chosen, total = sample_items(spec, measure)
    except (ManifestFormatError, OSError) as exc:
        _fail(str(exc))
    if not chosen:
        _fail(f"{source}: no readable item to run")
    concurrency = min(flags.workers, PipelineSettings.load().job_window)
    cold = {"AGENTIC_IQA_VLM_CACHE": "false", "AGENTIC_IQA_TOOL_CACHE": "memory"}
    previous = {name: os.environ.get(name) for name in cold}
    os.environ.update(cold)
    try:
        with tempfile.TemporaryDirectory(prefix="agentic-iqa-estimate-") as scratch:
            lines = [
                json.dumps(
                    {
                        "image": str(item.image),
                        "id": item.item_id,
                        "reference": str(item.reference) if item.reference else None,
                        "query": item.query,
                    }
                )
                for item in chosen
            ]
            sample_manifest = Path(scratch) / "sample.jsonl"
            sample_manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
            url = f"sqlite:///{Path(scratch) / 'estimate.sqlite3'}"
            upgrade(url)
            engine = make_engine(url)
            config = spec.config.model_copy(update={"vlm_cache": False, "batch": False})
            # The sample runs online (a batch can take hours): priced at the discount below.
            job_id = lifecycle.submit(
                engine,
                spec.cell(  # read where the job's rows would be
                    manifest=sample_manifest,
                    dataset=None,
                    split=None,
                    root=None,
                    image_dir=None,
                    allowed_locations=spec.access_policy().as_allowed(),
                    limit=None,
                    offset=0,
                    sample=None,
                    seed=None,
                    mos_range=None,
                    score="mos",
                    check_images=False,
                    vlm_cache=False,
                    batch=False,
                    config=config,
                    group=None,
                    name=f"estimate {Path(str(source)).name}",
                ),
            )
            ended: list[float] = []

            def timed(count: int) -> None:
                ended.extend([time.perf_counter() - started] * count)

            started = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):  # as the job will: so many at once
                lifecycle.run_local(
                    engine, job_id, _agents(), workers=concurrency, on_progress=timed
                )
            seconds = time.perf_counter() - started
            with read_scope(engine) as session:
                prices = PriceTable.load()
                measured = reads.vlm_summary(session, job_id, prices)
                as_batch = (
                    batch_pricing(reads.vlm_usage(session, job_id=job_id), prices)
                    if spec.batch
                    else None
                )
                failed = [
                    (item.item_key, item.error) for item in reads.failed_items(session, job_id)
                ]
            dispose_engines(url)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if len(failed) == len(chosen):  # nothing to extrapolate from: say why, do not print zeros
        _fail(
            f"every sampled item failed ({len(failed)} of {len(chosen)}), so there is "
            f"nothing to estimate from: {failed[0][1]}"
        )
    result = extrapolate(
        measured,
        sample_items=len(chosen),
        sample_seconds=seconds,
        total_items=total,
        concurrency=concurrency,
        batch=as_batch,
        pace=SamplePace.of(ended, concurrency),
    )
    result.update(
        name=spec.name or spec.default_name(),
        sample_failed=len(failed),
        sample_failures=[{"item": key, "error": error} for key, error in failed],
        subset=spec.subset.describe() or None,
    )
    return result


def _print_estimate(spec: Any, result: dict[str, Any], *, named: bool) -> None:
    """One job's estimate as text: the sample, its pace, the extrapolated figures."""
    from ..jobs.estimate import describe_batch
    from ..vlm.usage import format_cost

    source = (
        Path(str(spec.manifest)).name if spec.manifest is not None else f"dataset {spec.dataset}"
    )
    rows = f"{result['total_items']} rows" + (f" ({result['subset']})" if result["subset"] else "")
    if named:
        out.print(f"job {escape(result['name'])}:", highlight=False, soft_wrap=True)
    out.print(
        f"measured: {result['sample_items']} items in {result['sample_seconds']:.1f} s, "
        f"{result['concurrency']} at once (warm-up {result['warmup_seconds']:.1f} s once, "
        f"then {result['seconds_per_item']:.2f} s an item); {escape(source)}: {rows}",
        highlight=False,
        soft_wrap=True,
    )
    failed = result["sample_failures"]
    if failed:
        err.print(
            f"[yellow]warning:[/] {len(failed)} of {result['sample_items']} measured items "
            f"failed (the estimate counts them as they cost): "
            f"{escape(failed[0]['error'] or '')}",
            highlight=False,
            soft_wrap=True,
        )
    out.print(
        f"estimate (extrapolated): {result['calls']:.0f} VLM calls, "
        f"{result['input_tokens']:.0f} input tokens, {result['output_tokens']:.0f} output "
        f"tokens, cost {format_cost(result['cost_usd'])} "
        f"({format_cost(result['cost_per_item_usd'])} per item), about "
        f"{result['wall_seconds']:.0f} s",
        highlight=False,
        soft_wrap=True,
    )
    if spec.batch:
        for line in describe_batch(result):
            out.print(line, highlight=False, soft_wrap=True)


def _negative_mos_count(engine: Any, job_id: str) -> int:
    """Items with a MOS below zero: legal without --mos-range, but often a sign of a typo."""
    from sqlalchemy import func, select

    from ..db.engine import read_scope
    from ..db.models import JobItem

    with read_scope(engine) as session:
        return int(
            session.scalar(select(func.count()).where(JobItem.job_id == job_id, JobItem.mos < 0))
            or 0
        )


def _first_failure(engine: Any, job_id: str) -> str:
    from ..db import reads
    from ..db.engine import read_scope
    from ..redact import redact

    with read_scope(engine) as session:
        failed = reads.failed_items(session, job_id, limit=1)
        return redact(failed[0].error or "(no reason recorded)") if failed else "(none)"


def _end_of_wait(engine: Any, job_id: str) -> None:
    """After waiting for a job: a cancelled job, or one where every item failed, is said so,
    with exit code 1 (a script must not read an empty table as a result)."""
    from ..runtime import lifecycle

    current = lifecycle.progress(engine, job_id)
    if current.total and current.counts.get("failed", 0) == current.total:
        _fail(
            f"job {job_id}: every item failed ({current.total}); the first: "
            f"{_first_failure(engine, job_id)}"
        )
    if current.status == "cancelled" and current.error:
        _fail(f"job {job_id} {current.error}")
    if current.status == "cancelled":
        _fail(
            f"job {job_id} was cancelled: {current.finished} of {current.total} items "
            "finished; `agentic-iqa eval resume` continues it"
        )


def _run_local(
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

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..runtime import lifecycle

    if not err.is_terminal:
        with (
            _stopping_on_ctrl_c(engine, job_id) as interrupted,
            _stopping_on_a_full_disk(engine, job_id),
            _progress_lines(engine, job_id, every),
        ):
            lifecycle.run_local(
                engine, job_id, agents, workers=workers, restart=restart, on_interrupt=interrupted
            )
        return
    current = lifecycle.progress(engine, job_id)
    pace = Pace(time.monotonic(), current.finished)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
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
            lifecycle.run_local(
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
    """Ctrl-C or SIGTERM on a job run here: the job is marked interrupted at once (by the run,
    or here if it came before the run began) and one line says how to resume it; the command
    ends with 130 (143 for SIGTERM) once the items in flight have ended, or at once on a second
    signal (those items are then left to the resume)."""
    import os
    import signal
    import threading

    from ..runtime import lifecycle

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
        raise lifecycle.Terminated

    # Signal handlers belong to the main thread (a CliRunner in another one runs without).
    here = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminated) if here else None
    try:
        yield interrupted
    except KeyboardInterrupt as interrupt:
        code = 143 if isinstance(interrupt, lifecycle.Terminated) else 130
        if not said:
            lifecycle.note_interrupted(engine, job_id, lifecycle.signal_name(interrupt))
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
    """A full disk while the job runs here: the job is marked so (status says "interrupted
    (disk full)", not an ETA) and one line says how much space to free and how to resume."""
    from ..runtime import lifecycle
    from .faults import disk_full

    reserve = _reserve_space(engine)
    try:
        yield
    except Exception as exc:
        if not disk_full(exc):
            raise
        if before is not None:
            before()
        if reserve is not None:  # room for the note that says why the job stopped
            reserve.unlink(missing_ok=True)
        needed = lifecycle.space_needed(engine, job_id)
        lifecycle.note_disk_full(engine, job_id, needed)
        amount = f" (about {needed / 1e6:.0f} MB more)" if needed else ""
        _fail(
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
    """A little space held on the disk of a SQLite database while a job runs here, given back
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


@eval_app.command("status")
def status(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="follow until the job ends")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    progress_every: ProgressEveryOption = DEFAULT_EVERY,
) -> None:
    """Counts by state, throughput and ETA (or how many items are stalled)."""
    from ..db.reads import JobNotFound
    from ..runtime import lifecycle

    engine = _engine()
    try:
        current = lifecycle.progress(engine, _job_id(engine, job))
    except JobNotFound as exc:
        _fail(_found_nothing(engine, exc))
    if watch and current.status == "running":
        _progress_bar(engine, current.job_id, progress_every)
        current = lifecycle.progress(engine, current.job_id)
    document: dict[str, Any] = {
        "job_id": current.job_id,
        "name": current.name,
        "status": "interrupted" if current.interrupted else current.status,
        "interrupted": current.interrupted,
        "total": current.total,
        "finished": current.finished,
        "counts": current.counts,
        "items_per_second": current.throughput,
        "eta_seconds": current.eta_seconds,
        "stalled": current.stalled,
        "kind": "metric" if current.tools else "agent",
        "tools": list(current.tools) if current.tools else None,
        "error": current.error,
        "waiting": current.waiting,
        "orphaned": current.orphaned,
        "vlm": _vlm_summary(engine, current.job_id),
        "batch": _batch_document(current.batch),
    }
    if as_json:
        print(json.dumps(document, indent=2))
        return
    from ..jobs.report import vlm_line

    out.print(
        f"job {current.job_id} ({escape(current.name)}): {current.state}",
        highlight=False,
        soft_wrap=True,
    )
    if current.error:
        out.print(f"  [red]{escape(current.error)}[/]", highlight=False, soft_wrap=True)
    if current.orphaned:
        out.print(
            f"  [yellow]the process that ran it here is gone (no item has moved for a "
            f"lease): `agentic-iqa eval resume {current.job_id[:8]}` continues it[/]",
            highlight=False,
            soft_wrap=True,
        )
    if current.waiting:
        out.print(
            f"  [yellow]waiting: {escape(current.waiting)}[/]", highlight=False, soft_wrap=True
        )
    if current.tools:
        out.print(
            f"  metric job (no agent): {', '.join(current.tools)}", highlight=False, soft_wrap=True
        )
    out.print(
        "  " + ", ".join(f"{k} {v}" for k, v in sorted(current.counts.items())),
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"  {current.finished}/{current.total} finished, {_pace(current)}",
        highlight=False,
        soft_wrap=True,
    )
    out.print(f"  VLM: {vlm_line(document['vlm'])}", highlight=False, soft_wrap=True)
    for line in _batch_lines(current.batch):
        out.print(f"  {escape(line)}", highlight=False, soft_wrap=True)


def _batch_document(batch: Any) -> dict[str, Any] | None:
    """A batch job's rounds for ``eval status --json``."""
    if batch is None:
        return None
    return {
        "round": batch.round,
        "requests": batch.requests,
        "open": [
            {
                "round": view.round,
                "role": view.role,
                "backend": view.backend,
                "model": view.model,
                "id": view.provider_id,
                "status": view.status,
                "requests": view.requests,
                "counts": view.counts,
                "expires_at": view.expires_at.isoformat() if view.expires_at else None,
                "error": view.error,
            }
            for view in batch.open
        ],
    }


def _batch_lines(batch: Any) -> list[str]:
    """The round, each open batch's state, counts and expiry, the requests waiting."""
    if batch is None:
        return []
    requests = batch.requests
    lines = [
        f"batch: round {batch.round}; requests: "
        + (
            ", ".join(
                f"{requests[state]} {state}"
                for state in ("answered", "submitted", "pending", "failed")
                if requests.get(state)
            )
            or "none yet"
        )
    ]
    for view in batch.open:
        counts = ", ".join(
            f"{count} {name}" for name, count in view.counts.items() if count and name != "total"
        )
        expires = f", expires {view.expires_at:%Y-%m-%d %H:%M} UTC" if view.expires_at else ""
        lines.append(
            f"  round {view.round} {view.backend}/{view.model} "
            f"{view.provider_id or '(being sent)'}: {view.status}, {view.requests} "
            f"requests{f' ({counts})' if counts else ''}{expires}"
        )
    return lines


@eval_app.command("resume")
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
    from ..db.reads import JobNotFound
    from ..runtime import lifecycle

    engine = _engine()
    job = _job_id(engine, job)
    broker = _broker()
    if broker:  # a job reopened for workers that will never hear of it would wait for ever
        _check_broker(broker)
    else:
        _can_run_here(engine, job)
        _not_run_elsewhere(engine, job, take_over=take_over, yes=yes)
    try:
        reopened, unfinished = lifecycle.resume(engine, job)
    except JobNotFound as exc:
        _fail(_found_nothing(engine, exc))
    err.print(
        f"job {job}: {reopened} items reopened, {len(unfinished)} unfinished runs restarted",
        highlight=False,
        soft_wrap=True,
    )
    if _broker():
        from workers.tasks import start_job

        start_job(job, unfinished)
        if wait:
            _progress_bar(engine, job, progress_every)
            _summary(engine, job)
            _end_of_wait(engine, job)
        return
    agents = _agents()
    with contextlib.redirect_stdout(sys.stderr):
        _run_local(engine, job, agents, workers, progress_every, restart=unfinished)
    _summary(engine, job)
    _end_of_wait(engine, job)


#: Seconds between two countdown lines while a resume waits for leases (not on a terminal).
LEASE_LINE_EVERY = 10.0


def _not_run_elsewhere(
    engine: Any, job_id: str, *, take_over: bool = False, yes: bool = False
) -> None:
    """Make this process the job's holder before anything changes, or exit 1 with one line.

    A holder of this host that is gone (killed) is taken over at once.  One that is alive here
    means another process runs the job: two resumes would race for the same items.  One this
    host cannot see (another machine, or workers) is waited for, a countdown to its last lease,
    until the leases run out; if they are renewed meanwhile, their holder is alive.
    ``take_over``: go on now, after a confirmation (``yes``: none).
    """
    import time

    from ..runtime import lifecycle

    if lifecycle.progress(engine, job_id).disk_full:  # its leases outlive a full disk's stop
        return
    found = lifecycle.take_over(engine, job_id)
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
            _fail(f"job {short} left to {holder}", code=1)
        lifecycle.take_over(engine, job_id, force=True)
        return

    def busy(renewed: bool) -> None:
        why = "; they are being renewed" if renewed else ""
        _fail(
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
            found = lifecycle.take_over(engine, job_id)


def _can_run_here(engine: Any, job_id: str) -> None:
    """Exit 2 with the reason when this process cannot run the job as it was submitted."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..runconfig import CannotHonour, backend_configs, check_prompts
    from ..vlm.base import VLMConfigurationError
    from ..vlm.preflight import preflight

    with read_scope(engine) as session:  # the job's record says how it runs
        config = reads.job_spec(session, job_id).config
    if config is None:
        return  # a job stored before configurations were kept: it runs as the environment says
    try:
        check_prompts(config)
        if not config.metric_tools:
            preflight(backend_configs(config))
    except (CannotHonour, VLMConfigurationError) as exc:
        _fail(f"job {job_id[:8]} cannot run here: {exc}", code=2)


@eval_app.command("cancel")
def cancel(job: Annotated[str, typer.Argument(help="job id or a unique prefix of one")]) -> None:
    """Stop a job: waiting items are cancelled, running ones end as cancelled.

    A batch job's open batches are cancelled at the provider too (what they answered so far is
    kept for a resume); one that cannot be now (the provider unreachable, no key here) is
    cancelled by the next round tick: the workers' supervisor, or this command run again.

    A job that already ended (done or cancelled) is left alone and the command exits 1, so a
    script that expects its cancel to have stopped something learns that it did not.
    """
    from ..db import batches as batch_store
    from ..db import jobs as store
    from ..db import reads
    from ..db.engine import session_scope
    from ..runtime import batches as rounds

    engine = _engine()
    job = _job_id(engine, job)
    try:
        with session_scope(engine) as session:  # status read and cancel in one transaction
            status = reads.get_job(session, job).status
            batched = batch_store.is_batch_job(session, job)
            cancelled = store.cancel(session, job) if status == "running" else None
    except reads.JobNotFound as exc:
        _fail(str(exc))
    stopped = (
        rounds.cancel(engine, job)
        if batched and status in ("running", "cancelled")
        else rounds.Cancelled()
    )
    if cancelled is None and not stopped.cancelled:
        _fail(
            f"job {job} already finished ({status}); nothing to cancel"
            + "".join(f"; batch {why}" for why in stopped.deferred)
        )
    if cancelled is not None:
        from ..runtime import lifecycle

        lifecycle.settle_if_idle(engine, job)  # its figures for `eval list`, once
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


def export_rows(engine: Any, job_id: str) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """Columns and streamed rows, one per item, with a ``tool:<NAME>`` (normalized) and a
    ``raw:<NAME>`` column per tool; a metric job has columns for each of its tools, even one
    that scored nothing.  ``query`` is the query the item was asked: its own, or the job's.
    ``answered_by`` is who answered: the recorded VLM calls, and the builtin backend's own
    model for an item that ran on it (it records no calls; a job stored before configurations
    were kept that recorded no call at all ran on it, the rule of ``eval report``'s header)."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..jobs.export import export_columns, raw_column, tool_column

    with read_scope(engine) as session:
        job = reads.get_job(session, job_id)
        # A metric job's runs run its tools and no other: no need to read every call's name.
        tools = sorted({*(job.metric_tools or reads.tool_names(session, job_id))})
        default_query = job.default_query
        builtin = reads.builtin_answerer(session, job)
    columns = export_columns(tools, raw=True)
    tool_columns = [(name, tool_column(name), raw_column(name)) for name in tools]

    def rows() -> Iterator[dict[str, Any]]:
        with read_scope(engine) as session:
            for row in reads.export_rows(session, job_id, reads.PAGE, builtin=builtin):
                scores, raw = row.pop("tool_scores"), row.pop("raw_scores")
                # The query the item was (or would be) asked: its own, else the job's default.
                row["query"] = row["query"] or default_query
                for name, normalized_column, raw_name in tool_columns:
                    row[normalized_column] = scores.get(name)
                    row[raw_name] = raw.get(name)
                yield row

    return columns, rows()


@eval_app.command("export")
def export(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="csv, jsonl or parquet")] = "csv",
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="file to write, or a store's URL (s3://bucket/key.csv); - for "
            "standard output (default: job-<id>.<format> in this folder, "
            "and its name is printed)",
        ),
    ] = None,
) -> None:
    """One row per item: answer, score, reasoning, level probabilities, the model that
    answered, per-tool normalized and raw scores, severities, errors."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display

    from ..db.reads import JobNotFound
    from ..jobs.export import ExportFormat, write_rows
    from .faults import disk_full

    if fmt not in {"csv", "jsonl", "parquet"}:
        _fail(f"unknown format {fmt!r}: use csv, jsonl or parquet")
    chosen = cast(ExportFormat, fmt)
    engine = _engine()
    job_id = _job_id(engine, job)
    try:
        columns, rows = export_rows(engine, job_id)
    except JobNotFound as exc:
        _fail(str(exc))
    if output == "-":
        try:
            write_rows(rows, "-", chosen, columns)
        except ValueError as exc:
            _fail(str(exc), code=2)
        return
    path = _place(output) or Path(f"job-{job_id[:8]}.{fmt}")
    try:
        count = write_rows(rows, path, chosen, columns)
    except StorageError as exc:
        _fail(f"cannot write {display(str(path))}: {exc}")
    except OSError as exc:  # the results database is read, so the full disk is the file's
        if not disk_full(exc):
            raise
        _fail(
            f"the disk holding {Path(path).resolve()} is full (nothing was written): free "
            "some space there, or write elsewhere with -o",
            code=2,
        )
    shown = display(path) if isinstance(path, str) else str(path.resolve())
    note = "" if output else " (no -o given: the default name; -o - writes to standard output)"
    err.print(f"wrote {count} rows to {shown}{note}", highlight=False, soft_wrap=True)


@eval_app.command("report")
def report(
    job: Annotated[
        str | None, typer.Argument(help="job id or a unique prefix of one (default: the latest)")
    ] = None,
    html: Annotated[
        str | None,
        typer.Option("--html", help="write an HTML report here (a path, or a store's URL)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0)] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="of the resampling")] = 0,
    figures: Annotated[
        str | None,
        typer.Option(
            "--figures",
            help="write the report's figures here as SVG and PDF (a folder, made if "
            "missing, or a store's URL)",
        ),
    ] = None,
) -> None:
    """SRCC, PLCC (raw and logistic), KRCC with bootstrap CIs; MCQ accuracy; per-tool table;
    the same per distortion type and level where the items give them.  ``--figures DIR``: the
    scatter plots and the breakdown as SVG and PDF, the figures the HTML report shows."""
    from ..db import reads
    from ..db.engine import read_scope
    from ..db.reads import JobNotFound
    from ..jobs.figures import report_figures
    from ..jobs.in_sample import fitted_images, in_sample_warnings, uses_builtin
    from ..jobs.report import (
        build_report,
        provenance_warnings,
        render_html,
        render_text,
        scored_label,
    )

    engine = _engine()
    job_id = _job_id(engine, job)
    try:
        with read_scope(engine) as session:
            about = reads.job_summary(session, job_id)
            # Columns, a page at a time: arrays of floats, not a dict per item.
            columns = reads.report_columns(session, job_id)
            if uses_builtin(about):  # by the digests stored at submit; pending items never
                columns.fitted_overlap = reads.in_sample_overlap(
                    session, job_id, columns.size, fitted_images()
                )
    except JobNotFound as exc:
        _fail(str(exc))
    built = build_report(
        columns, bootstrap=bootstrap, seed=seed, metric_job=about.get("tools") is not None
    )
    about = {
        **about,
        "answered_by": built["answered_by"],
        "warnings": [
            *provenance_warnings(about, built["answered_by"]),
            *in_sample_warnings(about, columns),
        ],
    }
    document = {"job": about, **built}
    document["vlm"] = _vlm_summary(engine, job_id)
    drawn = (
        report_figures(document, columns, scored=scored_label(document))
        if html is not None or figures is not None
        else []
    )
    if figures is not None:
        _write_figures(drawn, figures, "no item has both a score and a MOS")
    if html is not None:
        _write_page(lambda local: render_html(document, columns, local, figures=drawn), html)
    if as_json:
        from ..redact import redact

        print(redact(json.dumps(document, indent=2, default=str)))
    else:
        out.print(escape(render_text(document)), highlight=False, soft_wrap=True)


def calibrate(
    tool: Annotated[str, typer.Option("--tool", "-t", help="tool to recalibrate")],
    job: Annotated[
        str | None,
        typer.Argument(help="job id or a unique prefix of one, with MOS (default: the latest)"),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
    mos_range: Annotated[
        tuple[float, float] | None,
        typer.Option(
            "--mos-range",
            help="MOS scale LOW HIGH mapped onto 1-5 (default: the job's min and max MOS)",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Fit a tool's logistic to this job's MOS; write it as a metadata override."""
    from ..runtime.recalibration import calibrate_tool

    engine = _engine()
    try:
        result = calibrate_tool(
            engine, _job_id(engine, job), tool, output=output, mos_range=mos_range
        )
    except (KeyError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        import dataclasses

        print(json.dumps(dataclasses.asdict(result), indent=2, default=str))
        return
    out.print(result.summary(), highlight=False, soft_wrap=True)
