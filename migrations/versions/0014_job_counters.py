"""A job's counts kept as its items move, its headline stored, indexes that serve big jobs.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

``jobs.items_pending`` ... ``items_cancelled`` (integer, nullable): the job's items in each
state, updated in the transaction that moves an item, so progress, ``eval status`` and ``eval
list`` read five numbers instead of counting a million rows; filled here from the items (a
count per job and state).  NULL: not counted yet.  ``jobs.headline_json`` (text, nullable):
the figures ``eval list`` shows of an ended job, stored when it ends (NULL for jobs before:
computed once when first listed).  ``jobs.items_after`` (integer, 0): the highest item id
stored when the job was created (its items lie above it), where walks through its items
start; ``jobs.claim_after`` (integer, 0): the highest item id claimed so far, the lower bound
of the next claim (0 for jobs before: their walks start at the table's first row).

Indexes: ``ix_job_items_job_id_status_id`` (job_id, status, id) replaces (job_id, status), so
claiming a job's next pending items reads them in id order from the index (PostgreSQL read and
discarded the rows of other jobs, or sorted every pending row); ``ix_job_items_job_id_id``
(job_id, id) serves paging through a job's items (SQLite sorted the whole job for each page);
``ix_runs_job_id_status`` (job_id, status) replaces (job_id), so a job's runs in flight (lease
renewal, live leases) are found without reading its finished ones.  The planner's statistics
are refreshed at the end (ANALYZE).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATUSES = ("pending", "queued", "done", "failed", "cancelled")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for status in STATUSES:
            batch.add_column(sa.Column(f"items_{status}", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("headline_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("items_after", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("claim_after", sa.Integer(), nullable=False, server_default="0"))
    op.drop_index("ix_job_items_job_id_status", table_name="job_items")
    op.create_index("ix_job_items_job_id_status_id", "job_items", ["job_id", "status", "id"])
    op.create_index("ix_job_items_job_id_id", "job_items", ["job_id", "id"])
    op.drop_index("ix_runs_job_id", table_name="runs")
    op.create_index("ix_runs_job_id_status", "runs", ["job_id", "status"])
    _fill_counters()
    if op.get_context().dialect.name == "sqlite":  # a sample of each index, not a scan of it
        op.execute("PRAGMA analysis_limit=1000")
    op.execute("ANALYZE job_items")
    op.execute("ANALYZE runs")


def _fill_counters() -> None:
    """Every job's counts from its items: one statement, each count a range of the new
    (job_id, status, id) index, so it also runs in offline mode (``--sql``)."""
    counts = ", ".join(
        f"items_{status} = (SELECT COUNT(*) FROM job_items WHERE job_items.job_id = jobs.id"
        f" AND job_items.status = '{status}')"
        for status in STATUSES
    )
    op.execute(f"UPDATE jobs SET {counts}")


def downgrade() -> None:
    op.drop_index("ix_runs_job_id_status", table_name="runs")
    op.create_index("ix_runs_job_id", "runs", ["job_id"])
    op.drop_index("ix_job_items_job_id_id", table_name="job_items")
    op.drop_index("ix_job_items_job_id_status_id", table_name="job_items")
    op.create_index("ix_job_items_job_id_status", "job_items", ["job_id", "status"])
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("claim_after")
        batch.drop_column("items_after")
        batch.drop_column("headline_json")
        for status in reversed(STATUSES):
            batch.drop_column(f"items_{status}")
