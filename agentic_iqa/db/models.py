"""The tables of the distributed pipeline: runs, their steps, tool calls and replans.

Names are plain words and values plain columns (no JSON to unpack for the common questions), so
"which runs fell back from BRISQUE" or "mean score per tool" is a short SQL query on SQLite and
PostgreSQL alike.  Every timestamp is stored in UTC and read back timezone-aware, on both.
Constraint names follow one convention, so migrations can name what they alter.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from ..state import ToolExecutionLog

RUN_STATUSES = ("pending", "running", "succeeded", "failed")
STEP_STATUSES = ("running", "succeeded", "failed")

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every dialect.

    SQLite has no timezone type and returns naive values; PostgreSQL returns values in the
    session's time zone.  Naive input is refused rather than guessed.
    """

    impl = DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one (UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class NanAsNullFloat(TypeDecorator[float]):
    """A float where NaN (a failed tool's score) is stored as NULL, so AVG() skips it."""

    impl = Float
    cache_ok = True

    def process_bind_param(self, value: float | None, dialect: Dialect) -> float | None:
        return None if value is None or math.isnan(value) else float(value)


def utc_now() -> datetime:
    """Return the time now, in UTC."""
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """Return ``moment`` with its time zone: SQLite gives back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def new_run_id() -> str:
    """Return a new run id (a random UUID)."""
    return str(uuid.uuid4())


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UtcDateTime()}
    if TYPE_CHECKING:  # every model maps one Table (SQLAlchemy types it as any FromClause)
        __table__: ClassVar[Table]


def _status_check(statuses: tuple[str, ...]) -> CheckConstraint:
    allowed = ", ".join(f"'{status}'" for status in statuses)
    return CheckConstraint(f"status IN ({allowed})", name="status")


class Run(Base):
    """One query on one image, from submission to answer (or failure).

    ``lease_until``: the run is expected to make progress (a step beginning, beating or ending)
    before then; past it, the supervisor re-sends it (``resends`` counts how often).
    """

    __tablename__ = "runs"
    __table_args__ = (
        _status_check(RUN_STATUSES),
        Index("ix_runs_status_lease_until", "status", "lease_until"),
        # A job's runs in flight (leases renewed, counted, taken over) are found without
        # reading its finished ones: a million-item job has a window of them open.
        Index("ix_runs_job_id_status", "job_id", "status"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_run_id)
    query: Mapped[str] = mapped_column(Text)
    image_path: Mapped[str] = mapped_column(Text)
    reference_path: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    state_json: Mapped[str] = mapped_column(Text)
    final_answer: Mapped[str | None] = mapped_column(Text)
    quality_score: Mapped[float | None] = mapped_column(Float)
    #: Why no answer was read from the model's reply, as a kind a report counts by
    #: (:data:`agentic_iqa.reports.unread.UNREAD_KINDS`: "cannot see", "other"); the reason in
    #: words is in the stored state.  None: an answer was read, or the run gave none.
    unread: Mapped[str | None] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    iteration_count: Mapped[int] = mapped_column(Integer, default=0)
    max_replan_iterations: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str | None] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    lease_until: Mapped[datetime | None]
    resends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: False: this run's VLM requests bypass the response cache (``--no-vlm-cache``).
    vlm_cache: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    #: What shapes a run of no job (``assess --distributed``): a
    #: :class:`~agentic_iqa.runconfig.RunConfig` as JSON, never a key; None for a job's runs,
    #: which run as their job's ``config_json`` says.
    config_json: Mapped[str | None] = mapped_column(Text)
    #: True while the run waits for a model answer from a provider batch (``--batch``): no
    #: lease, nothing to re-send; the round that reads the answer sends it on.
    awaiting_batch: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    steps: Mapped[list[StepRecord]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by=lambda: (StepRecord.iteration, StepRecord.id),
    )
    tool_logs: Mapped[list[ToolLog]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by=lambda: (ToolLog.iteration, ToolLog.id),
    )
    replans: Mapped[list[ReplanRow]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by=lambda: ReplanRow.iteration,
    )

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, status={self.status!r})"


def _run_fk() -> ForeignKey:
    return ForeignKey("runs.id", ondelete="CASCADE")


class StepRecord(Base):
    """One step of one iteration of a run; a redelivered task finds it and skips or retries."""

    __tablename__ = "step_records"
    __table_args__ = (
        UniqueConstraint("run_id", "step", "iteration"),
        _status_check(STEP_STATUSES),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), _run_fk())
    step: Mapped[str] = mapped_column(String(32))
    iteration: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    output_json: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(255))
    queue: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(default=utc_now)
    finished_at: Mapped[datetime | None]
    #: While running: its owner beats before then; a second delivery after it takes over.
    lease_until: Mapped[datetime | None]

    run: Mapped[Run] = relationship(back_populates="steps")

    def __repr__(self) -> str:
        return (
            f"StepRecord(run_id={self.run_id!r}, step={self.step!r}, "
            f"iteration={self.iteration}, status={self.status!r})"
        )


class ToolLog(Base):
    """One tool call (a :class:`ToolExecutionLog`), fallbacks and failures included."""

    __tablename__ = "tool_logs"
    __table_args__ = (UniqueConstraint("run_id", "iteration", "object_name", "distortion"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), _run_fk())
    iteration: Mapped[int] = mapped_column(Integer)
    tool_name: Mapped[str] = mapped_column(Text, index=True)
    requested_tool: Mapped[str | None] = mapped_column(Text)
    object_name: Mapped[str] = mapped_column(Text)
    distortion: Mapped[str] = mapped_column(Text)
    raw_score: Mapped[float | None] = mapped_column(NanAsNullFloat)
    normalized_score: Mapped[float | None] = mapped_column(NanAsNullFloat)
    execution_time: Mapped[float] = mapped_column(Float)
    fallback: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text)
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    timestamp: Mapped[datetime]

    run: Mapped[Run] = relationship(back_populates="tool_logs")

    @classmethod
    def columns_from(
        cls, entry: ToolExecutionLog, *, run_id: str, iteration: int
    ) -> dict[str, Any]:
        """Return the row for one logged tool call, as column values."""
        return {
            "run_id": run_id,
            "iteration": iteration,
            "tool_name": entry.tool_name,
            "requested_tool": entry.requested_tool,
            "object_name": entry.object_name,
            "distortion": entry.distortion,
            "raw_score": entry.raw_score,
            "normalized_score": entry.normalized_score,
            "execution_time": entry.execution_time,
            "fallback": entry.fallback,
            "error": entry.error,
            "cached": entry.cached,
            "timestamp": entry.timestamp,
        }

    def __repr__(self) -> str:
        return (
            f"ToolLog(run_id={self.run_id!r}, iteration={self.iteration}, "
            f"tool_name={self.tool_name!r}, normalized_score={self.normalized_score})"
        )


class VlmCall(Base):
    """One VLM answer a step got: a call to the model, or a hit in our response cache.

    Keyed by (run, step, iteration, attempt, seq): storing a step's calls again (a redelivered
    task) changes nothing, and each attempt of a retried step keeps its own calls, which were
    paid for.  Tokens are the SDK's (``input_tokens`` includes ``cached_tokens``); a cache hit
    keeps the tokens of the call it replays, and totals count only real calls.  Whether a step's
    answers came from the cache is derived from here (``cache_hit``), not stored on the step.
    """

    __tablename__ = "vlm_calls"
    __table_args__ = (UniqueConstraint("run_id", "step", "iteration", "attempt", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), _run_fk())
    step: Mapped[str] = mapped_column(String(32))
    iteration: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    task: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(Text, index=True)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    latency_s: Mapped[float] = mapped_column(Float)
    cache_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    #: SHA-256 cache key of the request (no prompt text), when it was cacheable.
    request_key: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    #: Why the call failed (HTTP status and message, credentials masked); None: answered.
    error: Mapped[str | None] = mapped_column(Text)
    #: Host (and port) the call went to, never credentials; None for cache hits of old rows.
    endpoint: Mapped[str | None] = mapped_column(Text)
    #: The provider's batch id when the answer came from a batch (billed at the batch price).
    batch: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return (
            f"VlmCall(run_id={self.run_id!r}, step={self.step!r}, seq={self.seq}, "
            f"model={self.model!r}, cache_hit={self.cache_hit})"
        )


class ReplanRow(Base):
    """One replanning round of a run, kept in full (the state keeps only the latest ten);
    ``failure``: why its new plan could not be made (the summarizer then answered with the
    previous plan's evidence), None when it was made."""

    __tablename__ = "replan_history"
    __table_args__ = (UniqueConstraint("run_id", "iteration"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), _run_fk())
    iteration: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    failure: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)

    run: Mapped[Run] = relationship(back_populates="replans")

    def __repr__(self) -> str:
        return f"ReplanRow(run_id={self.run_id!r}, iteration={self.iteration})"


