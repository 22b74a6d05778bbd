"""Dataset evaluation jobs and their items.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25

Items are looked up by (job, status) for progress counts and for feeding the queue in batches,
hence that index; ``run_id`` is indexed to close an item when its run finishes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("manifest", sa.Text(), nullable=False),
        sa.Column("default_query", sa.Text(), nullable=False),
        sa.Column("root", sa.Text(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("max_replan_iterations", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.CheckConstraint(
            "status IN ('running', 'done', 'cancelled')", name=op.f("ck_jobs_status")
        ),
    )
    op.create_table(
        "job_items",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("item_key", sa.Text(), nullable=False),
        sa.Column("image", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("mos", sa.Float(), nullable=True),
        sa.Column("answer_truth", sa.String(8), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("queued_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_items")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], ondelete="CASCADE", name=op.f("fk_job_items_job_id_jobs")
        ),
        sa.UniqueConstraint("job_id", "item_key", name=op.f("uq_job_items_job_id_item_key")),
        sa.CheckConstraint(
            "status IN ('pending', 'queued', 'done', 'failed', 'cancelled')",
            name=op.f("ck_job_items_status"),
        ),
    )
    op.create_index("ix_job_items_job_id_status", "job_items", ["job_id", "status"])
    op.create_index(op.f("ix_job_items_run_id"), "job_items", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_job_items_run_id"), table_name="job_items")
    op.drop_index("ix_job_items_job_id_status", table_name="job_items")
    op.drop_table("job_items")
    op.drop_table("jobs")
