"""The class of a failed judgment: infrastructure, judge or response.

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.add_column(sa.Column("failure", sa.String(length=20), nullable=True))
    # Failures stored before classes existed: a context overflow is the response's, the
    # judge's unparseable output is the judge's, anything else the infrastructure's.
    op.execute(
        "UPDATE judgments SET failure = CASE"
        " WHEN error LIKE '%exceeds the model''s context%' THEN 'response'"
        " WHEN error LIKE 'unparseable judge output%' THEN 'judge'"
        " ELSE 'infrastructure' END"
        " WHERE status = 'failed'"
    )


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_column("failure")
