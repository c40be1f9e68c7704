"""Promotion gates: a distilled judge is a candidate until its gate approves it as a reward.

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision, down_revision = "0012", "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "judge_gates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("judge_config_id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "candidate",
                "approved",
                "rejected",
                name="judge_gate_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
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
            name=op.f("fk_judge_gates_judge_config_id_judge_configs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judge_gates")),
    )
    op.create_index(
        op.f("ix_judge_gates_judge_config_id"), "judge_gates", ["judge_config_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_judge_gates_judge_config_id"), table_name="judge_gates")
    op.drop_table("judge_gates")
