"""Why a replan's new plan could not be made.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28

``replan_history.failure`` (text, null for every replan stored before and for one that
succeeded): a replan whose plan failed keeps the previous plan and its evidence, and the
summarizer answers with them; the table says so, as the run's state does, so a query over the
table tells the replans that changed the plan from those that could not.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replan_history") as batch:
        batch.add_column(sa.Column("failure", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replan_history") as batch:
        batch.drop_column("failure")
