"""Which process holds a local job's leases.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27

``jobs.lease_holder`` (text, nullable): the process that runs a local job (``dispatch`` =
'local') and renews its runs' leases, as JSON: host, boot id (/proc/sys/kernel/random/boot_id),
pid and the pid's start time.  ``eval resume`` on the same host takes over at once from a holder
that is gone instead of waiting out its leases.  NULL for a job on the workers, and for jobs
stored before (their leases are waited out, as then).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("lease_holder", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lease_holder")
