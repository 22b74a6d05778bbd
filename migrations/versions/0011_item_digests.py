"""The store digest of each item's image and reference objects, as found at submit.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

``job_items.image_digest`` / ``reference_digest`` (text, nullable): for an image in an object
store (``s3://``, ``gs://``, ``az://``, ``https://``), the store's digest of the object when
the job was submitted (``etag:...`` or ``version:...``), so a resume notices an object that
changed underneath the job.  NULL for local files and for items stored before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job_items") as batch:
        batch.add_column(sa.Column("image_digest", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reference_digest", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_items") as batch:
        batch.drop_column("reference_digest")
        batch.drop_column("image_digest")
