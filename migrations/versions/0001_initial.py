"""Initial schema: runs, step records, tool logs, replan history.

Revision ID: 0001
Revises:
Create Date: 2025-11-25

Written by hand to match agentic_iqa/db/models.py (tests check they agree).  Names are final
(``op.f``): env.py's metadata carries the models' naming convention, which would otherwise be
applied to them a second time.  Timestamps are
``TIMESTAMP WITH TIME ZONE`` holding UTC (SQLite: text, UTC); NaN scores are NULL.  Child rows
go with their run (ON DELETE CASCADE).  The unique constraints make redelivered tasks harmless;
their leading ``run_id`` also serves lookups by run, so ``run_id`` has no index of its own.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("image_path", sa.Text(), nullable=False),
        sa.Column("reference_path", sa.Text(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("state_json", sa.Text(), nullable=False),
        sa.Column("final_answer", sa.Text(), nullable=True),
        sa.Column("quality_score", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("iteration_count", sa.Integer(), nullable=False),
        sa.Column("max_replan_iterations", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(64), nullable=True),
        sa.Column("job_id", sa.String(36), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'succeeded', 'failed')", name=op.f("ck_runs_status")
        ),
    )
    op.create_index(op.f("ix_runs_job_id"), "runs", ["job_id"])

    op.create_table(
        "step_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("step", sa.String(32), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("output_json", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("queue", sa.String(64), nullable=True),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_records")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], ondelete="CASCADE", name=op.f("fk_step_records_run_id_runs")
        ),
        sa.UniqueConstraint(
            "run_id", "step", "iteration", name=op.f("uq_step_records_run_id_step_iteration")
        ),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'failed')", name=op.f("ck_step_records_status")
        ),
    )

    op.create_table(
        "tool_logs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("tool_name", sa.Text(), nullable=False),
        sa.Column("requested_tool", sa.Text(), nullable=True),
        sa.Column("object_name", sa.Text(), nullable=False),
        sa.Column("distortion", sa.Text(), nullable=False),
        sa.Column("raw_score", sa.Float(), nullable=True),
        sa.Column("normalized_score", sa.Float(), nullable=True),
        sa.Column("execution_time", sa.Float(), nullable=False),
        sa.Column("fallback", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cached", sa.Boolean(), nullable=False),
        sa.Column("timestamp", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_logs")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], ondelete="CASCADE", name=op.f("fk_tool_logs_run_id_runs")
        ),
        sa.UniqueConstraint(
            "run_id",
            "iteration",
            "object_name",
            "distortion",
            name=op.f("uq_tool_logs_run_id_iteration_object_name_distortion"),
        ),
    )
    op.create_index(op.f("ix_tool_logs_tool_name"), "tool_logs", ["tool_name"])

    op.create_table(
        "replan_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replan_history")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], ondelete="CASCADE", name=op.f("fk_replan_history_run_id_runs")
        ),
        sa.UniqueConstraint("run_id", "iteration", name=op.f("uq_replan_history_run_id_iteration")),
    )


def downgrade() -> None:
    op.drop_table("replan_history")
    op.drop_index(op.f("ix_tool_logs_tool_name"), table_name="tool_logs")
    op.drop_table("tool_logs")
    op.drop_table("step_records")
    op.drop_index(op.f("ix_runs_job_id"), table_name="runs")
    op.drop_table("runs")
