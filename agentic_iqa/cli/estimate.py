"""Estimate a dataset job's calls, tokens, cost and time (``agentic-iqa eval estimate``).

A few of the job's items run here for real, cold, in a scratch database; the figures are
extrapolated from their pace (:mod:`agentic_iqa.jobs.estimate`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import (
    err,
    fail,
    format_duration,
    out,
)
from .jobflags import JobFlags, base_spec, job_options, job_specs
from .local_run import job_agents


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
    `eval submit ARGS`; --wait, --name, --group, --progress-every, --mlflow and --wandb change
    nothing here.  A sweep is estimated job by job.

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
            f"{format_duration(sum(result['wall_seconds'] for result in results))} one after "
            "another here",
            highlight=False,
            soft_wrap=True,
        )


def _estimate_job(spec: Any, flags: JobFlags, measure: int) -> dict[str, Any]:
    """Return one job's estimate: ``measure`` of its items run here, cold, as many at once as the
    job will run, each timed as it ends, then extrapolated
    (:func:`agentic_iqa.jobs.estimate.extrapolate`)."""
    import os
    import tempfile
    import time

    from ..config import PipelineSettings
    from ..db import dispose_engines, make_engine, upgrade
    from ..db.engine import read_scope
    from ..db.exports import vlm_summary
    from ..db.items import failed_items
    from ..db.vlm_calls import vlm_usage
    from ..jobs.estimate import SamplePace, batch_pricing, extrapolate, sample_items
    from ..jobs.manifest import ManifestFormatError
    from ..runtime.local import run_local
    from ..runtime.submission import submit
    from ..vlm.usage import PriceTable

    source = spec.manifest if spec.manifest is not None else f"dataset {spec.dataset}"
    try:
        chosen, total = sample_items(spec, measure)
    except (ManifestFormatError, OSError) as exc:
        fail(str(exc))
    if not chosen:
        fail(f"{source}: no readable item to run")
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
            job_id = submit(
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
                run_local(engine, job_id, job_agents(), workers=concurrency, on_progress=timed)
            seconds = time.perf_counter() - started
            with read_scope(engine) as session:
                prices = PriceTable.load()
                measured = vlm_summary(session, job_id, prices)
                as_batch = (
                    batch_pricing(vlm_usage(session, job_id=job_id), prices) if spec.batch else None
                )
                failed = [(item.item_key, item.error) for item in failed_items(session, job_id)]
            dispose_engines(url)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if len(failed) == len(chosen):  # nothing to extrapolate from: say why, do not print zeros
        fail(
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
    """Print one job's estimate as text: the sample, its pace, the extrapolated figures."""
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
