"""Where the product's YAML configuration lives, and the settings read from it.

Configuration files are looked up in ``$AGENTIC_IQA_CONFIG_DIR`` if set, else in the ``configs``
folder shipped with the package (``agentic_iqa/configs`` in a wheel, ``configs/`` in a checkout).
Environment variables override any value in them.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from iqa_tools.secret_env import (
    SecretFileSource,
    file_set_fields,
    with_database_password,
    with_redis_password,
)
from iqa_tools.settings import ToolSettings

if TYPE_CHECKING:
    from iqa_tools.catalog import Catalog

#: The variables that decide which tool catalogue is configured (see :func:`configured_catalog`).
CATALOG_VARIABLES = (
    "AGENTIC_IQA_CONFIG_DIR",
    "AGENTIC_IQA_METADATA_PATH",
    "AGENTIC_IQA_METADATA_OVERRIDES",
)


def config_dir() -> Path:
    if os.environ.get("AGENTIC_IQA_CONFIG_DIR"):
        return Path(os.environ["AGENTIC_IQA_CONFIG_DIR"]).expanduser()
    packaged = Path(__file__).parent / "configs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "configs"


def config_file(name: str) -> Path:
    return config_dir() / name


def load_tool_settings(**overrides: object) -> ToolSettings:
    return ToolSettings.from_yaml(config_file("tools.yaml"), **overrides)


def configured_catalog() -> Catalog:
    """Return the tool catalogue as configured here, overrides included.

    User-added tools are valid names.  Cached per configuration (the values of
    :data:`CATALOG_VARIABLES`), so validating a state does not re-read the YAML every time.
    """
    return _catalog_for(tuple(os.environ.get(name) for name in CATALOG_VARIABLES))


@functools.lru_cache(maxsize=8)
def _catalog_for(_environment: tuple[str | None, ...]) -> Catalog:
    """Read the catalogue the tool settings name (``_environment`` is the cache's key)."""
    from iqa_tools.catalog import load_catalog

    settings = load_tool_settings()
    return load_catalog(settings.metadata_path, settings.metadata_overrides)


class PipelineSettings(BaseSettings):
    """Where runs are stored and how the distributed pipeline talks (``configs/pipeline.yaml``).

    Without a broker URL everything runs in the calling process against the database, so the
    embedded default needs no server at all.  The URLs may come from files
    (``AGENTIC_IQA_DATABASE_URL_FILE``, ...) and take their passwords from
    ``AGENTIC_IQA_DATABASE_PASSWORD`` and ``AGENTIC_IQA_REDIS_PASSWORD`` (or their ``_FILE``
    forms): :mod:`iqa_tools.secret_env`.
    """

    model_config = SettingsConfigDict(env_prefix="AGENTIC_IQA_", extra="ignore")
    #: The settings that may hold a password, so may be read from ``AGENTIC_IQA_<NAME>_FILE``.
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("database_url", "broker_url", "result_backend")

    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default sqlite:///./agentic-iqa.sqlite3"
    )
    broker_url: str | None = Field(default=None, description="redis://...; unset = in-process")
    result_backend: str | None = None
    default_queue: str = "default"
    tool_queue: str = Field(default="gpu", description="queue of the IQA tool steps")
    #: Tool steps scored together in one forward pass per tool (same-sized inputs); 1 = off.
    #: Worth it on a GPU; a tool worker that consumes only the tool queue then prefetches this
    #: many messages (``worker_init`` in workers/tasks.py).  Every process of the fleet (those
    #: that send tool steps too) must agree: they pick the task by it.
    tool_batch_size: int = Field(default=1, ge=1)
    #: Longest wait (seconds) for a batch to fill: a lone item is delayed at most this.
    tool_batch_wait: float = Field(default=0.05, gt=0)
    #: Queue of the VLM steps (plan ... summarize, replan): network-bound, so a worker with a
    #: thread pool can hold many calls in flight.  Unset: the default queue.
    vlm_queue: str | None = Field(default=None, description="queue of the VLM steps")
    #: Seconds before Redis hands an unacknowledged task to another worker; must exceed the
    #: longest task, or a slow task runs twice.
    visibility_timeout: int = Field(default=3600, ge=1)
    #: How often workers look for tasks whose visibility timeout has passed (seconds).
    unacked_restore_interval: int = Field(default=10, ge=1)
    vlm_soft_time_limit: int = Field(default=300, ge=1)
    tool_soft_time_limit: int = Field(default=900, ge=1)
    hard_time_limit_margin: int = Field(default=60, ge=1)
    #: A step task runs the run's following steps that belong to a queue its worker consumes
    #: itself, for up to this many seconds, instead of sending each as a message (plan,
    #: detection, analysis and selection on one worker: four messages fewer per run; a worker
    #: of every queue: one message per run); 0: one step per message.
    inline_seconds: float = Field(default=60.0, ge=0)
    #: A tool step whose every tool call has a cached score (a dataset re-run with other
    #: questions, a resumed job) is a cache read: the worker that decided on it runs it where
    #: it is (within ``inline_seconds``) instead of sending it to the tool queue and back.
    cached_tools_inline: bool = True
    #: Celery task events (Flower's live view of every step); off saves two or three broker
    #: messages per step.
    task_events: bool = True
    #: Deliveries of one step that may begin before it is given up: a step whose worker died
    #: each time (killed at the hard time limit, out of memory, crashing on this input) fails
    #: its run with the reason instead of being re-sent by the supervisor for ever.
    max_step_attempts: int = Field(default=3, ge=1)
    vlm_max_retries: int = Field(default=4, ge=0)
    retry_backoff_max: int = Field(default=120, ge=1)
    max_replan_iterations: int = Field(default=2, ge=0)
    #: Items of a dataset job in flight at once on the workers (the feeder tops up to this).
    job_window: int = Field(default=200, ge=1)
    #: Runs of a metric job walked together, locally by a thread or on the workers as one
    #: message to the tool queue, their ends written in one transaction; 1 = one at a time.
    #: An item shows as done at most a chunk later; a process killed loses at most a chunk of
    #: scores computed (cached: a resume does not compute them again).
    metric_chunk_size: int = Field(default=32, ge=1)
    #: Seconds between two top-ups of a job's window (also the supervisor's tick).
    feed_interval: float = Field(default=2.0, gt=0)
    #: Seconds a run may go without progress (a step beginning, beating or ending) before the
    #: supervisor re-sends it.  Far below ``visibility_timeout``: this, not Redis, is what heals
    #: a lost message.  Keep it above the longest wait in a queue (job_window x seconds per
    #: item / workers), or waiting runs get a harmless extra message each lease.
    lease_seconds: float = Field(default=120.0, gt=0)
    #: Run the supervisor (feeding jobs, re-sending stalled runs) in workers of the default
    #: queue.  Several supervisors are safe: the database decides who re-sends what.
    supervisor: bool = True
    #: A file every worker touches each ``worker_health_interval`` seconds while its consumer
    #: is connected to the broker (a container's healthcheck reads its age); unset: none.
    worker_health_file: Path | None = None
    #: Seconds between a worker's signs of life: the liveness file touched and its queues
    #: announced in the broker (an announcement holds three intervals).
    worker_health_interval: float = Field(default=10.0, gt=0)
    #: Answer deterministic VLM requests from the response cache (same store as tool scores:
    #: ``tool_cache`` in configs/tools.yaml); ``AGENTIC_IQA_VLM_CACHE=false`` turns it off.
    vlm_cache: bool = True
    #: Where the response cache lives (a tool cache URL: ``redis://``, ``sqlite:///``,
    #: ``memory``, ``none``); unset: the tool scores' store, ``tool_cache``.  Where that is the
    #: broker's Redis (no eviction, by design), give the cache a store of its own.
    vlm_cache_url: str | None = None
    #: Seconds a cached answer is kept (Redis expires the key, SQLite serves no older row);
    #: 0: for ever.
    vlm_cache_ttl: float = Field(default=30 * 24 * 3600, ge=0)
    #: An answer whose JSON is larger than this many bytes is not cached (logged once).
    vlm_cache_max_entry_bytes: int = Field(default=1024 * 1024, ge=1)
    #: The price table (USD per million tokens per model); unset: configs/prices.yaml.
    prices_file: Path | None = None
    #: ``eval submit --batch``: a round's batch is sent when every run of the job waits for an
    #: answer; or, with this set above 0, as soon as this many requests wait (a job is not held
    #: back by its slowest item); or once the oldest has waited ``batch_gather_seconds``.
    batch_round_size: int = Field(default=0, ge=0)
    batch_gather_seconds: float = Field(default=300.0, gt=0)
    #: An open batch is polled after this many seconds, the wait doubling up to the maximum.
    batch_poll_initial: float = Field(default=5.0, gt=0)
    batch_poll_max: float = Field(default=300.0, gt=0)
    #: Batches a request may come back errored or expired from before its item fails with the
    #: provider's reason.
    batch_max_tries: int = Field(default=3, ge=1)
    #: Requests in one batch at most; unset: the provider's limit (50,000 OpenAI, 100,000
    #: Anthropic).
    batch_max_requests: int | None = Field(default=None, ge=1)
    #: Items of a batch job in flight at once: all of them wait in the same rounds.
    batch_window: int = Field(default=50_000, ge=1)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Read the secret fields from ``AGENTIC_IQA_<NAME>_FILE`` too."""
        secret_files = SecretFileSource(settings_cls, cls.SECRET_FIELDS)
        return init_settings, secret_files, env_settings, dotenv_settings, file_secret_settings

    @model_validator(mode="after")
    def _add_passwords(self) -> PipelineSettings:
        """Put the configured database and Redis passwords into the URLs that have none."""
        self.database_url = with_database_password(self.database_url)
        self.broker_url = with_redis_password(self.broker_url)
        self.result_backend = with_redis_password(self.result_backend)
        return self

    @property
    def vlm_steps_queue(self) -> str:
        """Where VLM steps go: ``vlm_queue``, else the default queue."""
        return self.vlm_queue or self.default_queue

    @property
    def queues(self) -> list[str]:
        """Return every queue the pipeline sends to: default, VLM steps, tools (no repeats)."""
        return list(dict.fromkeys([self.default_queue, self.vlm_steps_queue, self.tool_queue]))

    @classmethod
    def load(cls, **overrides: object) -> PipelineSettings:
        path = config_file("pipeline.yaml")
        values: dict[str, Any] = {}
        if path.is_file():
            document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            values = dict(document.get("pipeline", document))
        env_set = {n for n in cls.model_fields if f"AGENTIC_IQA_{n.upper()}" in os.environ}
        env_set |= file_set_fields("AGENTIC_IQA_", cls.SECRET_FIELDS)
        values = {k: v for k, v in values.items() if k not in env_set and v is not None}
        values.update(overrides)
        return cls(**values)
