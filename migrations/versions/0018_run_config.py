"""The configuration a run outside any job is run with.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04

``runs.config_json`` (text, null): what shapes a run that belongs to no job, as
``jobs.config_json`` does for a job's runs (:class:`agentic_iqa.runconfig.RunConfig`: backends,
models and base URLs per role, the follow-up question, prompts, tools; never a key).
``agentic-iqa assess --distributed`` stores it, so the workers run the run with the flags it was
asked with, not their own defaults.  A job's run keeps null: its job's configuration holds.

Runs stored before stay null: they ran, or run, on the workers' own configuration, as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("config_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("config_json")
