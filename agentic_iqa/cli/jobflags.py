"""The flags that describe a dataset job, declared once for ``eval submit`` and ``eval estimate``.

Both commands describe the same job: an estimate of ``eval submit ARGS`` is ``eval estimate
ARGS``, with the same flags read the same way.  So the flags are the fields of one dataclass,
:class:`JobFlags`, and :func:`job_options` gives a command all of them (typer reads them from
its signature) and hands them over as one value; :func:`base_spec` and :func:`job_specs` turn
that value into the jobs, checked, for both.  A flag added here is a flag of both commands, and
a rule added to the parsing holds for both: they cannot drift apart.

Light on purpose (typer only at import): every command's start-up imports it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer

from .common import FollowUpOption, fail, use_backend
from .progress import DEFAULT_EVERY, MIN_EVERY
from .tracking import MlflowOption, WandbOption

if TYPE_CHECKING:
    from ..jobs.spec import JobSpec
    from ..runconfig import RunConfig
    from ..vlm.base import Role
    from ..vlm.settings import BackendConfig

#: The backends a ``--model`` value may name before a colon (``openai:gpt-4o``).
BACKENDS = ("builtin", "openai", "anthropic")

#: ``--progress-every``: how often a followed job says how far it is in a log file.
ProgressEveryOption = Annotated[
    float,
    typer.Option(
        "--progress-every",
        min=MIN_EVERY,
        metavar="SECONDS",
        help="when stderr is not a terminal (nohup, Slurm): a progress line (done/failed/total, "
        "rate, ETA) every SECONDS instead of a bar",
    ),
]


@dataclass(frozen=True)
class JobFlags:
    """Every flag of a job as ``eval submit`` takes it (``eval estimate`` takes the same ones:
    those about waiting for the job or logging it to a tracker are accepted there and change
    nothing)."""

    manifest: Annotated[
        Path | None,
        typer.Argument(
            help="CSV, JSON or JSONL manifest, or a folder of images (or --dataset instead)",
            show_default=False,
        ),
    ] = None
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset",
            "--data",
            metavar="NAME",
            help="a public dataset read from its own files under --root: livec, koniq10k, spaq, "
            "kadid10k, tid2013, agiqa3k, qbench (`agentic-iqa eval datasets` lists them); "
            "repeat it, with one --root each in the same order, for a sweep",
        ),
    ] = None
    split: Annotated[
        str | None,
        typer.Option(
            "--split", help="the dataset's split (default: the dataset's own, e.g. all or dev)"
        ),
    ] = None
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="only the first N rows or records (after --offset)"),
    ] = None
    offset: Annotated[
        int, typer.Option("--offset", min=0, metavar="K", help="skip the first K rows or records")
    ] = 0
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample",
            min=1,
            metavar="N",
            help="N rows or records drawn at random by a hash of each row's id and --seed: the "
            "same rows for the same seed, whatever the rows' order (after --offset and "
            "--limit)",
        ),
    ] = None
    seed: Annotated[
        int | None, typer.Option("--seed", metavar="S", help="the seed of --sample (default 0)")
    ] = None
    image_dir: Annotated[
        str | None,
        typer.Option(
            "--image-dir",
            help="a manifest's image paths are relative to this folder (default: "
            "the manifest's own folder)",
        ),
    ] = None
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="agent (plan, tools, summary; the default), vlm (the VLM answers alone: "
            "no plan, no tools) or tools (the tools alone; the default with --tools)",
            show_default=False,
        ),
    ] = None
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="the job's name (default: dataset-split-mode-model, or the manifest's "
            "file name); in a sweep, each job's default name after it",
        ),
    ] = None
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="query for rows without one (default: 'Rate the quality of this "
            "image.'; a metric job: 'metrics: TOOLS')",
        ),
    ] = None
    root: Annotated[
        list[str] | None,
        typer.Option(
            "--root",
            metavar="DIR",
            help="with --dataset: the dataset's folder (one per --dataset); with a manifest: "
            "confine every path here",
        ),
    ] = None
    tools: Annotated[
        str | None,
        typer.Option(
            "--tools",
            help="a metric job: only these tools (comma-separated, e.g. BRISQUE,NIQE,"
            "SSIM) on every image, raw and normalized scores, no agent and no VLM "
            "(so no --model)",
        ),
    ] = None
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend",
            metavar="BACKEND",
            help="VLM backend for every role: builtin, openai or anthropic; repeat it, once per "
            "--model in the same order, where the models' backends differ (default: "
            "configs/model_backends.yaml, AGENTIC_IQA_VLM_BACKEND)",
        ),
    ] = None
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            metavar="MODEL",
            help="model for every role, e.g. gpt-4o; repeat it for a sweep (one job per model and "
            "dataset); BACKEND:MODEL names its backend too (openai:gpt-4o, "
            "anthropic:claude-sonnet-4-5, builtin) (AGENTIC_IQA_VLM_MODEL)",
        ),
    ] = None
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="an OpenAI-compatible server (vLLM, Ollama), e.g. "
            "http://localhost:8000/v1 (AGENTIC_IQA_VLM_BASE_URL)",
        ),
    ] = None
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="the sweep's name, stored with each of its jobs (`eval list --group`, "
            "`eval compare --group`); default: generated for a sweep, none for "
            "one job",
        ),
    ] = None
    score: Annotated[
        str,
        typer.Option(
            "--score",
            help="the ground truth: mos (the dataset's MOS) or zscore (KonIQ-10k's "
            "MOS_zscore, 0-100, which many papers and pyiqa use)",
        ),
    ] = "mos"
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="with workers: block until the job ends, then print a summary; without "
            "a broker the job runs here and the command always waits (--wait is "
            "then a no-op, with a note)",
        ),
    ] = False
    mlflow: MlflowOption = None
    wandb: WandbOption = None
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="local threads (no broker): items in flight at once (capped by job_window)",
        ),
    ] = 2
    no_check_images: Annotated[
        bool, typer.Option("--no-check-images", help="skip opening each image at submit")
    ] = False
    exclude_in_sample: Annotated[
        bool,
        typer.Option(
            "--exclude-in-sample",
            help="leave out the rows whose image the builtin backend was fitted on (its "
            "figures on them would be in-sample); says how many",
        ),
    ] = False
    allow_urls: Annotated[
        bool,
        typer.Option(
            "--allow-urls",
            help="read a manifest's URLs wherever they point (public addresses "
            "only); without it, only under --root or --image-dir, or where "
            "AGENTIC_IQA_ALLOWED_LOCATIONS lists them",
        ),
    ] = False
    mos_range: Annotated[
        tuple[float, float] | None,
        typer.Option(
            "--mos-range",
            help="the MOS scale LOW HIGH: a MOS outside it is a bad row (default: "
            "any finite number)",
        ),
    ] = None
    vlm_cache: Annotated[
        bool,
        typer.Option(
            "--vlm-cache/--no-vlm-cache",
            help="answer deterministic VLM requests from the response cache",
        ),
    ] = True
    follow_up: FollowUpOption = None
    batch: Annotated[
        bool,
        typer.Option(
            "--batch",
            help="send the model calls through the provider's batch interface (OpenAI "
            "Batch API, Anthropic Message Batches): half the price, answers within "
            "24 h (usually minutes), in rounds",
        ),
    ] = False
    progress_every: ProgressEveryOption = DEFAULT_EVERY

    @property
    def models(self) -> list[str]:
        return list(self.model or [])

    @property
    def backends(self) -> list[str]:
        return list(self.backend or [])

    @property
    def datasets(self) -> list[str]:
        return list(self.dataset or [])

    @property
    def roots(self) -> list[str]:
        return list(self.root or [])


def _flag_parameters() -> list[inspect.Parameter]:
    """Return :class:`JobFlags`'s fields as the keyword parameters typer reads options from."""
    hints = get_type_hints(JobFlags, include_extras=True)
    return [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=hints[field.name],
        )
        for field in fields(JobFlags)
    ]


