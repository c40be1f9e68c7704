"""Rubric assignments: a prompt or a completion names shared rubrics it is scored against.

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0009", "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rubric_assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rubric_id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=True),
        sa.Column("completion_id", sa.Integer(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["rubric_id"], ["rubrics.id"], name=op.f("fk_rubric_assignments_rubric_id_rubrics")
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_rubric_assignments_prompt_id_prompts")
        ),
        sa.ForeignKeyConstraint(
            ["completion_id"],
            ["completions.id"],
            name=op.f("fk_rubric_assignments_completion_id_completions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rubric_assignments")),
        sa.UniqueConstraint(
            "rubric_id", "prompt_id", name=op.f("uq_rubric_assignments_rubric_id_prompt_id")
        ),
        sa.UniqueConstraint(
            "rubric_id",
            "completion_id",
            name=op.f("uq_rubric_assignments_rubric_id_completion_id"),
        ),
    )
    for column in ("rubric_id", "prompt_id", "completion_id"):
        op.create_index(op.f(f"ix_rubric_assignments_{column}"), "rubric_assignments", [column])


def downgrade() -> None:
    for column in ("rubric_id", "prompt_id", "completion_id"):
        op.drop_index(op.f(f"ix_rubric_assignments_{column}"), table_name="rubric_assignments")
    op.drop_table("rubric_assignments")