JOB_STATUSES = ("running", "done", "cancelled")
#: How a job's items are answered: the agent, the VLM alone (no plan, no tools), the tools alone.
JOB_MODES = ("agent", "vlm", "tools")
ITEM_STATUSES = ("pending", "queued", "done", "failed", "cancelled")
#: The column of ``jobs`` that counts a job's items in each state.
ITEM_COUNTERS = {status: f"items_{status}" for status in ITEM_STATUSES}


class Job(Base):
    """A dataset evaluation: one manifest, many items, each answered by one run."""

    __tablename__ = "jobs"
    __table_args__ = (
        _status_check(JOB_STATUSES),
        CheckConstraint(
            "mode IN (" + ", ".join(f"'{mode}'" for mode in JOB_MODES) + ")", name="mode"
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_run_id)
    name: Mapped[str] = mapped_column(Text)
    manifest: Mapped[str] = mapped_column(Text)
    default_query: Mapped[str] = mapped_column(Text)
    root: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="running")
    max_replan_iterations: Mapped[int] = mapped_column(Integer, default=2)
    dispatch: Mapped[str] = mapped_column(String(16), default="workers", server_default="workers")
    #: False: the job's VLM requests bypass the response cache (``eval submit --no-vlm-cache``).
    vlm_cache: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    finished_at: Mapped[datetime | None]
    #: A metric job (``eval submit --tools``): its tools, comma-separated; None for the agent.
    tools: Mapped[str | None] = mapped_column(Text)
    #: Why the job stopped early (its backend refuses every request); None otherwise.
    error: Mapped[str | None] = mapped_column(Text)
    #: The configuration the job was submitted with (:class:`agentic_iqa.runconfig.RunConfig`
    #: as JSON, no credentials); every item runs with it.  None: a job stored before 0007.
    config_json: Mapped[str | None] = mapped_column(Text)
    #: Why a process could not run the job's items as submitted, and when it last said so.
    waiting: Mapped[str | None] = mapped_column(Text)
    waiting_at: Mapped[datetime | None]
    #: The ablation the job runs (:data:`JOB_MODES`), so jobs over the same items compare.
    mode: Mapped[str] = mapped_column(String(8), default="agent", server_default="agent")
    #: The public dataset the items were read from (name, split, root, MOS scale) as JSON;
    #: None for a hand-made manifest.
    dataset_json: Mapped[str | None] = mapped_column(Text)
    #: The job whole (:class:`agentic_iqa.jobs.spec.JobSpec` as JSON): where its items came
    #: from, how they run, its bounds.  None: a job stored before 0012 (its columns say it).
    spec_json: Mapped[str | None] = mapped_column(Text)
    #: The sweep the job belongs to (``eval submit --group``), so a group lists and compares.
    job_group: Mapped[str | None] = mapped_column(Text, index=True)
    #: The process running a local job and renewing its leases (host, boot id, pid, start time
    #: as JSON: :class:`agentic_iqa.runtime.heartbeat.Holder`); None on the workers.
    lease_holder: Mapped[str | None] = mapped_column(Text)
    #: The job's items by state, kept in the transaction that moves an item (claimed, closed,
    #: cancelled, reopened), so that progress, ``eval status`` and ``eval list`` never count a
    #: million rows.  None: not counted yet (a job whose items are still going in); the next
    #: writer that needs them counts once (:func:`agentic_iqa.db.items.recount`).
    items_pending: Mapped[int | None] = mapped_column(Integer)
    items_queued: Mapped[int | None] = mapped_column(Integer)
    items_done: Mapped[int | None] = mapped_column(Integer)
    items_failed: Mapped[int | None] = mapped_column(Integer)
    items_cancelled: Mapped[int | None] = mapped_column(Integer)
    #: Done items whose model said it cannot see the image (``runs.unread``), counted in the
    #: transaction that closes each, so ``eval status`` warns without reading the items (a done
    #: item is never reopened, so the count only grows).
    items_cannot_see: Mapped[int] = mapped_column(Integer, server_default="0")
    #: What ``eval list`` shows of an ended job (its figures per line, cost), as JSON, stored
    #: when the job ends, so that listing never reads its items; None: not computed yet.
    headline_json: Mapped[str | None] = mapped_column(Text)
    #: Every item of the job has an id above this one (the highest item id stored when the job
    #: was created): a walk through its items by id starts here, not at the first row of the
    #: table, whichever index the planner takes.
    items_after: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The highest item id claimed so far: the job's pending items lie above it (a resume,
    #: which reopens items below it, sets it back to :attr:`items_after`), so a claim reads the
    #: window after it whichever index the planner takes (PostgreSQL walks the primary key when
    #: it guesses that is cheaper, and without a bound it walked past every item already run).
    claim_after: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: True while its submit is still adding rows (its first items may already run): the job
    #: is not finished before its last row is in.
    submitting: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    @property
    def metric_tools(self) -> list[str] | None:
        """The tools of a metric job, in the order given; None for an agent job."""
        return self.tools.split(",") if self.tools else None

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, name={self.name!r}, status={self.status!r})"