def job_options(command: Callable[..., None]) -> Callable[..., None]:
    """Return ``command(flags, **own)`` as a typer command taking every :class:`JobFlags` option
    before its own: typer sees one signature, the command gets one value."""
    names = [field.name for field in fields(JobFlags)]
    own = [
        parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for parameter in list(inspect.signature(command, eval_str=True).parameters.values())[1:]
    ]
    clash = set(names) & {parameter.name for parameter in own}
    if clash:
        raise TypeError(f"{command.__name__} declares job flags again: {sorted(clash)}")

    @functools.wraps(command)
    def run(**values: Any) -> None:
        flags = JobFlags(**{name: values.pop(name) for name in names})
        command(flags, **values)

    run.__signature__ = inspect.Signature([*_flag_parameters(), *own])  # type: ignore[attr-defined]
    return run


def place(text: str | None) -> Path | str | None:
    """Return a folder given on the command line: a path, or an object store's URL kept as is."""
    from iqa_tools.storage import is_url

    if text is None or is_url(text):
        return text
    return Path(text)


def base_spec(flags: JobFlags) -> JobSpec:
    """Return the job the flags describe before any model is chosen, checked once (mode and tools,
    source, subset, tool names and weights); exits 2 with one line when it cannot run."""
    from iqa_tools.errors import ToolError

    from ..jobs.spec import JobSpec, JobSpecError
    from ..jobs.tools import MetricToolsError, check_tools, parse_tools

    datasets, roots = flags.datasets, flags.roots
    try:
        spec = JobSpec.build(
            manifest=flags.manifest,
            dataset=datasets[0] if datasets else None,
            root=place(roots[0]) if roots else None,
            split=flags.split,
            limit=flags.limit,
            offset=flags.offset,
            sample=flags.sample,
            seed=flags.seed,
            image_dir=place(flags.image_dir),
            name=flags.name,
            query=flags.query,
            mode=flags.mode,
            tools=parse_tools(flags.tools) if flags.tools is not None else None,
            vlm_cache=flags.vlm_cache,
            batch=flags.batch,
            mos_range=flags.mos_range,
            check_images=not flags.no_check_images,
            score=flags.score,
            group=flags.group,
            allow_urls=flags.allow_urls,
            exclude_in_sample=flags.exclude_in_sample,
        )
    except (JobSpecError, MetricToolsError) as exc:
        fail(str(exc), code=2)
    if spec.tools and (flags.models or flags.backends or flags.base_url):
        named = ", ".join(
            f"--{flag}"
            for flag, given in (
                ("model", flags.models),
                ("backend", flags.backends),
                ("base-url", flags.base_url),
            )
            if given
        )
        fail(
            f"a metric job (--tools) asks no model, so {named} would be ignored: "
            f"`--mode tools --tools {','.join(spec.tools)}` runs those tools alone on every "
            f"image, with no model; for the agent answering with {named}, leave out --tools "
            "(the agent chooses its own tools and cannot be limited to some)",
            code=2,
        )
    try:  # checked (names, weights) before anything is captured or stored
        checked = check_tools(list(spec.tools)) if spec.tools else None
    except (MetricToolsError, ToolError) as exc:
        fail(str(exc), code=2)
    return spec.model_copy(update={"tools": tuple(checked)}) if checked else spec


