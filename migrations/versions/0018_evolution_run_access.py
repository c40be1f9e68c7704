"""Evolution runs: the door that steps each (server or trainer), the key that created a
served one and the keys that may use it; and ``judge_failed``, the outcome of a step whose
verdicts failed for reasons outside the responses.

Revision ID: 0018
Revises: 0017
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision, down_revision = "0018", "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
OUTCOMES = ("evolved", "unchanged", "generator_failed")
WITH_JUDGE_FAILED = (*OUTCOMES, "judge_failed")


def _outcome_type(values: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(
        *values, name="step_outcome", native_enum=False, create_constraint=True, length=16
    )


def upgrade() -> None:
    with op.batch_alter_table("evolution_runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "door",
                sa.Enum(
                    "server",
                    "trainer",
                    name="run_door",
                    native_enum=False,
                    create_constraint=True,
                    length=16,
                ),
                nullable=True,
            )
        )
        batch_op.add_column(sa.Column("created_by", sa.String(length=200), nullable=True))
        batch_op.add_column(
            sa.Column("key_names", JSON, nullable=False, server_default=sa.text("'[]'"))
        )
    with op.batch_alter_table("evolution_steps", schema=None) as batch_op:
        batch_op.alter_column(
            "outcome",
            existing_type=_outcome_type(OUTCOMES),
            type_=_outcome_type(WITH_JUDGE_FAILED),
            nullable=False,
        )


def downgrade() -> None:
    # A judge_failed step judged nothing and added nothing: no spreads, no criteria hang on it.
    op.execute("DELETE FROM evolution_steps WHERE outcome = 'judge_failed'")
    with op.batch_alter_table("evolution_steps", schema=None) as batch_op:
        batch_op.alter_column(
            "outcome",
            existing_type=_outcome_type(WITH_JUDGE_FAILED),
            type_=_outcome_type(OUTCOMES),
            nullable=False,
        )
    with op.batch_alter_table("evolution_runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_evolution_runs_run_door"), type_="check")
        batch_op.drop_column("key_names")
        batch_op.drop_column("created_by")
        batch_op.drop_column("door")
