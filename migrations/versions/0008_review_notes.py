"""A review (approve, retire) keeps its note beside the reviewer's name; the review queue
filters drafts by status and age.

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.immutability import create_immutability_triggers, drop_immutability_triggers

revision, down_revision = "0008", "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A lifecycle column like status and reviewed_by: the immutability triggers list the
    # frozen columns by name, so this one stays writable.
    op.add_column("rubric_versions", sa.Column("review_note", sa.Text(), nullable=True))
    op.create_index(
        op.f("ix_rubric_versions_status_created_at"),
        "rubric_versions",
        ["status", "created_at"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_rubric_versions_status_created_at"), table_name="rubric_versions")
    # SQLite drops a column by copying the table, which would lose its triggers.
    drop_immutability_triggers(op.get_bind())
    with op.batch_alter_table("rubric_versions") as batch:
        batch.drop_column("review_note")
    create_immutability_triggers(op.get_bind())
