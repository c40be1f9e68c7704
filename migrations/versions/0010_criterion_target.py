"""A criterion's target: what a judged criterion is judged on (the final response, or the
agent trajectory that led to it).

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.immutability import create_immutability_triggers, drop_immutability_triggers

revision, down_revision = "0010", "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    # Criteria are frozen by triggers; a batch rebuild on SQLite would drop them, so they are
    # dropped and made again around the change on every database.
    drop_immutability_triggers(bind)
    with op.batch_alter_table("criteria") as batch:
        batch.add_column(
            sa.Column("target", sa.String(length=16), nullable=False, server_default="response")
        )
    create_immutability_triggers(bind)


def downgrade() -> None:
    bind = op.get_bind()
    drop_immutability_triggers(bind)
    with op.batch_alter_table("criteria") as batch:
        batch.drop_column("target")
    create_immutability_triggers(bind)