def model_axis(backends: list[str], models: list[str]) -> list[tuple[str | None, str | None]]:
    """Return (backend, model) per job of a sweep: ``--model`` values (``BACKEND:MODEL`` names its
    backend; a bare backend name is that backend's default), each with its ``--backend`` (one
    for all, or one each in the same order); exits 2 when they cannot be paired."""
    if len(backends) > 1 and models and len(backends) != len(models):
        fail(
            f"{len(backends)} --backend values for {len(models)} --model values: give one "
            "--backend for every model, or one per --model in the same order (or spell "
            "each model BACKEND:MODEL)",
            code=2,
        )
    if not models:
        return [(backend, None) for backend in backends] or [(None, None)]
    axis: list[tuple[str | None, str | None]] = []
    for index, entry in enumerate(models):
        backend = backends[index] if len(backends) > 1 else (backends[0] if backends else None)
        prefix, colon, rest = entry.partition(":")
        named: tuple[str | None, str | None] = (backend, entry)
        if colon and prefix in BACKENDS:
            named = (prefix, rest or None)
        elif entry in BACKENDS:
            named = (entry, None)
        if backend is not None and named[0] != backend:
            fail(
                f"--model {entry} names the {named[0]} backend and --backend says "
                f"{backend}: give one of them",
                code=2,
            )
        axis.append(named)
    return axis


