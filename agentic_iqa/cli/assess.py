"""``agentic-iqa assess``: ask the agent a question about one image."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from iqa_tools.errors import ToolError

from ..redact import redact
from .common import (
    BackendOption,
    BaseUrlOption,
    DeviceOption,
    FollowUpOption,
    ModelOption,
    err,
    fail,
    load_registry,
    open_engine,
    redact_url,
    use_backend,
)

# Start-up is part of every command (``--help`` included), so this module imports only typer,
# rich's console and light modules of this project; each command imports what it uses (the
# tool catalog and settings, SQLAlchemy, the agent, Celery) in its body.  Heavy modules (torch,
# pyiqa, scipy, matplotlib, pyarrow, Celery, the VLM SDKs) must not load for ``--help``,
# ``tools list`` or ``eval status``: tests/cli/test_startup.py checks it.
if TYPE_CHECKING:
    from ..vlm.base import Role
    from ..vlm.settings import BackendConfig


def _located(text: str) -> str:
    """Return a file, resolved; an object's URL, checked to exist (one line when it does not, or
    when the store refuses the credential)."""
    from iqa_tools.errors import StorageError
    from iqa_tools.storage import display, is_url, stat

    if is_url(text):
        try:
            stat(text)
        except StorageError as exc:
            fail(f"image {display(text)}: {exc}", code=2 if exc.stops_job else 1)
        return text
    if not Path(text).is_file():
        fail(f"image not found: {text}")
    return str(Path(text).resolve())


def assess(
    image: Annotated[
        str,
        typer.Argument(
            help="image to assess: a file, or an object's URL (s3://bucket/key.jpg, https://...)"
        ),
    ],
    query: Annotated[str, typer.Option("--query", "-q", help="question about the image")] = (
        "Rate the quality of this image."
    ),
    reference: Annotated[
        str | None,
        typer.Option("--reference", "-r", help="reference image (full-reference): a file or a URL"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the final state as JSON")] = False,
    max_replans: Annotated[
        int | None,
        typer.Option(
            "--max-replans",
            min=0,
            help="bound on replanning rounds "
            "(default: max_replan_iterations in configs/pipeline.yaml)",
        ),
    ] = None,
    distributed: Annotated[
        bool, typer.Option("--distributed", help="run the steps on Celery workers")
    ] = False,
    store: Annotated[
        bool, typer.Option("--store/--no-store", help="persist the run in the database")
    ] = True,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds to wait for a distributed run")
    ] = 600.0,
    device: DeviceOption = None,
    vlm_cache: Annotated[
        bool,
        typer.Option(
            "--vlm-cache/--no-vlm-cache",
            help="answer deterministic VLM requests from the response cache",
        ),
    ] = True,
    backend: BackendOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    follow_up: FollowUpOption = None,
) -> None:
    """Ask the agent a question about an image: plan, evidence, answer and why.

    A backend that cannot work (a missing key, an endpoint that does not answer, an unknown
    model) exits 2 with one line before anything is stored."""
    from ..pipeline import run_inprocess, validate_inputs
    from ..query import QueryTooLong, check_query_length
    from ..vlm.usage import PriceTable, collect_calls, group_records, summarize
    from .render import output_console, render_state, render_vlm_usage, state_document

    image_path, reference_path = _located(image), _located(reference) if reference else None
    try:  # the plan step checks this too; here it costs no stored run and no model
        check_query_length(query)
        validate_inputs(image_path, reference_path)
    except (ToolError, QueryTooLong) as exc:
        fail(str(exc))
    roles = use_backend(backend, model, base_url, follow_up=follow_up)
    if not vlm_cache:  # clients built in this process get no cache; stored runs say so too
        os.environ["AGENTIC_IQA_VLM_CACHE"] = "false"
    if max_replans is None:
        from ..config import PipelineSettings

        max_replans = PipelineSettings.load().max_replan_iterations
    if distributed:
        state, run_id = _assess_distributed(
            query,
            image_path,
            reference_path,
            max_replans,
            timeout,
            vlm_cache=vlm_cache,
            roles=roles,
        )
        usage = _run_vlm_usage(open_engine(), run_id)
    elif store:
        from ..runtime import embedded, service

        engine = open_engine(create=True)
        run_id = service.create_run(
            engine, query, image_path, reference_path, max_replan_iterations=max_replans
        )
        if not vlm_cache:
            _disable_run_vlm_cache(engine, run_id)
        agents = _agents_for(roles, device)
        with contextlib.redirect_stdout(sys.stderr):
            embedded.run_embedded(engine, agents, run_id)
        state = _stored_state(engine, run_id)
        usage = _run_vlm_usage(engine, run_id)
        err.print(
            f"run {run_id} stored in {redact(redact_url(engine))}; `agentic-iqa runs show "
            f"{run_id[:8]}` shows it again",
            highlight=False,
            soft_wrap=True,
        )
    else:
        agents = _agents_for(roles, device)
        with contextlib.redirect_stdout(sys.stderr), collect_calls() as calls:
            state = run_inprocess(
                query, image_path, reference_path, agents=agents, max_replan_iterations=max_replans
            )
        usage = summarize(group_records(calls.records), PriceTable.load())
    if as_json:  # paths, answers and tool errors may quote a URL: the whole document is redacted
        print(redact(json.dumps(state_document(state, vlm_usage=usage), indent=2)))
    else:  # wrapped to a terminal's width; in a pipe or a file, lines stay whole
        console = output_console()
        render_state(state, console)
        render_vlm_usage(usage, console)
    if "summarizer_result" not in state:
        raise typer.Exit(1)


def _agents_for(roles: dict[Role, BackendConfig], device: str | None) -> Any:
    """Return the agents of ``assess``: the role configurations with the flags applied."""
    from ..agents.team import Agents
    from ..vlm import create_client

    return Agents(
        planner=create_client("planner", roles),
        executor=create_client("executor", roles),
        summarizer=create_client("summarizer", roles),
        registry=load_registry(device),
    )


def _disable_run_vlm_cache(engine, run_id: str) -> None:  # noqa: ANN001 - Engine, lazily
    from ..db.engine import session_scope
    from ..db.runs import set_run_vlm_cache

    with session_scope(engine) as session:
        set_run_vlm_cache(session, run_id, False)


def _run_vlm_usage(engine, run_id: str) -> dict[str, Any]:  # noqa: ANN001 - Engine, lazily
    """Return the run's VLM calls, tokens and cost, and per step its calls and cache hits."""
    from ..db.engine import read_scope
    from ..db.vlm_calls import vlm_steps, vlm_usage
    from ..vlm.usage import PriceTable, summarize

    with read_scope(engine) as session:
        usage = summarize(vlm_usage(session, run_id=run_id), PriceTable.load())
        per_step = vlm_steps(session, run_id)
    usage["steps"] = {
        f"{step}#{iteration}": {"calls": calls, "cache_hits": hits}
        for (step, iteration), (calls, hits) in sorted(
            per_step.items(), key=lambda entry: (entry[0][1], entry[0][0])
        )
    }
    return usage


