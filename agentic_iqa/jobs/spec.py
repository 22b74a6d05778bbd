"""One value that describes a dataset job: where its items come from, how they run, its bounds.

A :class:`JobSpec` is built once (from the command line's flags, or from a sweep's cell by
``model_copy(update=...)``), validated once (the mode and tools rules, one source of items, a
score the dataset publishes), stored as the job's record, and read back by whoever needs to know
what the job is (resume, report, compare, list).  Jobs stored before it existed get one
reconstructed from their columns (:func:`reconstruct`).

Free of SQL and Celery: the store keeps it as JSON (``jobs.spec_json``) beside the columns old
readers still read.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from iqa_tools.storage.access import AccessPolicy

from ..runconfig import RunConfig
from .subset import Subset

Mode = Literal["agent", "vlm", "tools"]
MODES: tuple[str, ...] = ("agent", "vlm", "tools")
#: What a dataset's MOS column means for the job: the published MOS, or KonIQ-10k's 0-100
#: rescaling of z-scored ratings (``MOS_zscore``), which many papers and pyiqa train on.
Score = Literal["mos", "zscore"]
SCORES: tuple[str, ...] = ("mos", "zscore")
#: The column each score is read from, as a report header names it.
SCORE_COLUMN = {"mos": "MOS", "zscore": "MOS_zscore"}
#: Bumped when a field changes meaning, so a reader can tell an old record.
SPEC_VERSION = 1


class JobSpecError(ValueError):
    """The flags describe no job that can run; the message is one line that says what to give
    instead."""


def place(value: Any) -> Any:
    """Return a folder or file as given: a local path, or an object store's URL kept as text (a
    record read back from JSON gives text for both)."""
    if value is None or isinstance(value, Path):
        return value
    from iqa_tools.storage import is_url

    text = str(value)
    return text if is_url(text) else Path(text)


class JobSpec(BaseModel):
    """A dataset job, whole: validated when built, stored as the job's record."""

    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True)

    version: int = SPEC_VERSION
    #: The job's name (None: a default that says dataset, split, mode and model).
    name: str | None = None
    #: The sweep the job belongs to (``eval submit --group``, or generated for a sweep).
    group: str | None = None

    # -- where the items come from --
    #: A manifest file or folder of images (exclusive with ``dataset``).
    manifest: Path | str | None = None
    #: A public dataset by name, read from its own files under ``root``.
    dataset: str | None = None
    split: str | None = None
    #: With a dataset: its folder; with a manifest: every path stays in it.  A URL stays text.
    root: Path | str | None = None
    #: A manifest's image paths are relative to it.
    image_dir: Path | str | None = None
    limit: int | None = Field(default=None, ge=1)
    #: ``--offset K``: the first K rows are skipped (before ``limit`` and ``sample``).
    offset: int = Field(default=0, ge=0)
    #: ``--sample N``: N rows drawn by a seeded hash of each row's identity
    #: (:mod:`agentic_iqa.jobs.subset`), the same rows for the same ``seed`` and source.
    sample: int | None = Field(default=None, ge=1)
    #: The seed of ``sample`` (0 when a sample is drawn without one; None without a sample).
    seed: int | None = None
    #: The query of rows without one (None: the default, or a metric job's).
    query: str | None = None
    #: The MOS scale (low, high): a MOS outside it makes its row a bad row.
    mos_range: tuple[float, float] | None = None
    #: Which published score is the ground truth (``zscore``: KonIQ-10k's ``MOS_zscore``).
    score: Score = "mos"
    #: Each image is opened at submit (a bad one becomes a failed item there and then).
    check_images: bool = True
    #: ``--allow-urls``: a manifest's URLs are read wherever they point, at public addresses.
    allow_urls: bool = False
    #: ``--exclude-in-sample``: rows whose image the builtin backend was fitted on are not
    #: submitted (:mod:`agentic_iqa.reports.in_sample`).
    exclude_in_sample: bool = False
    #: ``AGENTIC_IQA_ALLOWED_LOCATIONS`` as the job was submitted with (None: read it then).
    allowed_locations: tuple[str, ...] | None = None

    # -- how they run --
    mode: Mode = "agent"
    #: A metric job's tools (``mode`` tools), canonical names once checked.
    tools: tuple[str, ...] | None = None
    #: The tool settings to check the tools with here; what the job keeps of them is in
    #: ``config`` (device, fallbacks, catalogue digests), so they are not stored.
    tool_settings: Any = Field(default=None, exclude=True)
    #: Backends and models per role, prompts, tools (:mod:`agentic_iqa.runconfig`); None:
    #: captured at submit from the configuration in force.
    config: RunConfig | None = None
    vlm_cache: bool = True
    #: The model calls go through the providers' batch interfaces, in rounds.
    batch: bool = False

    # -- bounds --
    #: None: the configured bound (``configs/pipeline.yaml``), fixed at submit.
    max_replan_iterations: int | None = Field(default=None, ge=0)

    @field_validator("manifest", "root", "image_dir", mode="before")
    @classmethod
    def _places(cls, value: Any) -> Any:
        return place(value)

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_list(cls, value: Any) -> Any:
        if value is None:
            return None
        names = [value] if isinstance(value, str) else list(value)
        return tuple(names) or None

    @model_validator(mode="before")
    @classmethod
    def _default_mode(cls, data: Any) -> Any:
        """No mode given: the tools alone when tools are named, else the agent."""
        if not isinstance(data, Mapping):
            return data
        score = data.get("score")
        if score is not None and score not in SCORES:
            raise JobSpecError(f"unknown --score {score!r}: mos or zscore")
        mode = data.get("mode")
        if mode is None:
            return {**data, "mode": "tools" if data.get("tools") else "agent"}
        if mode not in MODES:
            raise JobSpecError(f"unknown --mode {mode!r}: agent, vlm or tools")
        return data

    @model_validator(mode="after")
    def _rules(self) -> JobSpec:
        if (self.mode == "tools") != bool(self.tools):
            raise JobSpecError(
                "--mode tools runs the tools alone: name them, e.g. --tools BRISQUE,NIQE"
                if self.mode == "tools"
                else "--mode vlm asks no tool: --tools goes with --mode tools"
                if self.mode == "vlm"
                else "--mode agent with --tools: tools alone are --mode tools"
            )
        if self.seed is not None and self.sample is None:
            raise JobSpecError(
                "--seed chooses the rows of --sample N: give --sample too "
                "(--limit N takes the first N rows)"
            )
        if self.manifest is not None and self.dataset is not None:
            raise JobSpecError("give a manifest or --dataset, not both")
        if self.manifest is None and self.dataset is None:
            raise JobSpecError("give a manifest, or a dataset: --dataset NAME --root DIR")
        if self.dataset is not None and self.root is None:
            raise JobSpecError(
                f"--dataset {self.dataset} needs --root: the folder the dataset was unpacked into"
            )
        if self.score != "mos":
            offered = _scores_of(self.dataset)
            if self.score not in offered:
                source = f"dataset {self.dataset}" if self.dataset else "a manifest"
                raise JobSpecError(
                    f"--score {self.score}: {source} publishes no {SCORE_COLUMN[self.score]} "
                    f"(only koniq10k does); use --score mos"
                )
        return self

    @classmethod
    def build(cls, **fields: Any) -> JobSpec:
        """The spec, or :class:`JobSpecError` with the first fault as one line (a pydantic
        error lists every field on several lines).  A sample drawn without a seed is drawn
        with seed 0, stored as such, so the record says how to draw it again."""
        if fields.get("sample") is not None and fields.get("seed") is None:
            fields = {**fields, "seed": 0}
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise JobSpecError(_first_error(exc)) from None

    def cell(self, **update: Any) -> JobSpec:
        """A copy with ``update`` applied and validated again (a sweep's cell)."""
        return type(self).build(**{**self.__dict__, **update})

    # -- record ------------------------------------------------------------------------------

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        """A stored record, as it was stored (not validated again: a rule added later must not
        make an old job unreadable)."""
        import json

        document = json.loads(text)
        config = document.get("config")
        if isinstance(config, Mapping):
            document["config"] = RunConfig.model_validate(config)
        for key in ("manifest", "root", "image_dir"):
            document[key] = place(document.get(key))
        if isinstance(document.get("tools"), list):
            document["tools"] = tuple(document["tools"])
        if isinstance(document.get("mos_range"), list):
            document["mos_range"] = tuple(document["mos_range"])
        if isinstance(document.get("allowed_locations"), list):
            document["allowed_locations"] = tuple(document["allowed_locations"])
        fields = {key: value for key, value in document.items() if key in cls.model_fields}
        return cls.model_construct(**fields)

    def access_policy(self) -> AccessPolicy:
        """What the job's rows may name (:mod:`iqa_tools.storage.access`): ``root`` confines them,
        ``root`` and ``image_dir`` are named, ``--allow-urls`` and the allow-list (the
        environment's now, unless the spec holds one) open the rest."""
        return AccessPolicy.for_source(
            root=self.root,
            image_dir=self.image_dir,
            allow_urls=self.allow_urls,
            allowed=self.allowed_locations,
        )

    # -- what it says --------------------------------------------------------------------------

    @property
    def models(self) -> str:
        """The model part of a default name: the tools of a metric job, else the distinct
        models answering its roles (``builtin`` for the builtin backend)."""
        if self.tools:
            return "+".join(self.tools)
        if self.config is None or not self.config.roles:
            return "builtin"
        names = dict.fromkeys(
            "builtin" if c.backend == "builtin" else (c.model or c.backend)
            for c in self.config.roles.values()
        )
        return "+".join(names)

    def default_name(self, dataset: str | None = None, split: str | None = None) -> str:
        """``livec-all-agent-builtin``: dataset, split, mode and model, so a list of jobs says
        which is which; a manifest's job is named for its file."""
        if self.dataset is not None:
            parts = (
                dataset or self.dataset,
                split or self.split or "default",
                self.mode,
                self.models,
            )
            return "-".join(parts)
        manifest = self.manifest
        return (
            Path(manifest).name
            if isinstance(manifest, Path)
            else str(manifest).rstrip("/").rsplit("/", 1)[-1]
            if manifest
            else "job"
        )

    @property
    def subset(self) -> Subset:
        """The rows the job takes of its source: offset, limit, sample and seed."""
        return Subset.of(self)

    @property
    def scored_against(self) -> str:
        """The ground truth's column, as a report header says it."""
        return SCORE_COLUMN[self.score]

    def describe(self) -> dict[str, Any]:
        """The spec as a report or ``--json`` shows it (the configuration is beside it)."""
        document = self.model_dump(mode="json", exclude={"config"})
        document["scored_against"] = self.scored_against
        document["subset"] = self.subset.describe() or None
        return document