def data_axis(datasets: list[str], roots: list[str]) -> list[tuple[str | None, str | None]]:
    """Return (dataset, root) per job of a sweep: each ``--dataset`` with its ``--root``, in
    order."""
    if len(roots) > 1 and len(roots) != len(datasets):
        fail(
            f"{len(roots)} --root values for {len(datasets)} --dataset values: give one "
            "--root per --dataset, in the same order",
            code=2,
        )
    if len(datasets) > 1 and len(roots) < len(datasets):
        fail(
            "a sweep over datasets reads each from its own folder: give one --root per "
            "--dataset, in the same order",
            code=2,
        )
    if not datasets:
        return [(None, roots[0] if roots else None)]
    return [
        (dataset, roots[index] if len(roots) > index else None)
        for index, dataset in enumerate(datasets)
    ]


@dataclass(frozen=True)
class Planned:
    """The jobs the flags describe, one per (model, dataset), and the sweep they make."""

    specs: list[JobSpec]
    group: str | None
    models: int
    datasets: int

    @property
    def sweep(self) -> bool:
        return len(self.specs) > 1


def job_specs(flags: JobFlags, base: JobSpec, *, here: bool) -> Planned:
    """Return every job of the flags (a sweep: one per model and dataset), each with the
    configuration it will run with, every model checked once (key, endpoint, name) before
    anything is stored.  ``here``: the jobs run in this process, which must be able to run
    them as stored (exit 2 with why, otherwise)."""
    from ..jobs.spec import JobSpecError, new_group
    from ..runconfig import capture

    axis = model_axis(flags.backends, flags.models)
    metric_tools = list(base.tools) if base.tools else None
    cells = [
        (backend_model, data)
        for backend_model in axis
        for data in data_axis(flags.datasets, flags.roots)
    ]
    group = flags.group
    if len(cells) > 1 and group is None:
        group = new_group()
    specs: list[JobSpec] = []
    configs: dict[tuple[str | None, str | None], RunConfig] = {}
    for (cell_backend, cell_model), (cell_dataset, cell_root) in cells:
        if (cell_backend, cell_model) not in configs:  # each model checked once
            roles = (
                None
                if metric_tools
                else use_backend(
                    cell_backend,
                    cell_model,
                    None if cell_backend == "builtin" else flags.base_url,
                    follow_up=flags.follow_up,
                )
            )
            config = capture(
                max_replan_iterations=_max_replans(),
                vlm_cache=flags.vlm_cache,
                metric_tools=metric_tools,
                roles=roles,
                batch=flags.batch,
            )
            if here and roles:  # it runs here: refused now, before a job is stored
                _honoured_here(config, roles)
            configs[(cell_backend, cell_model)] = config
        try:
            cell = base.cell(
                dataset=cell_dataset,
                root=place(cell_root),
                config=configs[(cell_backend, cell_model)],
                tools=metric_tools,
                group=group,
                name=None,
            )
        except JobSpecError as exc:
            fail(str(exc), code=2)
        if flags.name is not None:
            cell = cell.model_copy(
                update={
                    "name": f"{flags.name}-{cell.default_name()}" if len(cells) > 1 else flags.name
                }
            )
        specs.append(cell)
    return Planned(specs, group, len(axis), len(cells) // len(axis))


def _honoured_here(config: Any, roles: dict[Role, BackendConfig]) -> None:
    """Exit 2 with one line when this process could not run the job it is about to store (a
    base URL whose credential the stored configuration masks is taken from the flags)."""
    from ..runconfig import CannotHonour, backend_configs, hold_flagged_roles

    hold_flagged_roles(roles)
    try:
        backend_configs(config)
    except CannotHonour as exc:
        fail(f"the job cannot run here: {exc}", code=2)


def _max_replans() -> int:
    from ..config import PipelineSettings

    return PipelineSettings.load().max_replan_iterations


__all__ = [
    "BACKENDS",
    "JobFlags",
    "Planned",
    "ProgressEveryOption",
    "base_spec",
    "data_axis",
    "job_options",
    "job_specs",
    "model_axis",
    "place",
]
