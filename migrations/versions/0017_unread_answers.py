"""Why a run read no answer, and a job's count of replies that could not see the image.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30

``runs.unread`` (string, null): why no answer was read from the model's reply, as a kind a
report counts by: "cannot see" (the model says it cannot see the image) or "other"; null where
an answer was read.  ``jobs.items_cannot_see`` (integer, 0): the job's done items whose run is
"cannot see", counted in the transaction that closes each, so ``eval status`` warns that the
model may not be receiving the images without reading a million items.

Nothing is filled for runs stored before: a reply saying it cannot see the image was read as
the letter it named until this release, so no stored run is one (their unread answers, of
other kinds, stay null: only the count of "cannot see" is warned about).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("unread", sa.String(16), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("items_cannot_see", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("items_cannot_see")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("unread")
