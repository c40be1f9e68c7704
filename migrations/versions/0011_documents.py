"""Evidence for deep-research rewards: documents stored once by content hash and shared by the
completions that cite them; criterion kind ``citations``; the documents a drafted criterion came
from (``criteria.evidence``).

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from migrations.immutability import create_immutability_triggers, drop_immutability_triggers

revision, down_revision = "0011", "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
KINDS_BEFORE = ("judge", "check")
KINDS_AFTER = ("judge", "check", "citations")


def _kind(kinds: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(
        *kinds, name="criterion_kind", native_enum=False, create_constraint=True, length=16
    )


def upgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        "documents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("retrieved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_documents")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_documents_content_hash")),
    )
    op.create_table(
        "completion_documents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("completion_id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["completion_id"],
            ["completions.id"],
            name=op.f("fk_completion_documents_completion_id_completions"),
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_completion_documents_document_id_documents"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_completion_documents")),
        sa.UniqueConstraint(
            "completion_id", "position", name=op.f("uq_completion_documents_completion_id_position")
        ),
    )
    op.create_index(
        op.f("ix_completion_documents_document_id"), "completion_documents", ["document_id"]
    )
    # SQLite rebuilds the table to change a CHECK constraint, which drops its triggers too.
    drop_immutability_triggers(bind)
    with op.batch_alter_table("criteria") as batch:
        batch.alter_column(
            "kind", existing_type=_kind(KINDS_BEFORE), type_=_kind(KINDS_AFTER), nullable=False
        )
        batch.add_column(sa.Column("evidence", JSON_TYPE, nullable=True))
    create_immutability_triggers(bind)


def downgrade() -> None:
    bind = op.get_bind()
    drop_immutability_triggers(bind)
    # Fails while a criterion of kind citations is stored.
    with op.batch_alter_table("criteria") as batch:
        batch.drop_column("evidence")
        batch.alter_column(
            "kind", existing_type=_kind(KINDS_AFTER), type_=_kind(KINDS_BEFORE), nullable=False
        )
    create_immutability_triggers(bind)
    op.drop_index(op.f("ix_completion_documents_document_id"), table_name="completion_documents")
    op.drop_table("completion_documents")
    op.drop_table("documents")
