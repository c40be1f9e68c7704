"""Score chunks (the units workers claim) and the identity key of score jobs.

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "score_chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column(
            "completion_ids",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("judgments", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "pending",
                "running",
                "done",
                "failed",
                "cancelled",
                name="chunk_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("cached", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["score_jobs.id"], name=op.f("fk_score_chunks_job_id_score_jobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_score_chunks")),
        sa.UniqueConstraint("job_id", "position", name=op.f("uq_score_chunks_job_id_position")),
    )
    with op.batch_alter_table("score_chunks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_score_chunks_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_score_chunks_status"), ["status"], unique=False)

    with op.batch_alter_table("score_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("job_key", sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_score_jobs_job_key"), ["job_key"])


def downgrade() -> None:
    with op.batch_alter_table("score_jobs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_score_jobs_job_key"), type_="unique")
        batch_op.drop_column("job_key")

    with op.batch_alter_table("score_chunks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_score_chunks_status"))
        batch_op.drop_index(batch_op.f("ix_score_chunks_job_id"))

    op.drop_table("score_chunks")
