"""VLM calls and their cost; turning the VLM response cache off per run or job.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27

``vlm_calls`` holds one row per answer a step got from a VLM (a call, or a hit in the response
cache), with the tokens the SDK reported and the latency, keyed by (run, step, iteration,
attempt, seq) so a redelivered step never stores its calls twice.  ``runs.vlm_cache`` and
``jobs.vlm_cache`` (default true) are false for ``--no-vlm-cache``.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "vlm_calls",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("step", sa.String(32), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("task", sa.String(32), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("request_key", sa.String(64), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vlm_calls")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], ondelete="CASCADE", name=op.f("fk_vlm_calls_run_id_runs")
        ),
        sa.UniqueConstraint(
            "run_id",
            "step",
            "iteration",
            "attempt",
            "seq",
            name=op.f("uq_vlm_calls_run_id_step_iteration_attempt_seq"),
        ),
    )
    op.create_index(op.f("ix_vlm_calls_model"), "vlm_calls", ["model"])
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("vlm_cache", sa.Boolean(), nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("vlm_cache", sa.Boolean(), nullable=False, server_default=sa.true())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("vlm_cache")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("vlm_cache")
    op.drop_index(op.f("ix_vlm_calls_model"), table_name="vlm_calls")
    op.drop_table("vlm_calls")