def _stored_state(engine, run_id: str):  # noqa: ANN001, ANN202 - Engine and state, lazily
    """Return the run's final state, with the run's error in it when a step gave up.

    A step that fails for good (a VLM server that cannot be reached) records its reason on the
    run row only; without this the state says neither why nor that anything failed.
    """
    from ..db.engine import read_scope
    from ..db.runs import get_run, load_state
    from ..state import merge_state

    with read_scope(engine) as session:
        run = get_run(session, run_id)
        state = load_state(session, run_id)
        if run.status == "failed" and run.error and not state.get("error"):
            state = merge_state(state, {"error": run.error})
    return state


def _assess_distributed(
    query: str,
    image_path: str,
    reference_path: str | None,
    max_replans: int,
    timeout: float,
    *,
    vlm_cache: bool = True,
    roles: dict[Role, BackendConfig] | None = None,
):  # noqa: ANN202
    """Hand the run to the workers, stored with what shapes it (the backend, model, base URL
    and follow-up flags of each role, as ``eval submit`` stores a job's; never a key), and wait
    for its end."""
    import time

    from ..config import PipelineSettings
    from ..runconfig import capture
    from ..runtime import service

    settings = PipelineSettings.load()
    if not settings.broker_url:
        fail("--distributed needs a broker: set AGENTIC_IQA_BROKER_URL (e.g. redis://host:6379/0)")
    from workers.tasks import submit

    engine = open_engine(create=True)
    # Leased: if the message is lost (a broker restart), the workers' supervisor re-sends it.
    run_id = service.create_run(
        engine,
        query,
        image_path,
        reference_path,
        max_replan_iterations=max_replans,
        lease_seconds=settings.lease_seconds,
        config_json=capture(
            max_replan_iterations=max_replans, vlm_cache=vlm_cache, roles=roles
        ).to_json(),
    )
    if not vlm_cache:  # the workers read it from the run
        _disable_run_vlm_cache(engine, run_id)
    submit(run_id)
    deadline = time.monotonic() + timeout
    with err.status(f"run {run_id}: queued") as status:
        while True:
            from ..db.engine import read_scope
            from ..db.runs import get_run
            from ..db.steps import current_step

            with read_scope(engine) as session:
                run = get_run(session, run_id)
                done = run.status in {"succeeded", "failed"}
                current = current_step(session, run_id)
            status.update(f"run {run_id}: {run.status}" + (f", {current}" if current else ""))
            if done:
                break
            if time.monotonic() > deadline:
                fail(
                    f"run {run_id} did not finish in {timeout:.0f}s (still {run.status}); "
                    "are workers consuming both queues?"
                )
            time.sleep(0.2)
    return _stored_state(engine, run_id), run_id
