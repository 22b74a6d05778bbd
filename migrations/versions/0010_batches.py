"""Model calls sent through the providers' batch interfaces (``eval submit --batch``).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

``vlm_batches``: one batch sent to a provider (a round's requests for one backend and model),
its provider id, state, counts, expiry and when it is polled next.  ``batch_requests``: one
model call a run waits for, keyed by (run, step, iteration, seq), its request, its answer or
the provider's reason.  ``runs.awaiting_batch``: the run waits for such an answer (no lease,
nothing to re-send).  ``vlm_calls.batch``: the provider's batch id of an answer that came from a
batch (billed at the batch price).  Existing rows: no batch, not waiting.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "vlm_batches",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("provider_id", sa.Text(), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("ended", sa.Boolean(), nullable=False),
        sa.Column("read", sa.Boolean(), nullable=False),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.Column("counts_json", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("submitted_at", TIMESTAMP, nullable=True),
        sa.Column("ended_at", TIMESTAMP, nullable=True),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
        sa.Column("next_poll_at", TIMESTAMP, nullable=True),
        sa.Column("polls", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_vlm_batches_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vlm_batches")),
    )
    op.create_index(op.f("ix_vlm_batches_job_id"), "vlm_batches", ["job_id"])
    op.create_index("ix_vlm_batches_ended_next_poll_at", "vlm_batches", ["ended", "next_poll_at"])
    op.create_table(
        "batch_requests",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("step", sa.String(32), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("request_key", sa.String(64), nullable=False),
        sa.Column("request_json", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("response_json", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("answered_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'submitted', 'answered', 'failed')",
            name=op.f("ck_batch_requests_status"),
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["vlm_batches.id"],
            name=op.f("fk_batch_requests_batch_id_vlm_batches"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_batch_requests_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_batch_requests_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_requests")),
        sa.UniqueConstraint(
            "run_id",
            "step",
            "iteration",
            "seq",
            name=op.f("uq_batch_requests_run_id_step_iteration_seq"),
        ),
    )
    op.create_index(op.f("ix_batch_requests_batch_id"), "batch_requests", ["batch_id"])
    op.create_index("ix_batch_requests_job_id_status", "batch_requests", ["job_id", "status"])
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("awaiting_batch", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("vlm_calls") as batch:
        batch.add_column(sa.Column("batch", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("vlm_calls") as batch:
        batch.drop_column("batch")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("awaiting_batch")
    op.drop_index("ix_batch_requests_job_id_status", table_name="batch_requests")
    op.drop_index(op.f("ix_batch_requests_batch_id"), table_name="batch_requests")
    op.drop_table("batch_requests")
    op.drop_index("ix_vlm_batches_ended_next_poll_at", table_name="vlm_batches")
    op.drop_index(op.f("ix_vlm_batches_job_id"), table_name="vlm_batches")
    op.drop_table("vlm_batches")
