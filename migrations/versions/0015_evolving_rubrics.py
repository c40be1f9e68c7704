"""Evolving rubrics: evolution runs, each prompt's track, its steps, the criteria they added
and each criterion's spread per step; and ``evolved``, the origin of a version a run grew.

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from migrations.immutability import create_immutability_triggers, drop_immutability_triggers

revision, down_revision = "0015", "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ORIGINS = ("human", "llm", "imported")
WITH_EVOLVED = (*ORIGINS, "evolved")


def _origin_type(values: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(*values, name="origin", native_enum=False, create_constraint=True, length=16)


def _origins(new: tuple[str, ...], old: tuple[str, ...]) -> None:
    """Rewrite the CHECK constraint of ``rubric_versions.origin`` to allow ``new``. Versions
    are frozen by triggers that a batch rebuild on SQLite would drop, so they are dropped and
    made again around the change on every database."""
    bind = op.get_bind()
    drop_immutability_triggers(bind)
    with op.batch_alter_table("rubric_versions") as batch:
        batch.alter_column(
            "origin", existing_type=_origin_type(old), type_=_origin_type(new), nullable=False
        )
    create_immutability_triggers(bind)


def upgrade() -> None:
    _origins(WITH_EVOLVED, ORIGINS)
    op.create_table(
        "evolution_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "settings",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evolution_runs")),
        sa.UniqueConstraint("name", name=op.f("uq_evolution_runs_name")),
    )
    op.create_table(
        "evolution_tracks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("persistent_version_id", sa.Integer(), nullable=False),
        sa.Column("current_version_id", sa.Integer(), nullable=False),
        sa.Column("generator_calls", sa.Integer(), nullable=False),
        sa.Column("generator_failures", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["current_version_id"],
            ["rubric_versions.id"],
            name=op.f("fk_evolution_tracks_current_version_id_rubric_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["persistent_version_id"],
            ["rubric_versions.id"],
            name=op.f("fk_evolution_tracks_persistent_version_id_rubric_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_evolution_tracks_prompt_id_prompts")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["evolution_runs.id"],
            name=op.f("fk_evolution_tracks_run_id_evolution_runs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evolution_tracks")),
        sa.UniqueConstraint(
            "run_id", "prompt_id", name=op.f("uq_evolution_tracks_run_id_prompt_id")
        ),
    )
    with op.batch_alter_table("evolution_tracks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_evolution_tracks_prompt_id"), ["prompt_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_evolution_tracks_run_id"), ["run_id"], unique=False)

    op.create_table(
        "evolution_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("track_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("version_before_id", sa.Integer(), nullable=False),
        sa.Column("version_after_id", sa.Integer(), nullable=False),
        sa.Column(
            "outcome",
            sa.Enum(
                "evolved",
                "unchanged",
                "generator_failed",
                name="step_outcome",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column(
            "rollouts",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "generator",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "refused",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["track_id"],
            ["evolution_tracks.id"],
            name=op.f("fk_evolution_steps_track_id_evolution_tracks"),
        ),
        sa.ForeignKeyConstraint(
            ["version_after_id"],
            ["rubric_versions.id"],
            name=op.f("fk_evolution_steps_version_after_id_rubric_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["version_before_id"],
            ["rubric_versions.id"],
            name=op.f("fk_evolution_steps_version_before_id_rubric_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evolution_steps")),
        sa.UniqueConstraint("track_id", "step", name=op.f("uq_evolution_steps_track_id_step")),
    )
    with op.batch_alter_table("evolution_steps", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evolution_steps_track_id"), ["track_id"], unique=False)

    op.create_table(
        "evolved_criteria",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("track_id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("explanation", sa.Text(), nullable=True),
        sa.Column(
            "category",
            sa.Enum(
                "essential",
                "important",
                "optional",
                "pitfall",
                name="category",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("theme", sa.String(length=100), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "active",
                "inactive",
                name="evolved_state",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("inactive_step", sa.Integer(), nullable=True),
        sa.Column("inactive_reason", sa.String(length=200), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["step_id"],
            ["evolution_steps.id"],
            name=op.f("fk_evolved_criteria_step_id_evolution_steps"),
        ),
        sa.ForeignKeyConstraint(
            ["track_id"],
            ["evolution_tracks.id"],
            name=op.f("fk_evolved_criteria_track_id_evolution_tracks"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evolved_criteria")),
        sa.UniqueConstraint(
            "track_id", "content_hash", name=op.f("uq_evolved_criteria_track_id_content_hash")
        ),
    )
    with op.batch_alter_table("evolved_criteria", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evolved_criteria_step_id"), ["step_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_evolved_criteria_track_id"), ["track_id"], unique=False
        )

    op.create_table(
        "evolved_criterion_spreads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("criterion_id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column(
            "values",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("spread", sa.Float(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["criterion_id"],
            ["evolved_criteria.id"],
            name=op.f("fk_evolved_criterion_spreads_criterion_id_evolved_criteria"),
        ),
        sa.ForeignKeyConstraint(
            ["step_id"],
            ["evolution_steps.id"],
            name=op.f("fk_evolved_criterion_spreads_step_id_evolution_steps"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evolved_criterion_spreads")),
        sa.UniqueConstraint(
            "criterion_id",
            "step_id",
            name=op.f("uq_evolved_criterion_spreads_criterion_id_step_id"),
        ),
    )
    with op.batch_alter_table("evolved_criterion_spreads", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_evolved_criterion_spreads_criterion_id"), ["criterion_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_evolved_criterion_spreads_step_id"), ["step_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("evolved_criterion_spreads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evolved_criterion_spreads_step_id"))
        batch_op.drop_index(batch_op.f("ix_evolved_criterion_spreads_criterion_id"))

    op.drop_table("evolved_criterion_spreads")
    with op.batch_alter_table("evolved_criteria", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evolved_criteria_track_id"))
        batch_op.drop_index(batch_op.f("ix_evolved_criteria_step_id"))

    op.drop_table("evolved_criteria")
    with op.batch_alter_table("evolution_steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evolution_steps_track_id"))

    op.drop_table("evolution_steps")
    with op.batch_alter_table("evolution_tracks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evolution_tracks_run_id"))
        batch_op.drop_index(batch_op.f("ix_evolution_tracks_prompt_id"))

    op.drop_table("evolution_tracks")
    op.drop_table("evolution_runs")
    _origins(ORIGINS, WITH_EVOLVED)
