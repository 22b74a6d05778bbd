"""Why a job stopped, and VLM calls that failed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26

``jobs.error`` (text, nullable): the one message of a job stopped early because its backend
refuses every request (a bad key, an unknown model); NULL for every other job.
``vlm_calls.error`` (text, nullable): a call that failed inside the SDK (HTTP status and message,
credentials masked) is recorded too, with no tokens; NULL for an answered call.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))
    with op.batch_alter_table("vlm_calls") as batch:
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("vlm_calls") as batch:
        batch.drop_column("error")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("error")
