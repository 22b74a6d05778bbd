"""``jobs.mode`` is one of the three modes, in the database too.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26

The code validated the mode on submit only; a row written another way (a script, a hand-made
UPDATE) could hold a mode no report knows how to read. Every row 0008 wrote passes.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.create_check_constraint(op.f("ck_jobs_mode"), "mode IN ('agent', 'vlm', 'tools')")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_mode"), type_="check")
