"""Reward groups: indexes for the sweep that deletes spent rows by their times.

The sweep (``scoring.groups``) deletes rows answered before a bound (``claimed_at``) and rows
still unclaimed long past their time-out (``created_at``); without these indexes each sweep
read the whole table.

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

from alembic import op

revision, down_revision = "0017", "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reward_group_members", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_reward_group_members_created_at"), ["created_at"])
        batch_op.create_index(batch_op.f("ix_reward_group_members_claimed_at"), ["claimed_at"])


def downgrade() -> None:
    with op.batch_alter_table("reward_group_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reward_group_members_claimed_at"))
        batch_op.drop_index(batch_op.f("ix_reward_group_members_created_at"))
