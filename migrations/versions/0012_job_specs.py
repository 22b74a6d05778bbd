"""The job whole as one record, and the sweep it belongs to.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

``jobs.spec_json`` (text, nullable): the job's :class:`agentic_iqa.jobs.spec.JobSpec` as JSON
(where its items came from, how they run, its bounds, its name and group); the other columns
stay filled, so older readers keep working.  NULL for jobs stored before: their spec is
reconstructed from their columns when read.  ``jobs.job_group`` (text, nullable, indexed): the
sweep a job belongs to (``eval submit --group``), so ``eval list --group`` and ``eval compare
--group`` find its jobs by SQL; NULL for jobs stored before (they belong to none).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("spec_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("job_group", sa.Text(), nullable=True))
        batch.create_index("ix_jobs_job_group", ["job_group"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_job_group")
        batch.drop_column("job_group")
        batch.drop_column("spec_json")
