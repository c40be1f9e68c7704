"""Review sessions: the review pages' signed-in sessions, so that signing out ends one in every
server process.

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0014", "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "review_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name=op.f("fk_review_sessions_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_review_sessions")),
    )
    op.create_index(op.f("ix_review_sessions_key_id"), "review_sessions", ["key_id"], unique=False)
    op.create_index(
        op.f("ix_review_sessions_expires_at"), "review_sessions", ["expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_review_sessions_expires_at"), table_name="review_sessions")
    op.drop_index(op.f("ix_review_sessions_key_id"), table_name="review_sessions")
    op.drop_table("review_sessions")
