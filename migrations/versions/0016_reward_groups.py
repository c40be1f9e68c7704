"""Reward groups: the rollouts a server holds until their prompt's group is complete.

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision, down_revision = "0016", "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "reward_group_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_key", sa.String(length=64), nullable=False),
        sa.Column("group_size", sa.Integer(), nullable=False),
        sa.Column("request", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("batch", sa.String(length=36), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("answer", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reward_group_members")),
    )
    with op.batch_alter_table("reward_group_members", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_reward_group_members_group_key"), ["group_key"])
        batch_op.create_index(batch_op.f("ix_reward_group_members_batch"), ["batch"])


def downgrade() -> None:
    with op.batch_alter_table("reward_group_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reward_group_members_batch"))
        batch_op.drop_index(batch_op.f("ix_reward_group_members_group_key"))
    op.drop_table("reward_group_members")
