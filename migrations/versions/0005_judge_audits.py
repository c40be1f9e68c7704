"""Attack audits of judge configs (``rubricsvc judges audit``).

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "judge_audits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("judge_config_id", sa.Integer(), nullable=False),
        sa.Column("set_name", sa.String(length=200), nullable=False),
        sa.Column("set_hash", sa.String(length=64), nullable=False),
        sa.Column("max_inflation", sa.Float(), nullable=False),
        sa.Column(
            "report",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["judge_config_id"],
            ["judge_configs.id"],
            name=op.f("fk_judge_audits_judge_config_id_judge_configs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judge_audits")),
    )
    op.create_index(
        op.f("ix_judge_audits_judge_config_id"), "judge_audits", ["judge_config_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_judge_audits_judge_config_id"), table_name="judge_audits")
    op.drop_table("judge_audits")
