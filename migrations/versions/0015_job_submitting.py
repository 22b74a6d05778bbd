"""Whether a job's submit is still adding its rows.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28

``jobs.submitting`` (boolean, false for every job stored before): a submit stores its rows a
chunk at a time and its first items run while the rest are read; until its last row is in, the
job is not finished, whatever its items say.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("submitting", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("submitting")