class JobItem(Base):
    """One manifest row: its inputs and ground truth, its state, and the run that answers it.

    A bad row (missing file, unreadable image, bad MOS) is an item too, 'failed' with the reason
    and its line number, so nothing in the manifest is silently dropped.
    """

    __tablename__ = "job_items"
    __table_args__ = (
        UniqueConstraint("job_id", "item_key"),
        _status_check(ITEM_STATUSES),
        # Claiming (a job's pending items in id order, LIMIT a window) and counting by state
        # read this index alone, in order: no sort of the job's rows, at any size.
        Index("ix_job_items_job_id_status_id", "job_id", "status", "id"),
        # Exports and reports page through a job's items by id (keyset) on this one.
        Index("ix_job_items_job_id_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(36), ForeignKey("jobs.id", ondelete="CASCADE"))
    line: Mapped[int] = mapped_column(Integer)
    item_key: Mapped[str] = mapped_column(Text)
    image: Mapped[str | None] = mapped_column(Text)
    reference: Mapped[str | None] = mapped_column(Text)
    query: Mapped[str | None] = mapped_column(Text)
    mos: Mapped[float | None] = mapped_column(Float)
    answer_truth: Mapped[str | None] = mapped_column(String(8))
    #: What the dataset says of the item beyond inputs and truth (a question type, a
    #: distortion and level), as JSON; None when it says nothing.
    meta_json: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    error: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(36), index=True)
    #: For an image (reference) in an object store: the store's digest of the object at
    #: submit (``etag:...`` or ``version:...``), so a resume notices one that changed.
    image_digest: Mapped[str | None] = mapped_column(Text)
    reference_digest: Mapped[str | None] = mapped_column(Text)
    queued_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    def __repr__(self) -> str:
        return f"JobItem(job_id={self.job_id!r}, line={self.line}, status={self.status!r})"


#: A batch request: waiting for a round, sent in a batch, answered, or failed for good.
BATCH_REQUEST_STATUSES = ("pending", "submitted", "answered", "failed")


class VlmBatch(Base):
    """One batch sent to a provider (``eval submit --batch``): a round's requests for one
    backend and model.

    The row is written (``status`` "submitting", no ``provider_id``) and committed before the
    provider is asked, and ``id`` travels in the batch's metadata (OpenAI) and its requests'
    custom_ids: a process killed between the two finds its batch again instead of paying for
    it twice (:mod:`agentic_iqa.runtime.batches`).
    """

    __tablename__ = "vlm_batches"
    __table_args__ = (Index("ix_vlm_batches_ended_next_poll_at", "ended", "next_poll_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_run_id)
    job_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    round: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    backend: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(Text)
    provider_id: Mapped[str | None] = mapped_column(Text)
    #: "submitting" until the provider has it; then the provider's own word.
    status: Mapped[str] = mapped_column(String(32), default="submitting")
    ended: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The answers were read and written to the requests (nothing more to read).
    read: Mapped[bool] = mapped_column(Boolean, default=False)
    request_count: Mapped[int] = mapped_column(Integer)
    counts_json: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    submitted_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]
    #: Polled no sooner than this (backoff); a supervisor claims a poll by moving it.
    next_poll_at: Mapped[datetime | None]
    polls: Mapped[int] = mapped_column(Integer, default=0)

    def __repr__(self) -> str:
        return (
            f"VlmBatch(id={self.id!r}, round={self.round}, status={self.status!r}, "
            f"requests={self.request_count})"
        )


class BatchRequest(Base):
    """One model call a run waits for, keyed like the call it stands for (run, step,
    iteration, seq: its place in the step), so a step replayed after its answers came finds
    them in order.  ``custom_id`` is ``q<id>``; on the provider's side it follows its batch
    row's id (:func:`agentic_iqa.db.batches.line_id`)."""

    __tablename__ = "batch_requests"
    __table_args__ = (
        UniqueConstraint("run_id", "step", "iteration", "seq"),
        _status_check(BATCH_REQUEST_STATUSES),
        Index("ix_batch_requests_job_id_status", "job_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(36), ForeignKey("jobs.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(String(36), _run_fk())
    step: Mapped[str] = mapped_column(String(32))
    iteration: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    #: The response-cache key of the request (agentic_iqa.vlm.cache.request_key).
    request_key: Mapped[str] = mapped_column(String(64))
    #: The request as JSON (texts, image paths, options): the body is built when it is sent.
    request_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    batch_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("vlm_batches.id", ondelete="SET NULL"), index=True
    )
    #: Batches it was sent in without an answer (errored, expired) so far.
    tries: Mapped[int] = mapped_column(Integer, default=0)
    response_json: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    answered_at: Mapped[datetime | None]

    @property
    def custom_id(self) -> str:
        return f"q{self.id}"

    def __repr__(self) -> str:
        return (
            f"BatchRequest(id={self.id}, run_id={self.run_id!r}, step={self.step!r}, "
            f"seq={self.seq}, status={self.status!r})"
        )
