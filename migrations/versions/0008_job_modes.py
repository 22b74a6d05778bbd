"""How a job answers (agent, VLM alone, tools alone), the dataset it read, and item metadata.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

``jobs.mode`` ('agent', 'vlm' or 'tools'; existing jobs are 'agent', or 'tools' when they are
metric jobs): the ablation a job runs, so jobs over the same items can be compared.
``jobs.dataset_json`` (nullable): the public dataset a job was read from (name, split, root,
MOS range and direction), NULL for a hand-made manifest.
``job_items.meta_json`` (nullable): what the dataset says of an item beyond its inputs and
truth (Q-Bench's question type and concern, a distortion type and level), as JSON.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("mode", sa.String(8), nullable=False, server_default="agent"))
        batch.add_column(sa.Column("dataset_json", sa.Text(), nullable=True))
    op.execute("UPDATE jobs SET mode = 'tools' WHERE tools IS NOT NULL")
    with op.batch_alter_table("job_items") as batch:
        batch.add_column(sa.Column("meta_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_items") as batch:
        batch.drop_column("meta_json")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("dataset_json")
        batch.drop_column("mode")
