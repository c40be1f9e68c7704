"""Reward groups: which process waits on each rollout, and whether its answer was read.

A request equal to a stored rollout whose waiting process is gone, and whose answer nobody
read, is that rollout's retry (``scoring.groups``): it takes the row over instead of joining
a group as a second copy. ``caller`` names the process (``scoring.group_callers``),
``collected_at`` says when its caller read the answer.

Revision ID: 0019
Revises: 0018
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0019", "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reward_group_members", schema=None) as batch_op:
        batch_op.add_column(sa.Column("caller", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("collected_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reward_group_members", schema=None) as batch_op:
        batch_op.drop_column("collected_at")
        batch_op.drop_column("caller")
