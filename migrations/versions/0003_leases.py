"""Leases: how long a run or a step may go without progress before it is re-sent.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26

``runs.lease_until`` is pushed forward whenever a run makes progress (dispatched, a step begins,
beats or ends); the supervisor re-sends runs whose lease has passed, so a message lost with a
broker restart or a killed worker heals without ``eval resume``.  ``step_records.lease_until``
tells a second delivery of a running step whether its owner is alive (wait) or gone (take over).
``jobs.dispatch`` says who feeds a job: ``workers`` (the supervisor tops it up) or ``local``
(the submitting process does).  Existing rows get a lease of "now" and ``workers``.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("lease_until", TIMESTAMP, nullable=True))
        batch.add_column(sa.Column("resends", sa.Integer(), nullable=False, server_default="0"))
    op.create_index(op.f("ix_runs_status_lease_until"), "runs", ["status", "lease_until"])
    with op.batch_alter_table("step_records") as batch:
        batch.add_column(sa.Column("lease_until", TIMESTAMP, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("dispatch", sa.String(16), nullable=False, server_default="workers")
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("dispatch")
    with op.batch_alter_table("step_records") as batch:
        batch.drop_column("lease_until")
    op.drop_index(op.f("ix_runs_status_lease_until"), table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("resends")
        batch.drop_column("lease_until")
