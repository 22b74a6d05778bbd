"""A job's configuration, who could not run it, and where each VLM call went.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

``jobs.config_json`` (text, nullable): the configuration a job was submitted with
(agentic_iqa.runconfig.RunConfig: backends, models and base URLs per role without credentials,
prompts and tool catalogue digests, replanning bound, caches, rate limits, version); every item
is run with it.  NULL for jobs stored before: they run as the environment says, as they did.
``jobs.waiting`` / ``jobs.waiting_at``: why a process could not run the job's items as
submitted (no key for its backend, a stale worker), and when it last said so.
``vlm_calls.endpoint`` (nullable): the host (and port) the call went to, never credentials:
prices apply to a provider's own endpoint only.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("config_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("waiting", sa.Text(), nullable=True))
        batch.add_column(sa.Column("waiting_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("vlm_calls") as batch:
        batch.add_column(sa.Column("endpoint", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("vlm_calls") as batch:
        batch.drop_column("endpoint")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("waiting_at")
        batch.drop_column("waiting")
        batch.drop_column("config_json")
