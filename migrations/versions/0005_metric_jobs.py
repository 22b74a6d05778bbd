"""Metric jobs: the tools a job runs instead of the agent.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

``jobs.tools`` (text, nullable) holds a metric job's tools, comma-separated in the order given
(``eval submit --tools BRISQUE,NIQE``); NULL is an agent job, as every job before this one.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("tools", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tools")