def _scores_of(dataset: str | None) -> tuple[str, ...]:
    """The scores a dataset publishes (a manifest: its MOS only)."""
    if dataset is None:
        return ("mos",)
    from ..datasets import DatasetFormatError, get_dataset

    try:
        reader = get_dataset(dataset)
    except DatasetFormatError as exc:
        raise JobSpecError(str(exc)) from None
    return tuple(getattr(reader, "scores", ("mos",)))


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    context = first.get("ctx") or {}
    cause = context.get("error")
    if isinstance(cause, JobSpecError):
        return str(cause)
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


def reconstruct(
    *,
    name: str,
    manifest: str,
    default_query: str,
    root: str | None,
    max_replan_iterations: int,
    vlm_cache: bool,
    tools: Sequence[str] | None,
    mode: str | None,
    dataset: Mapping[str, Any] | None,
    config: RunConfig | None,
) -> JobSpec:
    """The spec of a job stored before specs were (its columns say all of it but the limit,
    the image folder and the group, which were never kept)."""
    fields: dict[str, Any] = {
        "name": name,
        "query": default_query,
        "max_replan_iterations": max_replan_iterations,
        "vlm_cache": vlm_cache,
        "tools": tuple(tools) if tools else None,
        "mode": mode or ("tools" if tools else "agent"),
        "config": config,
        "batch": bool(config and config.batch),
        "root": place(root),
    }
    if dataset:
        fields.update(
            dataset=dataset.get("name"),
            split=dataset.get("split"),
            root=place(dataset.get("root") or root),
            mos_range=tuple(dataset["mos_range"]) if dataset.get("mos_range") else None,
            score=dataset.get("score") or "mos",
        )
    else:
        fields["manifest"] = place(manifest)
    return JobSpec.model_construct(**fields)


def new_group() -> str:
    """A sweep's group name when none is given: when, and enough randomness to be unique."""
    return f"sweep-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


__all__ = [
    "MODES",
    "SCORES",
    "SCORE_COLUMN",
    "JobSpec",
    "JobSpecError",
    "Mode",
    "Score",
    "new_group",
    "reconstruct",
]
