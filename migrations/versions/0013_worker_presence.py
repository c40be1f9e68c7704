"""Worker presence: the judges each running worker serves, refreshed by its heartbeat.

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision, down_revision = "0013", "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "worker_presence",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column(
            "judges",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_worker_presence")),
    )
    op.create_index(
        op.f("ix_worker_presence_seen_at"), "worker_presence", ["seen_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_worker_presence_seen_at"), table_name="worker_presence")
    op.drop_table("worker_presence")
